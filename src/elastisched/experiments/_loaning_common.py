"""Pieces shared by the loaning experiments (`lyra`, `lyra-deepboot`): cluster shapes, elastic marking, one
simulator run with a loan plan, the per-run summary rows they tabulate, and what reclaims cost each run
(`reclaim_losses`, defined in `LOSS_DEFINITION`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from elastisched.core.types import NodeView, Pool
from elastisched.experiments.base import ProgressFactory, Table
from elastisched.loaning.timeline import LoanPlan
from elastisched.models.application import DEFAULT_RESTART_COST
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, make_policy
from elastisched.policies.lyra import policy as _lyra_policy  # noqa: F401  (registers "lyra" for make_policy)
from elastisched.sim import SimConfig, SimResult, simulate
from elastisched.sim.length_estimate import LengthEstimate
from elastisched.workloads.schema import Workload


def nodes_of(gpus: int, per_server: int, gpu_type: str = "t4") -> tuple[NodeView, ...]:
    """`gpus` GPUs as full `per_server`-GPU servers plus one smaller server for the remainder."""
    full, rest = divmod(gpus, per_server)
    sizes = [per_server] * full + ([rest] if rest else [])
    return tuple(NodeView(f"{gpu_type}-{i}", gpu_type, n, Pool.TRAIN, i) for i, n in enumerate(sizes))


def make_elastic(wl: Workload, fraction: float, max_factor: int, seed: int, min_of: Callable[[int], int]
                 ) -> Workload:
    """A seeded `fraction` of the jobs becomes elastic between `min_of(request)` and `max_factor × request`."""
    rng = np.random.default_rng(seed + 7919)
    jobs = []
    for s in wl.jobs:
        if rng.random() < fraction:
            s = dataclasses.replace(s, elastic=True, min_gpus=min_of(s.num_gpus), max_gpus=max_factor * s.num_gpus)
        jobs.append(s)
    return dataclasses.replace(wl, jobs=tuple(jobs))


def lyra(**opts: Any) -> Policy:
    return make_policy("lyra", **opts)


def run_sim(wl: Workload, policy: Policy, nodes: Sequence[NodeView], models: PerfModels, plan: LoanPlan | None,
            seed: int, progress: ProgressFactory | None = None, task: str = "",
            length_estimate: LengthEstimate | None = None) -> SimResult:
    """One simulation, with the inference side's loan plan (None: no loaning) and what jobs declare about their
    length to the policies that read it (None: exact)."""
    cb = progress(task or policy.name) if progress else None
    return simulate(wl, policy, nodes, models, SimConfig(seed=seed, loans=plan, progress=cb,
                                                         length_estimate=length_estimate or LengthEstimate()))


SUMMARY_KEYS = ("avg_jct", "median_jct", "p95_jct", "avg_queue", "p95_queue", "makespan", "gpu_utilization",
                "restarts", "preemptions", "reclaims", "reclaim_preemptions", "n_finished", "n_jobs",
                "decision_ms_p50", "decision_ms_p99", "wall_seconds")
RUN_COLUMNS = {"run": "run", "avg_jct": "avg JCT (s)", "p95_jct": "p95 JCT (s)", "avg_queue": "avg queue (s)",
               "p95_queue": "p95 queue (s)", "makespan": "makespan (s)",
               "gpu_utilization": "GPU utilisation (fraction)", "restarts": "restarts (count)",
               "reclaims": "reclaims (count)",
               "reclaim_preemptions": "reclaim preemptions (count)", "n_finished": "finished (jobs)"}


#: What `reclaim_losses` counts, written where the numbers appear (tables, JSON).
LOSS_DEFINITION = (
    "per reclaim event (the inference side taking servers back), each job on a returned server is evicted (it "
    "loses all its GPUs and queues again), shrunk (keeps fewer GPUs) or moved (keeps as many GPUs elsewhere); "
    "a job is counted once per event. GPU-hours lost = the restart windows the reclaim forces: a shrunk or "
    "moved job stalls its application's restart cost on the GPUs it keeps, an evicted job stalls it when "
    "relaunched, counted on the GPUs it held; plus the work lost since the last checkpoint, which is 0 here "
    "because the simulator checkpoints a job when it is stopped (the reclaim notice leaves time to). The time an "
    "evicted job then waits is queuing, in its JCT, not in this figure.")


def reclaim_losses(res: SimResult, wl: Workload, models: PerfModels, restart_cost: float | None = None
                   ) -> dict[str, float]:
    """Jobs evicted, shrunk and moved by reclaims and the GPU-hours lost to them (`LOSS_DEFINITION`), from the
    simulator's reclaim log; `restart_cost` is the run's `SimConfig.restart_cost` (None: each application's)."""
    apps = {s.job_id: s.application for s in wl.jobs}

    def stall(jid: str) -> float:
        if restart_cost is not None:
            return restart_cost
        app = apps.get(jid)
        return models.app(app).restart_cost if app is not None and app in models else DEFAULT_RESTART_COST

    evicted = shrunk = moved = 0
    lost = 0.0
    for event in res.reclaims:
        for jid, (before, after) in event.get("gpus", {}).items():
            if after == 0:
                evicted += 1
                lost += stall(jid) * before
            else:
                shrunk += after < before
                moved += after >= before
                lost += stall(jid) * after
    return {"reclaim_evictions": evicted, "reclaim_shrinks": shrunk, "reclaim_moves": moved,
            "reclaim_gpu_hours_lost": lost / 3600}


def run_summary(res: SimResult, losses: dict[str, float] | None = None) -> dict[str, Any]:
    return {**{k: res.summary.get(k) for k in SUMMARY_KEYS}, **(losses or {})}


def runs_table(summaries: dict[str, dict[str, Any]], title: str) -> Table:
    """The headline columns (all of `SUMMARY_KEYS` stay in the JSON data)."""
    return Table(dict(RUN_COLUMNS), [{"run": k, **v} for k, v in summaries.items()], title)
