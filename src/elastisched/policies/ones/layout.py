"""The deployed slot array of the `ones` policy, rebuilt each round from the snapshot (split from `ones.py`).

Slots are laid out node by node in `ClusterSnapshot.nodes` order. A job keeps the slots the policy gave it
when the snapshot still shows it on the same nodes; a job placed by someone else (a restore, the placer)
takes the first free slots of its nodes.
"""

from __future__ import annotations

import numpy as np

from elastisched.core.types import ClusterSnapshot, JobView
from elastisched.policies.ones.ops import EMPTY


def same_nodes(slots: list[int], job: JobView, node_ids: list[str], node_of: np.ndarray) -> bool:
    """Whether `slots` cover exactly the job's placement (GPUs per node)."""
    have = [node_ids[n] for n in node_of[slots]]
    return dict(job.allocation.placement) == {n: have.count(n) for n in set(have)}


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


def pack(best: np.ndarray, node_of: np.ndarray, running: np.ndarray) -> np.ndarray:
    """`pack_nodes` (D7): a job that (re)starts on slots spread over more nodes than it needs moves, within the
    slots the layout leaves free, onto as few nodes as possible: whole free nodes first, the rest on the free
    node that fits it best (fewest spare GPUs, then the lowest index). `reorder` takes the free run with the
    fewest spare slots, node alignment only breaking ties, so on 4-GPU nodes half of the 4-GPU jobs of a Pollux
    workload straddled two nodes, where T4 data parallelism is far slower. Running jobs never move here (a
    move is a restart); a job that cannot be packed keeps its slots."""
    out = best.copy()
    size = np.bincount(node_of)
    jobs, cnt = np.unique(out[out >= 0], return_counts=True)
    for jj, n in sorted(zip(jobs.tolist(), cnt.tolist(), strict=True), key=lambda t: (-t[1], t[0])):
        if running[jj]:
            continue
        sl = np.flatnonzero(out == jj)
        avail_slot = (out == EMPTY) | (out == jj)
        avail = np.bincount(node_of[avail_slot], minlength=size.size)
        full = np.flatnonzero(avail == size)
        take: list[int] = []
        left = n
        for nd in full:  # whole free nodes while the job fills them
            if left >= size[nd]:
                take.append(int(nd))
                left -= int(size[nd])
        if left:
            fit = [nd for nd in range(size.size) if nd not in take and avail[nd] >= left]
            if not fit:
                continue
            take.append(min(fit, key=lambda nd: (avail[nd] - left, nd)))
        if len(take) >= np.unique(node_of[sl]).size:
            continue
        new: list[int] = []
        for nd in take:
            free = np.flatnonzero(avail_slot & (node_of == nd))
            new += free[:min(n - len(new), free.size)].tolist()
        out[sl] = EMPTY
        out[np.array(new, dtype=np.int64)] = jj
    return out
