"""Pollux's per-round arrays built from the snapshot: the job order, restart factors, the GPU types each job may
use, the current allocation as one sparse state, a state's rows per job, and the signatures that say whether a
job changed since the last round."""

from __future__ import annotations

from typing import Any

import numpy as np

from elastisched.core.types import ClusterSnapshot, JobView
from elastisched.models.application import Application
from elastisched.policies.pollux.population import Population, from_cells

RESTART_DELAY = 30.0  # seconds the restart factor charges per restart (artifact `delay = 30`)


def by_attained_service(snap: ClusterSnapshot) -> list[JobView]:
    """Jobs by attained service, then submission time (then submission order), as the artifact orders them."""
    views = list(snap.jobs.values())
    att = np.array([v.attained_service for v in views]) + np.maximum(
        0.0, snap.now - np.array([v.updated_at for v in views])) * np.array([v.allocation.gpus for v in views])
    order = np.lexsort((np.array([v.spec.submit_time for v in views]), att))
    return [views[k] for k in order.tolist()]


def restart_factors(jobs: list[JobView], now: float) -> np.ndarray:
    """max(age − restarts · 30 s, 0) / (age + 30 s) per job: what a changed job's speedup is worth."""
    age = np.maximum(now - np.array([j.spec.submit_time for j in jobs]), 0.0)
    restarts = np.array([j.num_restarts for j in jobs], dtype=float)
    return np.maximum(age - restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)  # type: ignore[no-any-return]


def allowed_types(jobs: list[JobView], apps: dict[str, Application | None], classes: list[str]) -> np.ndarray:
    """(jobs × GPU types) may the job use nodes of the type: one it allows and its profile covers."""
    allowed = np.zeros((len(jobs), len(classes)), dtype=bool)
    for i, job in enumerate(jobs):
        ok = set(job.spec.gpu_types or classes)
        app = apps[job.job_id]
        if app is not None:
            ok &= set(app.gpu_types)
        allowed[i] = [t in ok for t in classes]
    return allowed


def current_cells(jobs: list[JobView], real_ids: list[str]) -> Population:
    """Each job's GPUs now on each real node, as one sparse state."""
    rpos = {n: k for k, n in enumerate(real_ids)}
    cells: dict[tuple[int, int], int] = {}
    for i, job in enumerate(jobs):
        for n, g in job.allocation.placement:
            if n in rpos:
                cells[i, rpos[n]] = cells.get((i, rpos[n]), 0) + g
    job = np.array([k[0] for k in cells], dtype=np.intp)
    node = np.array([k[1] for k in cells], dtype=np.intp)
    return from_cells(np.zeros(len(cells), dtype=np.intp), job, node, np.array(list(cells.values()), dtype=np.int64),
                      1, (len(jobs), len(real_ids)))


def rows_of(state: Population) -> dict[int, list[tuple[int, int]]]:
    """Job → its [(node, GPUs)] in node order, of a one-state population."""
    order = np.lexsort((state.node, state.job))
    rows: dict[int, list[tuple[int, int]]] = {}
    for j, n, c in zip(state.job[order].tolist(), state.node[order].tolist(), state.count[order].tolist(),
                       strict=True):
        rows.setdefault(j, []).append((n, c))
    return rows


def job_inputs(job: JobView) -> tuple[Any, ...]:
    """What the search reads from a job besides its age and attained service: its allocation (the body keeps the
    very object while it is unchanged), batch, epoch (gradient statistics), restarts, reported statistics and
    model."""
    return job.allocation, job.batch_size, job.epoch, job.num_restarts, job.grad_stats, job.model, job.spec


def job_structure(job: JobView, placement: tuple[tuple[str, int], ...] | None = None) -> tuple[Any, ...]:
    """What a quiet round requires unchanged since the last search decided (`PolluxPolicy._quiet`): the job's
    GPUs (`placement`: those decided for it; default its own), not its batch (re-optimised in place every
    round), its spec and model."""
    return job.allocation.placement if placement is None else placement, job.spec, job.model


def same_signature(a: tuple[Any, ...], b: tuple[Any, ...] | None) -> bool:
    """Field by field: the very object (cheap) or an equal one."""
    return b is not None and all(x is y or x == y for x, y in zip(a, b, strict=True))
