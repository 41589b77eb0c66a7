"""What a per-round time budget costs in JCT (`scale.py --sections budgets`; issue 22: within 2 % of without).

Every per-round budget the scale benchmarks run a policy with by default — the decisions section's
(`_scale_decisions.DEFAULT_OPTIONS`: what a policy needs to decide within a second at 8,192 GPUs) and the full
Philly section's (`_scale_philly.DEFAULT_OPTIONS`) — is run on the eight Pollux workloads (`pollux:workload-1`
… `-8`, 1.0× load, `16x4:t4`) with and without it, seeds 0–2 each (a policy that draws no random numbers gives
the same run three times, which the spread shows); a policy's runs without a budget serve each of its budgets.
Per run: average JCT, the slowest round's thread CPU (whether the budget could have bound: a round never
stopped by the budget decides exactly as without it) and the run's CPU. Per (policy, budget): the mean over
seeds of each workload's average JCT with and without, their relative difference, the worst workload and the
mean over the eight, and `within_bar` (every workload's difference ≤ `BAR`). Runs go to `--budget-workers`
processes at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
WORKLOADS = tuple(f"pollux:workload-{i}" for i in range(1, 9))
CLUSTER = "16x4:t4"
SEEDS = (0, 1, 2)
BAR = 0.02  # issue 22: JCT with the budget within 2 % of without


def run_one(policy: str, options: dict[str, Any], workload: str, seed: int) -> dict[str, Any]:
    """One simulation, in this process: average JCT, slowest round (thread CPU), CPU of the run."""
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.sim.runner import setup

    s = setup(workload, CLUSTER)
    pol = make_policy(policy, **options)
    inner = pol.schedule
    slowest = [0.0]

    def timed(snap: Any, ctx: Any) -> Any:
        c0 = time.thread_time()
        d = inner(snap, ctx)
        slowest[0] = max(slowest[0], time.thread_time() - c0)
        return d

    pol.schedule = timed  # type: ignore[method-assign]
    c0 = time.process_time()
    r = simulate(s.workload, pol, s.nodes, s.models, SimConfig(seed=seed))
    return {"policy": policy, "options": options, "workload": workload, "seed": seed,
            "avg_jct": float(r.summary["avg_jct"]), "rounds": int(r.summary["rounds"]),
            "max_round_cpu_s": slowest[0], "cpu_s": time.process_time() - c0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("budgets")
    g.add_argument("--budget-policies", default=None,
                   help="comma-separated policies (default: those with a budget in the decisions defaults)")
    g.add_argument("--budget-workers", type=int, default=2, help="runs at once (default: %(default)s)")
    g.add_argument("--budget-seeds", default=",".join(map(str, SEEDS)),
                   help="comma-separated seeds per workload (default: %(default)s)")


def _child(policy: str, options: dict[str, Any], workload: str, seed: int) -> dict[str, Any]:
    spec = {"policy": policy, "options": options, "workload": workload, "seed": seed}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), json.dumps(spec)], capture_output=True,
                         text=True, check=False, env={**os.environ, "PYTHONHASHSEED": "0"})
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        print(f"    {policy} {options} {workload} seed {seed}: failed", flush=True)
        return {**spec, "error": (out.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    row = dict(json.loads(lines[-1]))
    print(f"    {policy} {options} {workload} seed {seed}: avg JCT {row['avg_jct']:.1f} s, slowest round "
          f"{row['max_round_cpu_s']:.3f} s, {row['cpu_s']:.1f} s CPU", flush=True)
    return row


def compare(policy: str, budget: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload: the mean over seeds of the average JCT with and without the budget, and the difference."""
    rows = []
    for w in WORKLOADS:
        got = {}
        for label, opts in (("without", {}), ("with", budget)):
            jcts = [r["avg_jct"] for r in runs if r["workload"] == w and r["options"] == opts and "error" not in r]
            got[label] = (float(np.mean(jcts)), float(np.std(jcts)), len(jcts)) if jcts else (float("nan"), 0.0, 0)
        slow = max((r["max_round_cpu_s"] for r in runs if r["workload"] == w and "error" not in r), default=0.0)
        rows.append({"workload": w, "jct_without": got["without"][0], "jct_with": got["with"][0],
                     "spread_without": got["without"][1], "spread_with": got["with"][1], "seeds": got["with"][2],
                     "rel_diff": got["with"][0] / got["without"][0] - 1.0, "max_round_cpu_s": slow})
    diffs = [abs(r["rel_diff"]) for r in rows]
    mean_without = float(np.mean([r["jct_without"] for r in rows]))
    mean_with = float(np.mean([r["jct_with"] for r in rows]))
    return {"policy": policy, "budget": budget, "workloads": rows, "mean_jct_without": mean_without,
            "mean_jct_with": mean_with, "mean_rel_diff": mean_with / mean_without - 1.0,
            "worst_rel_diff": max(diffs), "slowest_round_cpu_s": max(r["max_round_cpu_s"] for r in rows),
            "errors": sum("error" in r for r in runs), "within_bar": bool(max(diffs) <= BAR)}


def budgets_to_compare() -> list[tuple[str, dict[str, Any]]]:
    """(policy, options) for every default budget of the decisions and Philly sections, in that order."""
    sys.path.insert(0, str(HERE))
    from _scale_decisions import DEFAULT_OPTIONS as DECISIONS
    from _scale_decisions import _parse_options
    from _scale_philly import DEFAULT_OPTIONS as PHILLY

    out: list[tuple[str, dict[str, Any]]] = []
    for defaults in (DECISIONS, PHILLY):
        for name, opts in _parse_options(list(defaults)).items():
            if (name, opts) not in out:
                out.append((name, opts))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from _scale_decisions import _known

    pairs = budgets_to_compare()
    wanted = [p.strip() for p in (args.budget_policies or ",".join(dict.fromkeys(n for n, _ in pairs))).split(",")]
    seeds = tuple(int(x) for x in str(args.budget_seeds).split(",") if x.strip())
    workloads, seeds = (WORKLOADS[:1], seeds[:1]) if args.quick else (WORKLOADS, seeds)
    out: list[dict[str, Any]] = []
    for name in [n for n in wanted if n and _known(n)]:
        budgets = [b for n, b in pairs if n == name]
        tasks = [(name, opts, w, s) for w in workloads for s in seeds for opts in ({}, *budgets)]
        with ThreadPoolExecutor(max_workers=max(1, args.budget_workers)) as pool:
            runs = list(pool.map(lambda t: _child(*t), tasks))
        for budget in budgets:
            mine = [r for r in runs if r["options"] in ({}, budget)]
            row = compare(name, budget, mine) if not args.quick else {"policy": name, "budget": budget}
            out.append({**row, "runs": mine})
            if "worst_rel_diff" in row:
                print(f"  {name:>14} {budget}: mean JCT {row['mean_jct_without']:.0f} -> {row['mean_jct_with']:.0f} s "
                      f"({100 * row['mean_rel_diff']:+.2f} %), worst workload {100 * row['worst_rel_diff']:.2f} %, "
                      f"slowest round {row['slowest_round_cpu_s']:.3f} s CPU", flush=True)
    return {"policies": out, "bar": BAR, "cluster": CLUSTER, "seeds": list(seeds), "workloads": list(WORKLOADS)}


if __name__ == "__main__":  # one run in a fresh process (called by `run`)
    spec = json.loads(sys.argv[1])
    print(json.dumps(run_one(spec["policy"], spec["options"], spec["workload"], spec["seed"])))
