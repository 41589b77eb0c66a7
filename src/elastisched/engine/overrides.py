"""What the engine does around a round, for both bodies: returning loaned servers and admin resizes.

Reclaim (Lyra §2.1): when inference asks `reclaim_demand` servers back, the policy may name them in
`Decision.reclaim` (Lyra chooses by preemption cost). Names that are not loaned servers, or beyond the
demand, are ignored. When the policy names fewer than the demand, THE fallback completes the choice: the
loaned servers with the fewest GPUs in use first (fewest jobs disturbed), ties broken by the most recently
loaned first (the last loaned server in the snapshot's node order, which both bodies keep in loan order).
Vacating: no job keeps or gets GPUs on a returned server. A job the decision moves off it (an elastic
scale-in) keeps its resize; any other job on it is suspended (checkpointed preemption) and queues again; a
launch onto it is dropped (the job waits for the next round).

Admin resize (`resize` of the API): the job is pinned to the size (`pin`: min = max = num, inelastic), and
its new placement comes from the engine's placer (restricted to the GPU type it runs on) and passes the
invariant check, as any policy's decision does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from elastisched.core.errors import InvariantViolation
from elastisched.core.events import Action, ActionKind
from elastisched.core.types import NO_ALLOCATION, Allocation, ClusterSnapshot, JobId, JobSpec, NodeId, Pool
from elastisched.engine.invariants import check
from elastisched.engine.placer import place


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Servers a round returns and what returning them did to the jobs on them."""

    servers: tuple[NodeId, ...] = ()
    preempted: tuple[JobId, ...] = ()
    scaled_in: tuple[JobId, ...] = ()


def choose_returned(snap: ClusterSnapshot, chosen: Sequence[NodeId]) -> tuple[NodeId, ...]:
    """The policy's valid choice, completed by the fallback (module docstring) up to the demand."""
    demand = snap.reclaim_demand
    loaned = [n for n in snap.nodes if n.pool is Pool.LOANABLE]
    ids = {n.node_id for n in loaned}
    out: list[NodeId] = []
    for n in chosen:
        if n in ids and n not in out and len(out) < demand:
            out.append(n)
    if len(out) < demand:
        used: dict[NodeId, int] = {}
        for j in snap.running_jobs().values():
            for n, k in j.allocation.placement:
                used[n] = used.get(n, 0) + k
        order = sorted(range(len(loaned)), key=lambda i: (used.get(loaned[i].node_id, 0), -i))
        out += [loaned[i].node_id for i in order if loaned[i].node_id not in out][: demand - len(out)]
    return tuple(out)


def vacate(snap: ClusterSnapshot, actions: Sequence[Action], returned: Sequence[NodeId]
           ) -> tuple[tuple[Action, ...], Reclaim]:
    """`actions` with no job left on or sent to a returned server (module docstring)."""
    gone = set(returned)
    out: list[Action] = []
    touched: set[JobId] = set()
    preempted: list[JobId] = []
    scaled_in: list[JobId] = []
    for a in actions:
        touched.add(a.job_id)
        on_gone = bool(gone.intersection(a.previous.nodes))
        if not gone.intersection(a.allocation.nodes):
            out.append(a)
            if on_gone:
                (preempted if a.kind is ActionKind.SUSPEND else scaled_in).append(a.job_id)
        elif a.previous.placement:
            out.append(Action(ActionKind.SUSPEND, a.job_id, NO_ALLOCATION, a.previous))
            if on_gone:
                preempted.append(a.job_id)
    for jid, j in snap.running_jobs().items():
        if jid not in touched and gone.intersection(j.allocation.nodes):
            out.append(Action(ActionKind.SUSPEND, jid, NO_ALLOCATION, j.allocation))
            preempted.append(jid)
    return tuple(out), Reclaim(tuple(returned), tuple(preempted), tuple(scaled_in))


def pin(spec: JobSpec, gpus: int) -> JobSpec:
    """The spec of a job an admin resized: exactly `gpus`, inelastic, for the rest of its life."""
    return dataclasses.replace(spec, num_gpus=gpus, min_gpus=gpus, max_gpus=gpus, elastic=False)


def admin_resize(snap: ClusterSnapshot, job_id: JobId, gpus: int) -> Action | None:
    """The action that gives running job `job_id` (its spec already pinned in `snap`) `gpus` GPUs of the type
    it runs on, placed by the engine's placer and checked; None when it does not fit now."""
    job = snap.jobs[job_id]
    cur = job.allocation
    if not cur.placement or cur.gpus == gpus:
        return None
    gtype = snap.node_set.gpu_type.get(cur.placement[0][0])
    allocs = {jid: j.allocation for jid, j in snap.running_jobs().items() if jid != job_id}
    allocs[job_id] = Allocation(num_gpus=gpus, gpu_type=gtype, batch_size=cur.batch_size,
                                local_batch=cur.local_batch)
    try:
        placed = place(allocs, snap)
        check(placed, snap, elastic=True)
    except InvariantViolation:
        return None
    return Action(ActionKind.RESIZE, job_id, placed[job_id], cur)
