"""Phase 2 of a Lyra round (lyra.md §2.2, §7 row 8): extra GPUs for the admitted elastic jobs, one
multiple-choice knapsack per GPU type, and the colocation room the predictions of running jobs assume.

The rules (item values, rescale penalty, solver choice, colocation) are written down in the docstring of
`elastisched.policies.lyra.policy`; this module only carries them out for the jobs phase 1 admitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from elastisched.core.types import ClusterSnapshot, JobView, NodeId
from elastisched.policies._common import job_model
from elastisched.policies.base import PolicyContext
from elastisched.policies.lyra import mckp

FALLBACK_RESTART_COST = 30.0  # linear fallback model: restart cost of a job without a model (seconds)
RATE_SCALE = 3600.0  # "rate" values are RATE_SCALE² × Δ(1/T): a fixed scale that keeps them near seconds


@dataclass(frozen=True, slots=True)
class Admitted:
    """A job phase 1 admitted: its base is granted, phase 2 may add extras up to `cap`."""

    view: JobView
    gpu_type: str
    base: int  # phase-1 GPUs
    cap: int  # most GPUs phase 2 may give
    current: tuple[tuple[NodeId, int], ...]  # placement surviving the reclaim (() when pending)
    disturbed: bool  # the reclaim changed its placement this round


@dataclass(frozen=True, slots=True)
class KnapsackRule:
    """The policy's phase-2 options (module docstring of `lyra.policy`)."""

    value: str  # "jct" or "rate"
    solver: str  # "auto", "dp" or "greedy"
    exact_budget: int  # "auto" solves exactly while items × capacity stays within it
    rescale_penalty: float  # restart costs a change of a running job's extras pays


# predicted remaining seconds of an admitted job on a type with base + 0..k_max GPUs
TimesFn = Callable[[Admitted, str, int], np.ndarray]


def local_room(snap: ClusterSnapshot, admitted: Sequence[Admitted], gone: frozenset[NodeId]) -> dict[str, int]:
    """`local` of each running elastic job that may grow: its GPUs on its main server plus an equal share
    (among the growing jobs there) of that server's free GPUs (module docstring of `lyra.policy`, colocation)."""
    used: dict[NodeId, int] = {}
    main: dict[str, tuple[NodeId, int]] = {}
    share: dict[NodeId, int] = {}
    for j in admitted:
        for n, g in j.current:
            used[n] = used.get(n, 0) + g
        if j.current and j.cap > j.base:
            h = max(j.current, key=lambda x: (x[1], x[0]))
            main[j.view.job_id] = h
            share[h[0]] = share.get(h[0], 0) + 1
    if not main:
        return {}
    size = {n.node_id: n.num_gpus for n in snap.nodes if n.node_id not in gone}
    return {jid: own + max(size[h] - used.get(h, 0), 0) // share[h]
            for jid, (h, own) in main.items() if h in size}


def extra_gpus(snap: ClusterSnapshot, ctx: PolicyContext, admitted: Sequence[Admitted], free: dict[str, int],
               times: TimesFn, rule: KnapsackRule, check_log: list[dict[str, float]] | None) -> dict[str, int]:
    """Extra GPUs per elastic job: one MCKP per GPU type over its free GPUs after phase 1. With `check_log`
    the greedy and exact values of every solve are appended to it."""
    out: dict[str, int] = {}
    for t, cap in free.items():
        if cap <= 0:
            continue
        jobs = [j for j in admitted if j.gpu_type == t and j.cap > j.base]
        if not jobs:
            continue
        weights: list[np.ndarray] = []
        values: list[np.ndarray] = []
        start: list[int] = []
        for j in jobs:
            k_max = min(j.cap - j.base, cap)
            k_now = sum(g for _, g in j.current) - j.base if j.current else 0
            start.append(k_now if 0 <= k_now <= k_max else 0)
            tm = times(j, t, k_max)
            v = item_values(rule.value, tm[0], _with_rescale_stall(ctx, j, tm, rule.rescale_penalty))
            weights.append(np.arange(len(v), dtype=np.int64))
            values.append(v)
        sol = _solve(weights, values, cap, start, rule, snap.now, check_log)
        for j, k in zip(jobs, sol.choice, strict=True):
            if k:
                out[j.view.job_id] = int(k)
    return out


def _with_rescale_stall(ctx: PolicyContext, j: Admitted, times: np.ndarray, penalty: float) -> np.ndarray:
    """Predicted remaining time including the stall a rescale costs an undisturbed running job (anti-thrash)."""
    eff = times.copy()
    if j.current and not j.disturbed and penalty > 0:
        k_cur = sum(g for _, g in j.current) - j.base
        app = job_model(j.view, ctx)
        rc = app.restart_cost if app is not None else FALLBACK_RESTART_COST
        pen = np.full(len(eff), penalty * rc)
        if 0 <= k_cur < len(eff):
            pen[k_cur] = 0.0
        eff = eff + pen
    return eff


def _solve(weights: list[np.ndarray], values: list[np.ndarray], cap: int, start: list[int], rule: KnapsackRule,
           now: float, check_log: list[dict[str, float]] | None) -> mckp.Solution:
    """Exact DP while the table is small enough (or forced), else the hull greedy from the current extras."""
    size = sum(len(w) for w in weights) * (cap + 1)
    use_dp = rule.solver == "dp" or (rule.solver == "auto" and size <= rule.exact_budget)
    sol = mckp.solve_dp(weights, values, cap) if use_dp else mckp.solve_greedy(weights, values, cap, start=start)
    if check_log is not None:
        heur = sol if not use_dp else mckp.solve_greedy(weights, values, cap, start=start)
        exact = sol if use_dp else mckp.solve_dp(weights, values, cap)
        check_log.append({"time": now, "groups": len(weights), "capacity": cap,
                          "greedy": heur.value, "exact": exact.value})
    return sol


def item_values(rule: str, t0: float, eff: np.ndarray) -> np.ndarray:
    """Item values from the remaining time at base `t0` and with k extras `eff[k]` ("jct" or "rate")."""
    if rule == "jct":
        return t0 - eff
    t0 = max(float(t0), 1e-9)
    return RATE_SCALE * RATE_SCALE * (1.0 / np.maximum(eff, 1e-9) - 1.0 / t0)
