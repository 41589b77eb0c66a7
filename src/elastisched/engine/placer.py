"""Default placer: fills the placements a policy left open.

Rules (the Pollux artifact's, `simulator/tiresias.py` and `optimus.py`, which our fidelity depends on):
1. explicit placements are kept as given;
2. an open allocation whose GPU count (and type) equals the job's current one keeps its current nodes —
   a running job is never moved just because the policy did not repeat its placement (no needless restart);
3. the remaining open allocations are placed in the order of `Decision.allocations`, each by repeatedly
   taking the node with the most free GPUs (ties: lowest node index) — packing a job on as few nodes as
   possible — restricted to the job's allowed GPU types.
Free GPUs are tracked in a numpy array so one round costs O(jobs placed × nodes) in C, not in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from elastisched.core.errors import InvariantViolation
from elastisched.core.nodes import NodeSet, node_set
from elastisched.core.types import Allocation, ClusterSnapshot, JobId, JobView, KeptAllocations, NodeView


class NodeIndex:
    """The placer's arrays over one node set, cached on its `core.nodes.NodeSet`."""

    def __init__(self, node_set: NodeSet) -> None:
        nodes = self.nodes = node_set.nodes
        self.pos = node_set.position
        self.capacity = np.array([n.num_gpus for n in nodes], dtype=np.int64)
        self.types = np.array([n.gpu_type for n in nodes])
        self.type_masks: dict[tuple[str, ...], np.ndarray | None] = {}

    def mask(self, types: tuple[str, ...]) -> np.ndarray | None:
        """Nodes of `types`; None when that is every node (no types given, or a cluster of those types alone)."""
        if not types:
            return None
        if types not in self.type_masks:
            m = np.isin(self.types, list(types))
            self.type_masks[types] = None if m.all() else m
        return self.type_masks[types]


def node_index(nodes: tuple[NodeView, ...]) -> NodeIndex:
    return node_set(nodes).derived(NodeIndex, NodeIndex)


def place(allocs: Mapping[JobId, Allocation], snap: ClusterSnapshot) -> dict[JobId, Allocation]:
    """Return `allocs` with every open placement filled; jobs with 0 GPUs are dropped."""
    return place_with_free(allocs, snap)[0]


def place_with_free(allocs: Mapping[JobId, Allocation], snap: ClusterSnapshot
                    ) -> tuple[dict[JobId, Allocation], np.ndarray]:
    """`place`, plus the free GPUs per node left afterwards (negative = over capacity)."""
    placed, free, _ = place_changes(allocs, snap)
    if free is None:
        free = node_index(snap.nodes).capacity - np.asarray(snap.node_used, dtype=np.int64)
    return placed if isinstance(placed, dict) else dict(placed), free


def place_changes(allocs: Mapping[JobId, Allocation], snap: ClusterSnapshot
                  ) -> tuple[Mapping[JobId, Allocation], np.ndarray | None, Changes | None]:
    """`place_with_free`, plus what changed (None when the snapshot carries no `node_used`).

    When the snapshot carries `node_used`, allocations that are the very objects the jobs hold now are
    taken as they are and cost nothing: a round costs O(changed jobs), not O(running jobs); the `Changes`
    let the invariant check and the diff look at the changed jobs alone. The free GPUs are None when
    nothing changed (a decision that keeps every running job and starts none: no per-node work at all).
    """
    idx = node_index(snap.nodes)
    if snap.node_used is None:
        return (*_place_all(allocs, snap, idx), None)
    if isinstance(allocs, KeptAllocations) and allocs.running is snap.running_jobs():
        return _place_kept(allocs, snap, idx)
    return _place_incremental(allocs, snap, idx)


def _place_kept(allocs: KeptAllocations, snap: ClusterSnapshot, idx: NodeIndex
                ) -> tuple[Mapping[JobId, Allocation], np.ndarray | None, Changes]:
    """Every running job keeps what it holds but the released ones: only those and the added are looked at."""
    if not allocs.released and not allocs.added:
        return allocs, None, Changes([], [])
    jobs = snap.jobs
    changes = Changes([], [])
    todo: list[tuple[JobId, Allocation]] = []
    used = snap.node_used
    free = idx.capacity - (used if isinstance(used, np.ndarray) else np.asarray(used, dtype=np.int64))
    for jid in allocs.released:  # (released before any is placed, as below: GPU counts add up in any order)
        changes.released.append(jid)
        for n, g in jobs[jid].allocation.placement:
            i = idx.pos.get(n)
            if i is not None:
                free[i] += g
    added: dict[JobId, Allocation] = {}
    for jid, a in allocs.added.items():
        if a.gpus <= 0:
            continue
        a = _fixed(jid, a, jobs.get(jid), idx, todo, free)
        if a is not None:
            added[jid] = a
            changes.changed.append(jid)
    for jid, _ in todo:
        changes.changed.append(jid)
    changes.filled = len(todo)
    _fill(todo, snap, idx, free, added)
    return KeptAllocations(allocs.running, added, allocs.released), free, changes


def _place_incremental(allocs: Mapping[JobId, Allocation], snap: ClusterSnapshot, idx: NodeIndex
                       ) -> tuple[Mapping[JobId, Allocation], np.ndarray, Changes]:
    """From the snapshot's per-node usage: kept allocations cost nothing, changed and stopped jobs release
    what they hold, then the changed ones are placed."""
    jobs = snap.jobs
    changes = Changes([], [])
    out: dict[JobId, Allocation] = {}
    todo: list[tuple[JobId, Allocation]] = []
    free = idx.capacity - np.asarray(snap.node_used, dtype=np.int64)
    kept = 0
    for jid, a in allocs.items():  # the common case first: a job keeps the very allocation it holds
        job = jobs.get(jid)
        if job is not None and a is job.allocation:
            if a.gpus > 0:
                out[jid] = a
                kept += 1
            continue
        if a.gpus <= 0:
            continue
        a = _fixed(jid, a, job, idx, todo, free)
        if a is not None:
            out[jid] = a
            changes.changed.append(jid)
    for jid, _ in todo:
        changes.changed.append(jid)
    changes.filled = len(todo)
    running = snap.running_jobs()
    if kept < len(running):  # some running job changes or stops (kept ones are running ones): release
        pos = idx.pos        # what it holds now (GPU counts add up in any order before `_fill`)
        for jid, job in running.items():
            if allocs.get(jid) is not job.allocation:
                changes.released.append(jid)
                for n, g in job.allocation.placement:
                    i = pos.get(n)
                    if i is not None:
                        free[i] += g
    _fill(todo, snap, idx, free, out)
    return out, free, changes


def _place_all(allocs: Mapping[JobId, Allocation], snap: ClusterSnapshot, idx: NodeIndex
               ) -> tuple[dict[JobId, Allocation], np.ndarray]:
    """Without per-node usage: every allocation is placed on an empty cluster."""
    jobs = snap.jobs
    out: dict[JobId, Allocation] = {}
    todo: list[tuple[JobId, Allocation]] = []
    free = idx.capacity.copy()
    for jid, a in allocs.items():
        if a.gpus <= 0:
            continue
        a = _fixed(jid, a, jobs.get(jid), idx, todo, free)
        if a is not None:
            out[jid] = a
    _fill(todo, snap, idx, free, out)
    return out, free


@dataclass(slots=True)
class Changes:
    """Jobs of a round whose allocation is not the very object they hold now: `changed` (placed, in the
    order of the placed mapping) and `released` (running jobs that change or stop, in running order, or in
    the order of `KeptAllocations.released`)."""

    changed: list[JobId]
    released: list[JobId]
    filled: int = 0  # the last `filled` of `changed` were placed by `_fill` (open allocations)


def _fixed(jid: JobId, a: Allocation, job: JobView | None, idx: NodeIndex, todo: list[tuple[JobId, Allocation]],
           free: np.ndarray) -> Allocation | None:
    """An allocation with nodes (rules 1 and 2), its GPUs taken from `free`; None when queued in `todo`."""
    if a.is_open:
        cur = job.allocation if job is not None else None
        if (cur is not None and cur.placement and cur.gpus == a.num_gpus
                and all(n in idx.pos for n, _ in cur.placement)
                and (a.gpu_type is None or all(idx.types[idx.pos[n]] == a.gpu_type for n, _ in cur.placement))):
            a = Allocation(cur.placement, 0, a.gpu_type, a.batch_size, a.local_batch, a.accumulation)
        else:
            todo.append((jid, a))
            return None
    for n, g in a.placement:
        if n not in idx.pos:
            raise InvariantViolation(f"job {jid}: placement names unknown node {n!r}")
        free[idx.pos[n]] -= g
    return a


def _fill(todo: list[tuple[JobId, Allocation]], snap: ClusterSnapshot, idx: NodeIndex, free: np.ndarray,
          out: dict[JobId, Allocation]) -> None:
    """Rule 3: place the open allocations in order, most free node first."""
    for jid, a in todo:
        job = snap.jobs.get(jid)
        types = (a.gpu_type,) if a.gpu_type else (job.spec.gpu_types if job is not None else ())
        m = idx.mask(types)
        # the GPUs it may take; any node: `free` itself (the loop below takes from both alike, so a copy would
        # only mirror it)
        avail = free if m is None else np.where(m, free, 0)
        need = a.num_gpus
        placement: list[tuple[str, int]] = []
        while need > 0:
            i = int(avail.argmax())  # first maximum = lowest index among the most free
            have = avail.item(i)
            if have <= 0:  # what it took so far was all there was (`free` is the caller's scratch copy)
                raise InvariantViolation(f"job {jid}: asks {a.num_gpus} GPUs of types {types or 'any'}, "
                                         f"only {a.num_gpus - need} free")
            take = have if have < need else need
            placement.append((snap.nodes[i].node_id, take))
            if avail is not free:
                avail[i] = have - take
            free[i] -= take
            need -= take
        out[jid] = Allocation(tuple(placement), 0, a.gpu_type, a.batch_size, a.local_batch, a.accumulation)
