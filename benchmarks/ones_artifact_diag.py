"""Why the ONES `artifact` preset loses to FIFO on the ONES trace (docs/ones.md "The artifact preset, rule by rule").

The experiment's set-up (first 50 jobs of `trace_1`, `16x4:t4`, 30 s restarts, 8 s resizes, the predictor's
held-out folds), BLAS pinned to one thread by the caller. Writes one JSON with:
- `variants`: mean JCT per seed of the preset, FIFO, and measurement-only variants that are NOT options of the
  preset: `interval=2` (the artifact's loop period between deployments), a blocking wait after each deployment
  until the (re)placed jobs end their restart (the artifact's `_wait_for_execution`), and every move of a running
  job charged as an in-memory resize (the artifact's scale-out), alone or with 1 s resizes. The last two patch
  `engine.jobstate.keeps_gpus` for the run only;
- `alone`: each job alone on the empty cluster under the preset (and with A16 on) and under FIFO;
- `seed0`: the preset's change kinds and how often the global δ throttle deferred the best individual.

`python benchmarks/ones_artifact_diag.py --out results/bench/ones-artifact-diag.json [--seeds 0,1,2]`
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import elastisched.engine.jobstate as jobstate
import elastisched.policies.ones.deploy as dep
from elastisched.core.cluster import parse_cluster
from elastisched.core.types import ClusterSnapshot, Decision, JobPhase
from elastisched.experiments.ones import DEFAULT_DATA, load_data
from elastisched.models.registry import PerfModels
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.policies.ones.policy import OnesPolicy
from elastisched.sim import SimConfig, simulate
from elastisched.workloads.ones import load_ones_csv

#: name -> (preset options, blocking wait, moves as resizes, resize cost in s)
VARIANTS: dict[str, tuple[dict[str, Any], bool, bool, float]] = {
    "artifact": ({}, False, False, 8.0),
    "interval_2s": ({"interval": 2.0}, False, False, 8.0),
    "blocking_wait": ({}, True, False, 8.0),
    "interval_2s_blocking_wait": ({"interval": 2.0}, True, False, 8.0),
    "moves_as_resizes": ({}, False, True, 8.0),
    "moves_as_resizes_1s": ({}, False, True, 1.0),
}


class WaitingOnes(OnesPolicy):
    """The artifact preset plus the artifact's blocking `_wait_for_execution`: after a round that (re)placed
    jobs, no round runs until those jobs have ended their (simulated) restart."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._placed: set[str] = set()

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        if any(j in snap.jobs and snap.jobs[j].phase == JobPhase.RESTARTING for j in self._placed):
            return Decision({j.job_id: j.allocation for j in snap.jobs.values() if j.gpus})
        dec = super().schedule(snap, ctx)
        self._placed = {jid for jid, a in dec.allocations.items() if a.placement and jid in snap.jobs
                        and tuple(snap.jobs[jid].allocation.placement) != tuple(a.placement)}
        return dec


@contextlib.contextmanager
def moves_as_resizes(on: bool) -> Iterator[None]:
    """Charge any change of a running job that keeps it running as a resize (measurement only)."""
    orig = jobstate.keeps_gpus
    if on:
        jobstate.keeps_gpus = lambda old, new: bool(old.placement and new.placement)  # type: ignore[assignment]
    try:
        yield
    finally:
        jobstate.keeps_gpus = orig  # type: ignore[assignment]


@contextlib.contextmanager
def throttle_counter(c: Counter[str]) -> Iterator[None]:
    """Count rounds whose best individual differs from the running schedule, and how many were deferred."""
    orig = dep.plan

    def plan(cur: np.ndarray, best: np.ndarray, running: np.ndarray, since: np.ndarray, delta: float,
             throttle: str, held: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
        out, full = orig(cur, best, running, since, delta, throttle, held)
        c["rounds"] += 1
        if (best != cur).any():
            c["best_differs"] += 1
            c["applied" if full else "deferred"] += 1
            if not full:
                changed = dep.changed_jobs(cur, best, running.shape[0]) & running
                c["changed_running_in_deferred"] += int(changed.sum())
                c["inside_delta_in_deferred"] += int((changed & (since < delta)).sum())
        elif full:
            c["unchanged_unthrottled"] += 1
        return out, full

    dep.plan = plan  # type: ignore[assignment]
    try:
        yield
    finally:
        dep.plan = orig  # type: ignore[assignment]


def run(data: Path, seeds: list[int]) -> dict[str, Any]:
    trace, history = load_data(data)
    models = PerfModels.load()
    wl = load_ones_csv(trace, data / "traces" / "job_history.csv", models, 50)
    nodes = parse_cluster("16x4:t4")

    def sim(pol: Any, seed: int, resize: float = 8.0, **kw: Any) -> Any:
        return simulate(wl, pol, nodes, models, SimConfig(seed=seed, restart_cost=30.0, resize_cost=resize, **kw))

    out: dict[str, Any] = {"workload": {"trace": str(trace), "digest": wl.digest, "jobs": len(wl)},
                           "cluster": "16x4:t4", "restart_cost_s": 30.0, "seeds": seeds, "variants": {}}
    fifo = float(sim(make_policy("fifo"), seeds[0]).jobs["jct"].mean())
    out["variants"]["fifo"] = {"mean_jct": fifo, "mean_jct_by_seed": [fifo] * len(seeds)}
    for name, (opts, wait, inmem, resize) in VARIANTS.items():
        jct = []
        for s in seeds:
            pol = (WaitingOnes if wait else OnesPolicy)("artifact", history=history, **opts)
            with moves_as_resizes(inmem):
                jct.append(float(sim(pol, s, resize).jobs["jct"].mean()))
        out["variants"][name] = {"options": opts, "blocking_wait": wait, "moves_as_resizes": inmem,
                                 "resize_cost_s": resize, "mean_jct": float(np.mean(jct)), "mean_jct_by_seed": jct,
                                 "over_fifo": float(np.mean(jct)) / fifo}
        print(name, out["variants"][name]["mean_jct"], jct, flush=True)
    alone: dict[str, list[float]] = {"artifact": [], "artifact_a16": [], "fifo": []}
    for spec in wl.jobs:
        one = dataclasses.replace(wl, jobs=(dataclasses.replace(spec, submit_time=0.0),))
        for key, pol in (("artifact", OnesPolicy("artifact", history=history)),
                         ("artifact_a16", OnesPolicy("artifact", history=history, throughput_limit=True)),
                         ("fifo", make_policy("fifo"))):
            alone[key].append(float(simulate(one, pol, nodes, models, SimConfig(
                seed=seeds[0], restart_cost=30.0, resize_cost=8.0)).jobs["jct"].iloc[0]))
    a, f = np.array(alone["artifact"]), np.array(alone["fifo"])
    out["alone"] = {"mean_jct": {k: float(np.mean(v)) for k, v in alone.items()},
                    "artifact_slower_jobs": int((a > f).sum()), "per_job": alone}
    kinds: Counter[str] = Counter()
    thr: Counter[str] = Counter()

    def observe(snap: ClusterSnapshot, res: Any) -> None:
        for act in res.actions:
            old = snap.jobs[act.job_id].allocation
            k = jobstate.change_kind(old, act.allocation)
            if k == "resize":
                k = "grow" if act.allocation.gpus > old.gpus else "shrink" if act.allocation.gpus < old.gpus else k
            kinds[k] += 1

    with throttle_counter(thr):
        sim(OnesPolicy("artifact", history=history), seeds[0], on_round=observe)
    out["seed0"] = {"change_kinds": dict(kinds), "throttle": dict(thr)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", type=Path, default=Path("results/bench/ones-artifact-diag.json"))
    args = ap.parse_args()
    res = run(args.data, [int(s) for s in args.seeds.split(",")])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "alone"}, indent=1))
    print("alone mean JCT:", res["alone"]["mean_jct"], "artifact slower for", res["alone"]["artifact_slower_jobs"])


if __name__ == "__main__":
    main()
