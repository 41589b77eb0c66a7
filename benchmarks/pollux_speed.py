"""Pollux policy speed (issue 14): writes results/bench/pollux_speed.json.

1. Our `pollux` on Pollux workload-6 (16x4 T4, seed 0): CPU seconds of the whole simulation (process time,
   profiles loaded and fitted before the clock starts), wall seconds, rounds, per-round decision ms (p50 /
   p99 / max). The Pollux artifact needs ~103 minutes of one core for the same run (975 rounds at 7–10 s,
   peer-data README); target ≤ 2 minutes (50×), aim 100×.
2. Growth with jobs and GPUs: one `schedule` round on synthetic snapshots of J jobs (the six Pollux
   applications in turn, every job already running and measured, so the search is as large as it gets) on
   G GPUs (nodes of 4), J × G over {50, 100, 200} × {64, 256, 1024}; the ms of each round after a warm-up.
Run: `OPENBLAS_NUM_THREADS=1 python benchmarks/pollux_speed.py --out results/bench` (`--quick`: a smaller
scaling grid and the first simulated hours of workload-6 only).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

ARTIFACT_SECONDS = 103 * 60  # Pollux artifact, workload-6, one core (peer-data README)


def whole_run(max_time: float) -> dict[str, Any]:
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.sim.runner import setup

    s = setup("pollux:workload-6", "16x4:t4")
    for app in s.models.apps.values():  # fit the throughput models before timing
        for t in app.gpu_types:
            app.model(t)
    policy = make_policy("pollux")
    inner = policy.schedule
    round_cpu: list[float] = []

    def timed(snap: Any, ctx: Any) -> Any:  # CPU time of each round (wall time is noisy on a shared machine)
        t = time.process_time()
        d = inner(snap, ctx)
        round_cpu.append(time.process_time() - t)
        return d

    policy.schedule = timed  # type: ignore[method-assign]
    c0, w0 = time.process_time(), time.perf_counter()
    r = simulate(s.workload, policy, s.nodes, s.models, SimConfig(seed=0, max_time=max_time))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    sm = r.summary
    ms = 1e3 * np.array(round_cpu)
    return {"workload": "pollux:workload-6", "cluster": "16x4:t4", "seed": 0, "max_time": max_time,
            "finished": sm["n_finished"], "avg_jct": sm["avg_jct"], "cpu_seconds": cpu, "wall_seconds": wall,
            "rounds": sm["rounds"], "round_cpu_ms_p50": float(np.percentile(ms, 50)),
            "round_cpu_ms_p99": float(np.percentile(ms, 99)), "round_cpu_ms_max": float(ms.max()),
            "policy_cpu_seconds": float(ms.sum() / 1e3), "round_wall_ms_p50": sm["decision_ms_p50"],
            "round_wall_ms_max": sm["decision_ms_max"], "artifact_cpu_seconds": ARTIFACT_SECONDS,
            "speedup_vs_artifact": ARTIFACT_SECONDS / cpu if max_time == float("inf") else None}


def scaling(num_jobs: int, num_gpus: int, rounds: int) -> dict[str, Any]:
    """Time `schedule` on a synthetic cluster where every job is running and has been measured."""
    from elastisched.core.cluster import parse_cluster
    from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView
    from elastisched.models.registry import PerfModels
    from elastisched.policies.base import PolicyContext, make_policy

    models = PerfModels.load()
    apps = sorted(models.apps)
    nodes = parse_cluster(f"{num_gpus // 4}x4:t4")
    policy = make_policy("pollux")
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))
    specs = [JobSpec(f"j{i}", 0.0, apps[i % len(apps)], 1, models.app(apps[i % len(apps)]).init_batch_size)
             for i in range(num_jobs)]
    # start: jobs packed one GPU each while GPUs last
    allocs: dict[str, Allocation] = {}
    for i, s in enumerate(specs[: num_gpus]):
        allocs[s.job_id] = Allocation(placement=((nodes[i // 4 % len(nodes)].node_id, 1),),
                                      batch_size=s.batch_size)
    times = []
    now = 600.0
    for k in range(rounds + 1):
        jobs = {}
        for s in specs:
            a = allocs.get(s.job_id, Allocation())
            jobs[s.job_id] = JobView(s, JobPhase.RUNNING if a.placement else JobPhase.PENDING, a, epoch=1,
                                     attained_service=float(a.gpus) * now, updated_at=now,
                                     start_time=0.0 if a.placement else None, last_resize_time=now - 120.0,
                                     batch_size=(a.batch_size or s.batch_size) if a.placement else 0,
                                     model=models.app(s.application))
        snap = ClusterSnapshot(now, nodes, jobs)
        t0 = time.process_time()
        d = policy.schedule(snap, ctx)
        if k:
            times.append(time.process_time() - t0)
        allocs = {j: a for j, a in d.allocations.items() if a.placement}
        now += 60.0
    return {"jobs": num_jobs, "gpus": num_gpus, "nodes": len(nodes), "rounds_timed": rounds,
            "round_ms_mean": 1e3 * float(np.mean(times)), "round_ms_max": 1e3 * float(np.max(times)),
            "running_jobs_last": len(allocs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"benchmark": "pollux_speed", "machine": platform.platform(),
                              "python": platform.python_version()}
    result["workload6"] = whole_run(4 * 3600.0 if args.quick else float("inf"))
    print(json.dumps(result["workload6"]), flush=True)
    grid = [(50, 64), (100, 256)] if args.quick else [(j, g) for j in (50, 100, 200) for g in (64, 256, 1024)]
    result["scaling"] = []
    for j, g in grid:
        row = scaling(j, g, 2 if j * g > 50_000 else 3)
        print(json.dumps(row), flush=True)
        result["scaling"].append(row)
    path = out / "pollux_speed.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
