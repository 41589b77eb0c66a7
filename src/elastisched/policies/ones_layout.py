"""The deployed slot array of the `ones` policy, rebuilt each round from the snapshot (split from `ones.py`).

Slots are laid out node by node in `ClusterSnapshot.nodes` order. A job keeps the slots the policy gave it
when the snapshot still shows it on the same nodes; a job placed by someone else (a restore, the placer)
takes the first free slots of its nodes.
"""

from __future__ import annotations

import numpy as np

from elastisched.core.types import ClusterSnapshot, JobView
from elastisched.policies._ones_ops import EMPTY


def same_nodes(slots: list[int], job: JobView, node_ids: list[str], node_of: np.ndarray) -> bool:
    """Whether `slots` cover exactly the job's placement (GPUs per node)."""
    want = {n: g for n, g in job.allocation.placement}
    have: dict[str, int] = {}
    for s in slots:
        nid = node_ids[node_of[s]]
        have[nid] = have.get(nid, 0) + 1
    return want == have


def current(snap: ClusterSnapshot, slots: dict[str, list[int]], index: dict[str, int], node_first: dict[str, int],
            node_ids: list[str], node_of: np.ndarray, capacity: int) -> np.ndarray:
    """(C,) job index per slot (-1 empty); forgets the slots of jobs that no longer run (mutates `slots`)."""
    cur = np.full(capacity, EMPTY, dtype=np.int64)
    pending: list[tuple[int, str, int]] = []
    for jid, job in snap.jobs.items():
        if not job.gpus:
            slots.pop(jid, None)
            continue
        mine = slots.get(jid)
        if mine is not None and same_nodes(mine, job, node_ids, node_of):
            cur[mine] = index[jid]
        else:
            pending += [(index[jid], n, g) for n, g in job.allocation.placement]
    for ji, node, g in pending:  # placed by someone else (restore, placer): first free slots of the node
        base = node_first[node]
        width = next(nd.num_gpus for nd in snap.nodes if nd.node_id == node)
        free = [s for s in range(base, base + width) if cur[s] == EMPTY][:g]
        cur[free] = ji
    return cur
