"""The steady round, decided without the assignment: nothing waits, no server is going back, and every job is
rigid and may use only the GPU type it holds.

Then the full round has one answer. With no job waiting every running job is protected (`values.protected`:
no waiting job is shorter), so it keeps at least its fewest GPUs; a rigid job has one count and here one type,
so its only option is what it holds, at the best batch for its shape and epoch (`candidates`). This module
computes just that — the same numbers the full round computes, read through the same helpers — and says
"not steady" (None) whenever any condition fails, including a job whose time on its own placement would be
infinite (the full round would then value staying at −inf). Most rounds of a trace of gang-scheduled jobs on a
cluster that is not saturated (Philly) are steady; `tests/policies/test_elastisched_steady.py` checks that a
run with this shortcut and one without it produce the same jobs, byte for byte.
"""

from __future__ import annotations

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, JobView, NodeId
from elastisched.models.application import Application
from elastisched.policies._common import job_model
from elastisched.policies.base import PolicyContext
from elastisched.policies.elastisched.candidates import CandidateBuilder, bounds, scale_and_epoch, usable_types

Held = tuple[JobView, Application | None, str]  # a job, its model, the GPU type it holds


def steady_allocations(snap: ClusterSnapshot, ctx: PolicyContext, builder: CandidateBuilder,
                       cluster: dict[str, int], per_node: dict[str, int]) -> dict[str, Allocation] | None:
    """Every job's allocation when the round is steady (module docstring), else None. Call it only on a round
    without returned or closing servers."""
    held = _rigid_on_one_type(snap, ctx, cluster, per_node)
    if held is None:
        return None
    residual = builder.belief.residual(np.array([v.attained(snap.now) for v, _, _ in held]))
    out: dict[str, Allocation] = {}
    for (v, app, t), res in zip(held, residual.tolist(), strict=True):
        batch = _batch_here(builder, v, app, t, per_node[t], res) if app is not None else 0
        if batch is None:
            return None
        out[v.spec.job_id] = allocation_at(v, v.allocation.placement, batch or None)
    return out


def _rigid_on_one_type(snap: ClusterSnapshot, ctx: PolicyContext, cluster: dict[str, int],
                       per_node: dict[str, int]) -> list[Held] | None:
    """Each job with its model and type when every job runs rigid on the only type it may use, else None."""
    if len(snap.running_jobs()) != len(snap.jobs):  # a job waits
        return None
    node_type = snap.node_set.gpu_type
    held: list[Held] = []
    for v in snap.jobs.values():
        placement = v.allocation.placement
        if not placement:
            return None
        app = job_model(v, ctx)
        lo, hi = bounds(v, app)
        t = node_type[placement[0][0]]
        if lo != hi or sum(g for _, g in placement) != lo or usable_types(v, app, cluster, per_node) != [t]:
            return None
        held.append((v, app, t))
    return held


def _batch_here(builder: CandidateBuilder, v: JobView, app: Application, t: str, per_node: int,
                residual: float) -> int | None:
    """The best global batch for the job's own placement at its epoch (0: none fits), or None when its time
    there would be infinite (some epoch from now on has no usable batch)."""
    table = builder.tables.table(app, t, per_node)
    gpus = v.allocation.gpus
    _, epoch = scale_and_epoch(v, app, table, gpus, gpus, residual)
    shape = tuple(g for _, g in v.allocation.placement)
    if epoch < builder.tables.finite_from(app, t, shape):
        return None
    best = builder.tables.shape_rates(app, t, shape)[1]
    return int(best[min(epoch, table.rate.shape[1] - 1)])


def allocation_at(view: JobView, placement: tuple[tuple[NodeId, int], ...], batch: int | None) -> Allocation:
    """The job's allocation on `placement` at `batch`; the very object it holds when nothing changes (the engine
    then skips it)."""
    cur = view.allocation
    if placement == cur.placement and (batch or view.spec.batch_size) == (cur.batch_size or view.spec.batch_size) \
            and cur.local_batch is None and cur.accumulation is None:
        return cur
    return Allocation(placement, batch_size=batch)
