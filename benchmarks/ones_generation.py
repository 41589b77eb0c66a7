"""ONES speed benchmark: one scheduling round (= one generation, ones.md §2.8) of the `ones` policy.

Target: ≤ 100 ms at 200 active jobs on 1,024 GPUs; the scaling curve up to 1,000 jobs on 10,000 GPUs.
Synthetic snapshots: nodes of 4 GPUs, every job running on a packed block (the cluster ~90 % busy), half the
jobs executed with observed throughputs and an epoch log, a tenth new. The first round builds the population
(excluded); the median and max of the next rounds are reported, plus the generation step alone.
Also times the `reorder` operator (placing a population member on nodes) at 800 GPUs / 100 jobs and at 10×
both: ~10× time means linear, a GPUs × jobs loop would be ~100×. Writes ``<out>/ones_generation.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView
from elastisched.policies.base import PolicyContext
from elastisched.policies.ones import ops
from elastisched.policies.ones.policy import OnesPolicy

SIZES = ((200, 1024), (100, 512), (400, 2048), (600, 4096), (800, 8192), (1000, 10000))


def snapshot(num_jobs: int, gpus: int, seed: int = 0) -> ClusterSnapshot:
    rng = np.random.default_rng(seed)
    nodes = tuple(NodeView(f"n{i}", "t4", 4, index=i) for i in range(gpus // 4))
    sizes = rng.integers(1, 2 * max(1, int(0.9 * gpus / num_jobs)), num_jobs)
    jobs: dict[str, JobView] = {}
    slot = 0
    for k in range(num_jobs):
        n = int(sizes[k]) if k % 10 and slot + sizes[k] <= 0.9 * gpus else 0
        placement: list[tuple[str, int]] = []
        s = slot
        while s < slot + n:
            take = min(4 - s % 4, slot + n - s)
            placement.append((f"n{s // 4}", take))
            s += take
        slot += n
        epochs = float(rng.uniform(1.5, 20)) if k % 2 else float(rng.uniform(0, 0.9))
        curve = tuple(np.linspace(0.1, 0.8, 30))
        spec = JobSpec(f"j{k}", float(k), "cifar10", 4, 1024, attrs={
            "epoch_work": 100.0, "epoch_size": 20000, "local_batch": 256, "lr": 0.005, "max_lr": 0.08,
            "initial_loss": 6.9, "acc_curve": curve, "loss_curve": tuple(np.linspace(3, 0.5, 30))})
        obs = {n: 1000.0 * n ** 0.9} if n else {}
        jobs[spec.job_id] = JobView(spec, JobPhase.RUNNING if n else JobPhase.PENDING,
                                    Allocation(tuple(placement)) if n else Allocation(), progress=epochs * 100.0,
                                    total_work=1e9, run_time=float(rng.uniform(10, 1000)),
                                    start_time=0.0 if n else None, observed_throughput=obs)
    return ClusterSnapshot(1000.0, nodes, jobs)


def bench(num_jobs: int, gpus: int, rounds: int) -> dict[str, Any]:
    snap = snapshot(num_jobs, gpus)
    # the faithful preset: the tuned one skips repeated rounds (quiet_s), and a round is what is timed here
    pol = OnesPolicy("faithful", bootstrap=False)  # the predictor's fit is not part of a round
    ctx = PolicyContext(seed=0)
    pol.schedule(snap, ctx)  # builds the population
    gen: list[float] = []
    orig = pol._generation

    def timed(*a: Any) -> Any:
        t = time.perf_counter()
        out = orig(*a)
        gen.append(time.perf_counter() - t)
        return out

    pol._generation = timed  # type: ignore[method-assign]
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        pol.schedule(snap, ctx)
        samples.append(time.perf_counter() - t)
    return {"jobs": num_jobs, "gpus": gpus, "population": pol.opts.population,
            "round_ms_median": 1000 * statistics.median(samples), "round_ms_max": 1000 * max(samples),
            "generation_ms_median": 1000 * statistics.median(gen)}


def reorder_seconds(gpus: int, jobs: int, repeats: int = 5) -> float:
    """Best of `repeats` process-CPU timings of one `reorder` of a random allocation of `gpus` over `jobs`."""
    rng = np.random.default_rng(0)
    alloc = rng.multinomial(gpus - gpus // 10, np.ones(jobs) / jobs)
    cur = ops.layout_from_counts(np.maximum(alloc - 1, 0), gpus)
    nodes = np.repeat(np.arange(gpus // 8), 8)
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        ops.reorder(alloc, cur, nodes)
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rows = [bench(j, g, args.rounds) for j, g in SIZES]
    reorder_seconds(800, 100, 1)  # warm-up
    small, big = reorder_seconds(800, 100), reorder_seconds(8000, 1000)
    target = next(r for r in rows if (r["jobs"], r["gpus"]) == (200, 1024))
    result = {"benchmark": "ones_generation", "target_ms": 100.0, "target_case": target,
              "meets_target": target["round_ms_median"] <= 100.0, "scaling": sorted(rows, key=lambda r: r["gpus"]),
              "reorder": {"small_s": small, "big_s": big, "ratio": big / max(small, 1e-9),
                          "linear": big < 0.5 and big < 50 * small + 0.05},
              "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ones_generation.json").write_text(json.dumps(result, indent=2))
    for r in result["scaling"]:
        print(f"{r['jobs']:5d} jobs {r['gpus']:6d} GPUs: round {r['round_ms_median']:8.1f} ms "
              f"(max {r['round_ms_max']:.1f}), generation {r['generation_ms_median']:.1f} ms")
    print(f"reorder: 800 GPUs/100 jobs {small * 1000:.1f} ms, 8000/1000 {big * 1000:.1f} ms "
          f"({big / max(small, 1e-9):.1f}x)")
    print(f"target (200 jobs, 1024 GPUs, ≤ 100 ms): {'met' if result['meets_target'] else 'NOT met'}")


if __name__ == "__main__":
    main()
