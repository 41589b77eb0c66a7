"""Checks every placed decision before anything acts on it: a buggy policy fails loudly, not silently."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from elastisched.core.errors import InvariantViolation
from elastisched.core.types import Allocation, ClusterSnapshot, JobId, JobSpec, JobView
from elastisched.engine.placer import NodeIndex, node_index


def check(allocs: Mapping[JobId, Allocation], snap: ClusterSnapshot, elastic: bool,
          free: np.ndarray | None = None, only: Sequence[JobId] | None = None, filled: int = 0) -> None:
    """Capacity per node, known active jobs, GPU bounds of each job, allowed GPU types.

    A non-elastic policy must give a job exactly its requested GPUs or none. An elastic policy may resize
    any job (Optimus and Pollux treat every job as malleable); for a job the workload marks elastic it must
    stay within `min_gpus..max_gpus`.
    With `free` (the placer's), `only` may name the jobs whose allocation is not the object they hold now
    (`placer.Changes.changed`): the others would be skipped below anyway. Only their nodes can then have gone
    over capacity (the placer took GPUs for them alone, from a `free` that was not below zero), so only
    those are looked at. The last `filled` of them the placer placed itself (`placer.Changes.filled`): on known
    nodes of the type asked, positive counts, free GPUs only; their GPU counts (and a type the policy named,
    against the job's) are what is left to check.
    """
    idx = node_index(snap.nodes)
    used = idx.capacity * 0 if free is None else None  # with `free`, capacity is read from it below
    touched: list[int] | None = None if only is None or free is None else []
    placed: Sequence[JobId] = ()
    if touched is not None and filled:
        assert only is not None
        only, placed = only[:len(only) - filled], only[len(only) - filled:]
    pairs = allocs.items() if only is None or touched is None else zip(only, map(allocs.__getitem__, only), strict=True)
    for jid, a in pairs:
        job = _checked(jid, a, snap, elastic, free)
        if job is not None:
            _check_nodes(jid, a, job.spec, snap, idx, used, touched)
    for jid in placed:
        a = allocs[jid]
        job = _checked(jid, a, snap, elastic, free)
        types = job.spec.gpu_types if job is not None else ()
        if job is not None and types and a.gpu_type is not None and a.gpu_type not in types:
            _check_nodes(jid, a, job.spec, snap, idx, used, [])  # (raises, naming the node)
    if used is None:  # used = capacity - free exceeds capacity where free < 0
        if free is None or not free.size:
            return
        if touched is not None:
            if not touched or all(free.item(i) >= 0 for i in touched):
                return
        elif np.minimum.reduce(free) >= 0:  # (ndarray.min without its wrapper)
            return
        used = idx.capacity - free
    over = used > idx.capacity
    if over.any():
        i = int(over.argmax())
        raise InvariantViolation(f"node {snap.nodes[i].node_id}: {int(used[i])} GPUs allocated, "
                                 f"capacity {int(idx.capacity[i])}")


def _checked(jid: JobId, a: Allocation, snap: ClusterSnapshot, elastic: bool, free: np.ndarray | None
             ) -> JobView | None:
    """The job's view once its allocation passed the per-job checks; None when it is unchanged since it was
    checked when placed (with `free`: its capacity comes from `free`)."""
    job = snap.jobs.get(jid)
    if job is None:
        raise InvariantViolation(f"decision allocates unknown or finished job {jid!r}")
    if free is not None and (a is job.allocation or (a.placement and job.allocation.placement == a.placement)):
        return None
    spec = job.spec
    g = a.gpus
    if a.is_open:
        raise InvariantViolation(f"job {jid}: placement left open after placing")
    if elastic:
        if spec.elastic and not spec.min_gpus <= g <= spec.gpu_cap:
            raise InvariantViolation(f"job {jid}: {g} GPUs outside its bounds {spec.min_gpus}..{spec.gpu_cap}")
    elif g != spec.num_gpus:
        raise InvariantViolation(f"job {jid}: {g} GPUs but a non-elastic policy must give {spec.num_gpus}")
    return job


def _check_nodes(jid: JobId, a: Allocation, spec: JobSpec, snap: ClusterSnapshot, idx: NodeIndex,
                 used: np.ndarray | None, touched: list[int] | None) -> None:
    """Each node of the placement: a positive count on a known node of a type the job may use; its GPUs
    added to `used` (without `free`), or the node noted in `touched`."""
    for n, k in a.placement:
        if k <= 0:
            raise InvariantViolation(f"job {jid}: non-positive GPU count {k} on node {n}")
        i = idx.pos.get(n)
        if i is None:
            raise InvariantViolation(f"job {jid}: unknown node {n!r}")
        if spec.gpu_types and snap.nodes[i].gpu_type not in spec.gpu_types:
            raise InvariantViolation(f"job {jid}: node {n} has GPU type {snap.nodes[i].gpu_type}, "
                                     f"job allows {spec.gpu_types}")
        if used is not None:
            used[i] += k
        elif touched is not None:
            touched.append(i)
