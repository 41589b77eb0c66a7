"""Decision time per round of the elastic policies against cluster size (`scale.py --sections decisions`).

Each point is one policy on one cluster size, measured in a fresh process (so peak RSS is the point's own):

- **Cluster**: G GPUs of three types in the proportions of Sia's Saturn cluster (`6x4:t4,2x8:a100,3x8:rtx`:
  3/8 of the GPUs T4 on 4-GPU nodes, 1/4 A100 and the rest RTX on 8-GPU nodes), priced with Sia's per-type
  profiles (`--profiles`).
- **Workload**: Philly jobs (the bundled trace: real GPU counts, durations and the loader's applications),
  dense enough to keep J = round(`--jobs-at-8192` × G / 8,192) jobs active: J jobs drawn as the jobs active
  at an instant are (length-biased, each with a uniform share of its work left) arrive in the first minute,
  then Poisson arrivals at J / (mean duration) per second, so arrivals and completions keep coming.
- **Measure** (in `--repeats` fresh processes, the one with the lowest CPU p99 kept): the simulator runs
  `--rounds` minutes of simulated time; every call of the policy's `schedule`
  is timed with `time.thread_time` (CPU of this thread: the bar's judge, since wall time on a shared machine
  includes other processes' turns) and `time.perf_counter` (wall). The first minute (the arrival burst) is
  measured too. `budget_s` records the policy's per-round time budget when it has one (None: unbounded).

Policies are a list (`--policies`): a name that is not registered yet is skipped with a note, so the
project's own policy is one more name once it lands. `--options NAME:KEY=VALUE` sets a policy option;
by default the policies that need one to decide within a second at 8,192 GPUs get a per-round budget
(`DEFAULT_OPTIONS`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_POLICIES = "pollux,sia,jabas,jabas_scaled,lyra,lyra_scaled,ones,optimus-online,elastisched"
DEFAULT_SIZES = "100,512,2048,8192"
#: the per-round budgets the policies need to decide within BAR_S at 8,192 GPUs (docs/scale.md); a budget
#: that never binds (the Pollux workloads) changes no decision
DEFAULT_OPTIONS = ("pollux:budget_s=0.8", "sia:budget_s=0.8", "jabas:budget_s=0.8", "jabas_scaled:budget_s=0.8")
DEFAULT_PROFILES = HERE.parent.parent / "shared" / "peer-data" / "sia" / "traces"
ROUND_S = 60.0  # measured window = rounds × one minute of simulated time
BAR_S = 1.0  # issue 22: p99 decision time per round at 1,000 jobs on 8,192 GPUs


def cluster_spec(gpus: int) -> str:
    """`gpus` GPUs in Saturn's proportions: 3/8 T4 (4-GPU nodes), 1/4 A100 and the rest RTX (8-GPU nodes)."""
    t4 = max(1, round(gpus * 3 / 8 / 4))
    a100 = max(1, round(gpus / 4 / 8))
    rtx = max(1, (gpus - 4 * t4 - 8 * a100) // 8)
    return f"{t4}x4:t4,{a100}x8:a100,{rtx}x8:rtx"


def target_jobs(gpus: int, jobs_at_8192: int) -> int:
    return max(4, round(jobs_at_8192 * gpus / 8192))


def dense_workload(models: Any, jobs: int, minutes: int, seed: int) -> Any:
    """Philly jobs at the density that keeps `jobs` active (module docstring)."""
    from elastisched.core.types import JobSpec
    from elastisched.workloads import load_workload
    from elastisched.workloads.schema import finish

    trace = load_workload("philly", models).jobs
    dur = np.array([j.duration or 0.0 for j in trace])
    rng = np.random.default_rng(seed)
    start = rng.choice(len(trace), size=jobs, p=dur / dur.sum())  # active at an instant: length-biased
    rate = jobs / float(dur.mean())  # Little's law: arrivals per second that keep `jobs` active
    n_new = rng.poisson(rate * (minutes * ROUND_S))
    later = rng.choice(len(trace), size=n_new)
    times = np.concatenate([np.sort(rng.uniform(0.0, ROUND_S, jobs)),
                            np.sort(rng.uniform(ROUND_S, minutes * ROUND_S, n_new))])
    left = np.concatenate([rng.uniform(0.05, 1.0, jobs), np.ones(n_new)])
    out = []
    for k, (i, t, f) in enumerate(zip(np.concatenate([start, later]), times, left, strict=True)):
        s = trace[int(i)]
        out.append((k + 1, JobSpec(job_id=f"d{k}-{s.job_id}", submit_time=float(round(t, 3)),
                                   application=s.application, num_gpus=s.num_gpus, batch_size=s.batch_size,
                                   min_gpus=s.min_gpus, max_gpus=s.max_gpus, work_scale=s.work_scale * float(f),
                                   duration=(s.duration or 0.0) * float(f) or None)))
    return finish(f"dense-philly:jobs={jobs},minutes={minutes},seed={seed}", "dense-philly", out, "", keep_order=True)


def _budget(policy: Any) -> float | None:
    b = getattr(policy, "budget_s", None)
    return float(b) if b is not None else None


def measure_point(policy_name: str, options: dict[str, Any], gpus: int, jobs: int, minutes: int, seed: int,
                  profiles: str) -> dict[str, Any]:
    """One point, in this process: simulate and time every `schedule` call."""
    from elastisched.models.registry import PerfModels
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.sim.runner import load_cluster

    models = PerfModels.load(profiles)
    nodes = load_cluster(cluster_spec(gpus))
    wl = dense_workload(models, jobs, minutes, seed)
    for app in sorted({j.application for j in wl.jobs}):  # build the throughput models outside the clock
        for t in sorted({n.gpu_type for n in nodes}):
            models.app(app).model(t)
    policy = make_policy(policy_name, **options)
    inner = policy.schedule
    cpu: list[float] = []
    wall: list[float] = []
    active: list[int] = []

    def timed(snap: Any, ctx: Any) -> Any:
        c0, w0 = time.thread_time(), time.perf_counter()
        d = inner(snap, ctx)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
        active.append(len(snap.jobs))
        return d

    policy.schedule = timed  # type: ignore[method-assign]
    c0, w0 = time.process_time(), time.perf_counter()
    res = simulate(wl, policy, nodes, models, SimConfig(seed=seed, max_time=minutes * ROUND_S))
    sim_cpu, sim_wall = time.process_time() - c0, time.perf_counter() - w0
    return _summary(policy_name, options, gpus, nodes, cpu, wall, active, _budget(policy),
                    {"sim_cpu_s": sim_cpu, "sim_wall_s": sim_wall, "finished": res.summary["n_finished"],
                     "submitted": len(wl.jobs)})


def _summary(policy: str, options: dict[str, Any], gpus: int, nodes: Any, cpu: list[float], wall: list[float],
             active: list[int], budget: float | None, extra: dict[str, Any]) -> dict[str, Any]:
    c, w = np.array(cpu or [0.0]), np.array(wall or [0.0])
    types = sorted({n.gpu_type for n in nodes})
    return {"policy": policy, "options": options, "gpus": gpus, "cluster": cluster_spec(gpus), "types": types,
            "nodes": len(nodes), "jobs": float(np.mean(active)) if active else 0.0,
            "jobs_max": max(active, default=0), "rounds": len(cpu),
            "p50_s": float(np.percentile(w, 50)), "p99_s": float(np.percentile(w, 99)), "max_s": float(w.max()),
            "cpu_p50_s": float(np.percentile(c, 50)), "cpu_p99_s": float(np.percentile(c, 99)),
            "cpu_max_s": float(c.max()), "cpu_total_s": float(c.sum()), "budget_s": budget,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def _parse_options(items: list[str]) -> dict[str, dict[str, Any]]:
    """`NAME:KEY=VALUE` (VALUE read as JSON when it parses, else text) → {name: {key: value}}."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, sep, kv = item.partition(":")
        key, eq, raw = kv.partition("=")
        if not sep or not eq or not key:
            raise SystemExit(f"--options: {item!r} is not NAME:KEY=VALUE")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(name, {})[key] = value
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("decisions")
    g.add_argument("--policies", default=DEFAULT_POLICIES,
                   help="comma-separated policies (unregistered ones are skipped; default: %(default)s)")
    g.add_argument("--sizes", default=DEFAULT_SIZES,
                   help="comma-separated cluster sizes in GPUs (default: %(default)s)")
    g.add_argument("--jobs-at-8192", type=int, default=1000, help="active jobs at 8,192 GPUs, scaled with the "
                   "cluster (default: %(default)s)")
    g.add_argument("--rounds", type=int, default=30, help="simulated minutes measured per point (default: %(default)s)")
    g.add_argument("--options", action="append", default=None, metavar="NAME:KEY=VALUE",
                   help=f"a policy option, repeatable; replaces the defaults ({' '.join(DEFAULT_OPTIONS)}); "
                   "NAME:budget_s=null runs a policy without its budget")
    g.add_argument("--profiles", default=str(DEFAULT_PROFILES), help="Sia per-type traces (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="workload and policy seed (default: %(default)s)")
    g.add_argument("--repeats", type=int, default=3,
                   help="fresh processes per point, the fastest kept (default: %(default)s)")
    g.add_argument("--point-timeout", type=float, default=3600.0,
                   help="wall seconds one point may take before it is recorded as unfinished (default: %(default)s)")


def _known(name: str) -> bool:
    from elastisched.policies.base import is_registered

    try:
        return is_registered(name)
    except Exception:  # a policy package that fails to import counts as not there yet
        return False


def _fastest(policy: str, options: dict[str, Any], gpus: int, args: argparse.Namespace) -> dict[str, Any]:
    """The point measured in `args.repeats` fresh processes; the one with the lowest CPU p99 is kept (issue 22:
    fastest of 3), with every run's CPU p99 beside it. The runs are the same simulation (same seed)."""
    runs = [_run_child(policy, options, gpus, args) for _ in range(max(1, args.repeats))]
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    best = min(good, key=lambda r: r["cpu_p99_s"])
    return {**best, "repeats": len(runs), "cpu_p99_runs_s": [r["cpu_p99_s"] for r in good]}


def _run_child(policy: str, options: dict[str, Any], gpus: int, args: argparse.Namespace) -> dict[str, Any]:
    jobs = target_jobs(gpus, args.jobs_at_8192)
    cmd = [sys.executable, str(Path(__file__).resolve()), json.dumps(
        {"policy": policy, "options": options, "gpus": gpus, "jobs": jobs, "minutes": args.rounds,
         "seed": args.seed, "profiles": args.profiles})]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.point_timeout, check=False,
                             env={**os.environ, "PYTHONHASHSEED": "0"})
    except subprocess.TimeoutExpired:
        return {"policy": policy, "options": options, "gpus": gpus, "cluster": cluster_spec(gpus), "jobs": jobs,
                "error": f"unfinished after {args.point_timeout:.0f} s wall"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"policy": policy, "options": options, "gpus": gpus, "cluster": cluster_spec(gpus), "jobs": jobs,
                "error": (out.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return dict(json.loads(lines[-1]))


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    if args.quick:
        sizes = [s for s in sizes if s <= 1024] or sizes[:1]
    opts = _parse_options(list(args.options if args.options is not None else DEFAULT_OPTIONS))
    opts = {name: {k: v for k, v in o.items() if v is not None} for name, o in opts.items()}
    points: list[dict[str, Any]] = []
    skipped: list[str] = []
    for name in [p.strip() for p in str(args.policies).split(",") if p.strip()]:
        if not _known(name):
            skipped.append(name)
            print(f"  {name}: not registered here, skipped", flush=True)
            continue
        for g in sizes:
            row = _fastest(name, opts.get(name, {}), g, args)
            points.append(row)
            print("  " + _line(row), flush=True)
    top = max(sizes)
    at_top = [p for p in points if p["gpus"] == top and "error" not in p]
    return {"points": points, "skipped": skipped, "bar_s": BAR_S, "rounds_minutes": args.rounds,
            "jobs_at_8192": args.jobs_at_8192, "seed": args.seed, "repeats": args.repeats,
            "clock": "thread_time (cpu_*), perf_counter",
            "meets_bar_at_top": {p["policy"]: p["cpu_p99_s"] <= BAR_S for p in at_top}}


def _line(p: dict[str, Any]) -> str:
    if "error" in p:
        return f"{p['policy']:>15} {p['gpus']:>5} GPUs: {p['error']}"
    return (f"{p['policy']:>15} {p['gpus']:>5} GPUs {p['jobs']:7.1f} jobs {p['rounds']:4d} rounds  "
            f"cpu p50 {p['cpu_p50_s']:.3f} p99 {p['cpu_p99_s']:.3f} max {p['cpu_max_s']:.3f} s  "
            f"wall p99 {p['p99_s']:.3f} s  rss {p['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":  # one point in a fresh process (called by `run`)
    spec = json.loads(sys.argv[1])
    print(json.dumps(measure_point(spec["policy"], spec["options"], spec["gpus"], spec["jobs"], spec["minutes"],
                                   spec["seed"], spec["profiles"])))
