"""Calibration benchmark (issue 7): the same small workload live through the service and in the simulator.

1. **Profile** the example model on this machine with `elastisched profile` (1 worker x the batch and
   2 workers x half of it; 3 interleaved rounds, median per point; the Pollux format the simulator reads)
   and add its `validation-<batch>.csv`: the jobs train at a fixed global batch, the reference batch of the
   profile, so progress per epoch is just the steps of one epoch (gain 1). The 1-worker point is measured
   with two profile jobs at once (both slots busy, as live); measured alone it is kept for comparison.
2. **Measure the restart cost** live: one job through the service (fifo), launched, then resized 1 → 2 → 1
   by the API; dead time = gap between the last step of a generation (or the submission) and the first
   step of the next, less one step at the new size (read from the job's per-step log), plus the exit
   tail (last step → the service has freed the slots). Their sum over the probe's generations, divided by
   their number, goes to `meta.json` as `restart_cost_s`: the models of both bodies charge it at every
   launch and rescale (the simulator has no separate exit cost).
3. **Live run**: the service with `lyra` on a 1x2:cpu cluster (two worker slots), `--profiles` = the
   directory above; 5 elastic jobs (1–2 workers) of different lengths submitted at staggered times. Lyra
   scales them out and in as they come and go.
4. **Simulated run**: the simulator with the same policy, the same models (`service.profiles.load_models`),
   the same cluster and the same jobs at the submission offsets measured live. Lyra is consulted on events
   in both bodies (the service runs a round on every event; the simulator's 60 s tick grid is turned off
   by an `interval = None` subclass).

Writes `<out>/calibration.json`: JCT per job live and simulated, error per job and on average (target
≤ 25 %), generations per job, the profile and the restart measurements, load average before and after.
`--repeat N` (default 2) runs live + simulated N times on the same profile and restart cost; the error
is also reported with the isolated 1-worker profile. `--quick` runs a 2-job workload (a smoke test).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared helpers, also when a test loads us
from _calibration_profile import APP, BATCH, MODEL_ARGS, SCRIPT, STEPS_PER_EPOCH, run_profile, write_meta
from _calibration_profile import write_validation as write_validation  # the tests read it here
from _harness import kill_workers, start_service, stop_service, wait_healthy

TOKEN = "calibration-token-0123456789"
#: extra `python -m elastisched.service` options: `--backend ray` sets `--backend ray --ray-address ADDR` here
SERVICE_EXTRA: list[str] = []
CLUSTER = "1x2:cpu"
#: (name, submit offset s, epochs)
WORKLOAD: tuple[tuple[str, float, int], ...] = (
    ("a", 0.0, 16), ("b", 6.0, 8), ("c", 12.0, 10), ("d", 30.0, 6), ("e", 38.0, 24))
QUICK: tuple[tuple[str, float, int], ...] = (("a", 0.0, 4), ("b", 3.0, 2))


# ---------------------------------------------------------------------------------------------- service
class Service:
    """The live service on the benchmark's cluster (SQLite in `work`) and the calls the benchmark makes."""

    def __init__(self, work: Path, policy: str, profiles: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.db = f"sqlite:///{work / 'state.db'}"
        log = work / "service.log"
        self.proc, base = start_service(
            ["--db", self.db, "--cluster", CLUSTER, "--policy", policy, "--workdir", str(work / "work"),
             "--scripts-dir", str(SCRIPT.parent), "--tick", "0.2", "--grace", "20", "--profiles", str(profiles),
             *SERVICE_EXTRA],
            {**os.environ, "ELASTISCHED_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}, log)
        self.c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        try:
            wait_healthy(self.proc, base, log, every=0.2)
        except BaseException:
            self.close()
            raise

    def submit(self, name: str, epochs: int, gpus: tuple[int, int], log: Path | None = None) -> dict[str, Any]:
        args = [*MODEL_ARGS, "--epochs", str(epochs), "--batch-size", str(BATCH)]
        if log is not None:
            args += ["--log", str(log)]
        r = self.c.post("/v1/jobs", json={
            "script": str(SCRIPT), "args": args, "name": name, "gpus": gpus[0], "min_gpus": gpus[0],
            "max_gpus": gpus[1], "batch_size": BATCH, "application": APP, "work_scale": float(epochs)})
        r.raise_for_status()
        return dict(r.json())

    def wait_done(self, ids: Sequence[str], timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = [self.c.get(f"/v1/jobs/{j}").json() for j in ids]
            if all(j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs):
                return jobs
            time.sleep(0.5)
        raise SystemExit(f"jobs not done after {timeout}s: {[(j['name'], j['state']) for j in jobs]}")

    def close(self) -> None:
        self.c.close()
        stop_service(self.proc)
        kill_workers(self.db)


def _steps(log: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []


def _wait_steps(log: Path, gen: int, n: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(s["gen"] == gen for s in _steps(log)) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"generation {gen} did not log {n} steps in {timeout}s")
        time.sleep(0.2)


def iteration_time(models: Any, world: int) -> float:
    app = models.app(APP)
    return float(app.iteration_time("cpu", (world,), app.batch_config(world, BATCH)))


def dead_times(steps: list[dict[str, Any]], submit_time: float, models: Any) -> list[dict[str, Any]]:
    """Seconds without progress at the launch and at every generation change: gap between the last step
    before (or the submission) and the end of the first step after, less one modelled step at the new size."""
    out: list[dict[str, Any]] = []
    prev_t, prev_gen = submit_time, None
    for s in steps:
        if s["gen"] != prev_gen:
            gap = s["t"] - prev_t
            out.append({"kind": "launch" if prev_gen is None else "resize", "world": s["world"],
                        "gap_s": gap, "dead_s": gap - iteration_time(models, s["world"])})
            prev_gen = s["gen"]
        prev_t = s["t"]
    return out


def load_models(profiles: Path) -> Any:
    from elastisched.service.profiles import load_models as load

    return load(profiles)


def measure_restart(tmp: Path, app_dir: Path) -> dict[str, Any]:
    """One job launched, resized 1 → 2 → 1 through the API; dead time of each (fifo keeps the admin size)."""
    log = tmp / "restart-steps.jsonl"
    svc = Service(tmp / "restart", "fifo", app_dir.parent)
    try:
        job = svc.submit("restart-probe", 6, (1, 1), log)
        _wait_steps(log, 1, STEPS_PER_EPOCH)
        svc.c.post(f"/v1/jobs/{job['id']}:resize", json={"gpus": 2}).raise_for_status()
        _wait_steps(log, 2, STEPS_PER_EPOCH)
        svc.c.post(f"/v1/jobs/{job['id']}:resize", json={"gpus": 1}).raise_for_status()
        done = svc.wait_done([job["id"]], 300)[0]
    finally:
        svc.close()
    steps = _steps(log)
    dead = dead_times(steps, done["submit_time"], load_models(app_dir.parent))
    tail = done["end_time"] - steps[-1]["t"]
    return {"events": dead, "tail_s": tail, "state": done["state"],
            "restart_cost_s": per_generation_cost(dead, tail)}


def per_generation_cost(dead: Sequence[dict[str, Any]], tail_s: float) -> float:
    """The live overhead of one generation, as the simulator charges it (once per launch or rescale, GPUs
    held, no progress): every generation starts (launch / relaunch) and stops (checkpointed exit inside the
    next generation's gap, or the exit after the last step: `tail_s`, until the service has seen the job
    finish and freed its slots). The probe job's total overhead spread over its generations."""
    return (sum(d["dead_s"] for d in dead) + tail_s) / len(dead)


# ---------------------------------------------------------------------------------------------- runs
def live_run(tmp: Path, profiles: Path, workload: Sequence[tuple[str, float, int]], policy: str = "lyra"
             ) -> list[dict[str, Any]]:
    svc = Service(tmp, policy, profiles)
    logs = {name: tmp / f"steps-{name}.jsonl" for name, _, _ in workload}
    try:
        t0 = time.time()
        ids = []
        for name, offset, epochs in workload:
            time.sleep(max(0.0, t0 + offset - time.time()))
            ids.append(svc.submit(name, epochs, (1, 2), logs[name])["id"])
        done = svc.wait_done(ids, 900)
        jobs = [svc.c.get(f"/v1/jobs/{j}").json() for j in ids]
    finally:
        svc.close()
    out = []
    for (name, _off, epochs), j, d in zip(workload, jobs, done, strict=True):
        gens = [{"generation": g["generation"], "cause": g["cause"],
                 "gpus": sum(int(k) for _, k in g["placement"]), "started_at": g["started_at"],
                 "ended_at": g["ended_at"], "outcome": g["outcome"]} for g in j["generations"]]
        out.append({"name": name, "id": j["id"], "epochs": epochs, "state": d["state"],
                    "submit_time": j["submit_time"], "end_time": j["end_time"],
                    "jct_s": None if j["end_time"] is None else j["end_time"] - j["submit_time"],
                    "restarts": j["restarts"], "generations": gens,
                    "live_step_s": step_times(_steps(logs[name]))})
    return out


def step_times(steps: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Median wall time of a step per world size, from a job's per-step log (what the profile predicts)."""
    gaps: dict[int, list[float]] = {}
    for a, b in itertools.pairwise(steps):
        if a["gen"] == b["gen"]:
            gaps.setdefault(int(b["world"]), []).append(b["t"] - a["t"])
    return {str(w): statistics.median(v) for w, v in sorted(gaps.items())}


def simulate(profiles: Path, live: Sequence[dict[str, Any]], policy_name: str = "lyra") -> dict[str, dict[str, Any]]:
    """The same jobs, submitted at the offsets measured live, in the simulator with the same models."""
    from elastisched.core.cluster import parse_cluster
    from elastisched.core.types import JobSpec
    from elastisched.policies.base import make_policy
    from elastisched.service.profiles import load_models
    from elastisched.sim import SimConfig
    from elastisched.sim import simulate as run_sim
    from elastisched.workloads.schema import Workload

    base = make_policy(policy_name)

    class EventDriven(type(base)):  # type: ignore[misc]
        interval = None  # rounds on every event, as the live service runs them

    t0 = min(j["submit_time"] for j in live)
    specs = tuple(JobSpec(job_id=j["name"], submit_time=j["submit_time"] - t0, application=APP, num_gpus=1,
                          batch_size=BATCH, min_gpus=1, max_gpus=2, elastic=True, work_scale=float(j["epochs"]))
                  for j in live)
    wl = Workload("calibration", specs, "benchmarks/calibration.py", "live")
    res = run_sim(wl, EventDriven(), parse_cluster(CLUSTER, default_gpu_type="cpu"), load_models(profiles),
                  SimConfig(seed=0))
    return {str(r["job"]): {"jct_s": float(r["jct"]), "restarts": int(r["restarts"]), "avg_gpus": float(r["avg_gpus"]),
                            "start_s": float(r["start"])} for _, r in res.jobs.iterrows()}


def errors(live: Sequence[dict[str, Any]], sim: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Relative JCT error per job, (sim − live) / live, and the mean of its absolute value."""
    per = {j["name"]: (sim[j["name"]]["jct_s"] - j["jct_s"]) / j["jct_s"] for j in live
           if j["jct_s"] and j["name"] in sim}
    lm = statistics.fmean(j["jct_s"] for j in live if j["jct_s"])
    sm = statistics.fmean(s["jct_s"] for s in sim.values()) if sim else float("nan")
    return {"per_job": per, "mean_abs": statistics.fmean(abs(e) for e in per.values()) if per else float("nan"),
            "max_abs": max((abs(e) for e in per.values()), default=float("nan")),
            "avg_jct_live_s": lm, "avg_jct_sim_s": sm, "avg_jct_error": (sm - lm) / lm}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--quick", action="store_true", help="2 short jobs (smoke test)")
    ap.add_argument("--repeat", type=int, default=2, help="live + simulated runs on the same profile")
    ap.add_argument("--policy", default="lyra", help="policy of both bodies (default lyra)")
    ap.add_argument("--target", type=float, default=0.25, help="pass when the mean |JCT error| per job is at most this")
    ap.add_argument("--backend", choices=["local", "ray"], default="local", help="ray: the live runs (restart probe "
                    "included) on a local Ray cluster of one node with gpu_cpu: 2 (docs/ray.md)")
    return ap.parse_args(argv)


def measure_models(tmp: Path, result: dict[str, Any]) -> tuple[Path, Path]:
    """Steps 1 and 2: profile, then the restart probe; their measurements go into `result`. Returns the profile
    directories (co-located 1-worker point, the models of both bodies; isolated, for comparison)."""
    profiles = tmp / "profiles"
    app_dir = profiles / APP
    t = time.monotonic()
    isolated = tmp / "profiles-isolated"
    result["profile"] = run_profile(app_dir, isolated / APP)
    result["profile_s"] = time.monotonic() - t
    write_meta(app_dir, None)
    t = time.monotonic()
    result["restart"] = measure_restart(tmp, app_dir)
    result["restart_measure_s"] = time.monotonic() - t
    write_meta(app_dir, result["restart"]["restart_cost_s"])
    write_meta(isolated / APP, result["restart"]["restart_cost_s"])
    models = load_models(profiles)
    result["predicted_step_s"] = {str(w): iteration_time(models, w) for w in (1, 2)}
    result["predicted_step_isolated_s"] = {str(w): iteration_time(load_models(isolated), w) for w in (1, 2)}
    return profiles, isolated


def compare_once(work: Path, profiles: Path, isolated: Path, workload: Sequence[tuple[str, float, int]],
                 policy: str = "lyra") -> dict[str, Any]:
    """Steps 3 and 4 once: the live run, then the simulated one on its submission times, and their errors."""
    t = time.monotonic()
    live = live_run(work, profiles, workload, policy)
    sim = simulate(profiles, live, policy)
    err = errors(live, sim)
    alt = errors(live, simulate(isolated, live, policy))  # the same, with the 1-worker time measured alone
    return {"live_s": time.monotonic() - t, "loadavg_after": os.getloadavg(), "error": err,
            "error_isolated_profile": alt,
            "jobs": [{**j, "sim_jct_s": sim.get(j["name"], {}).get("jct_s"),
                      "sim_restarts": sim.get(j["name"], {}).get("restarts"),
                      "sim_avg_gpus": sim.get(j["name"], {}).get("avg_gpus"),
                      "error": err["per_job"].get(j["name"])} for j in live]}


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The error over every job of every run, and per run."""
    every = [abs(e) for r in runs for e in r["error"]["per_job"].values()]
    return {"mean_abs": statistics.fmean(every), "max_abs": max(every),
            "mean_abs_per_run": [r["error"]["mean_abs"] for r in runs],
            "avg_jct_error_per_run": [r["error"]["avg_jct_error"] for r in runs],
            "isolated_profile_mean_abs_per_run": [r["error_isolated_profile"]["mean_abs"] for r in runs]}


def write_result(result: dict[str, Any], out: Path, quick: bool) -> None:
    """`calibration[-ray][-quick].json` under `out`, and a short digest on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    result["backend"] = "ray" if OUT_SUFFIX else "local"
    policy = "" if result["policy"] == "lyra" else f"-{result['policy']}"
    name = f"calibration{policy}{OUT_SUFFIX}{'-quick' if quick else ''}.json"
    (out / name).write_text(json.dumps(result, indent=2))
    runs = result["runs"]
    print(json.dumps({"error": result["error"], "restart_cost_s": result["restart"]["restart_cost_s"],
                      "predicted_step_s": result["predicted_step_s"],
                      "runs": [[(j["name"], round(j["jct_s"], 1), round(j["sim_jct_s"], 1), j["restarts"],
                                 j["sim_restarts"], j["live_step_s"]) for j in r["jobs"]] for r in runs]}, indent=1))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    a = _parse(argv)
    if a.backend == "ray":
        return _on_ray(main, [x for x in (argv if argv is not None else sys.argv[1:]) if x not in ("--backend", "ray")])
    workload = QUICK if a.quick else WORKLOAD
    tmp = Path(tempfile.mkdtemp(prefix="elastisched-calib-"))
    result: dict[str, Any] = {"benchmark": "calibration", "policy": a.policy, "cluster": CLUSTER, "app": APP,
                              "model_args": MODEL_ARGS, "batch": BATCH, "workload": [list(w) for w in workload],
                              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                          "loadavg_before": os.getloadavg()}, "target_mean_abs_error": a.target}
    profiles, isolated = measure_models(tmp, result)
    runs = [compare_once(tmp / f"live-{k}", profiles, isolated, workload, a.policy) for k in range(a.repeat)]
    result["runs"] = runs
    result["error"] = summarize(runs)
    result["pass"] = (all(j["state"] == "SUCCEEDED" for r in runs for j in r["jobs"])
                      and result["error"]["mean_abs"] <= a.target)
    write_result(result, Path(a.out), a.quick)
    return result


def _on_ray(run: Any, argv: list[str]) -> dict[str, Any]:
    """Run the benchmark with the live service on a real Ray cluster (head + one node offering the same two
    worker slots as the local `1x2:cpu`); results go to `calibration-ray.json` (`-quick`)."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                      "object_store_memory": 80 * 2**20})
    c.add_node(num_cpus=1, resources={"gpu_cpu": 2}, labels={"pool": "train"}, object_store_memory=80 * 2**20)
    c.wait_for_nodes()
    SERVICE_EXTRA[:] = ["--backend", "ray", "--ray-address", c.address]
    global OUT_SUFFIX
    OUT_SUFFIX = "-ray"
    try:
        result: dict[str, Any] = run(argv)
    finally:
        c.shutdown()
    return result


OUT_SUFFIX = ""

if __name__ == "__main__":
    main()
