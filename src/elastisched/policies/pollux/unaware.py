"""Pollux as Sia's artifact runs it on a heterogeneous cluster: blind to GPU types (`unaware=True`).

Sia's artifact (siasosp23/artifacts `sia-simulator/multi_simulator_unaware.py`, `cluster_unaware.py`, `job.py`
with `h_unaware`; read, not copied) cuts every node into virtual nodes of the smallest node's GPU count, runs
the search over them, and a job given GPUs of several types keeps only those of its majority type (ties:
A100, then RTX, then T4, the artifact's `fix_allocations_by_dropping` order); the others stay idle for the
round. The search's rows are kept per job between rounds (`VRows`), so a job's split over the virtual nodes
of one real node is stable.
"""

from __future__ import annotations

import numpy as np

from elastisched.core.types import ClusterSnapshot, JobView

#: which type a job spread over several keeps when two types tie (artifact priority order)
TIE_ORDER = ("a100", "rtx", "t4")
VRows = dict[str, dict[str, int]]  # job → its GPUs per virtual node last round


def virtual_nodes(snap: ClusterSnapshot) -> list[tuple[str, str, int]]:
    """(virtual node, its real node, GPUs): every node cut into pieces of the smallest node's GPU count."""
    g = min(n.num_gpus for n in snap.nodes)
    out = []
    for n in snap.nodes:
        sizes = [g] * (n.num_gpus // g) + ([n.num_gpus % g] if n.num_gpus % g else [])
        out += [(f"{n.node_id}#{k}", n.node_id, size) for k, size in enumerate(sizes)]
    return out


def virtual_base(vrows: VRows, jobs: list[JobView], vids: list[str], owner: dict[str, str],
                 caps: np.ndarray) -> np.ndarray:
    """Each job's current GPUs on virtual nodes (jobs × virtual nodes): last round's split where it still
    matches the job's placement, otherwise filled into the node's freest virtual nodes."""
    base = np.zeros((len(jobs), len(vids)), dtype=np.int64)
    free = caps.copy()
    vpos = {v: k for k, v in enumerate(vids)}
    later: list[tuple[int, str, int]] = []
    for i, job in enumerate(jobs):
        prev = vrows.get(job.job_id, {})
        for n, g in job.allocation.placement:
            mine = {v: c for v, c in prev.items() if v in vpos and owner[v] == n}
            if sum(mine.values()) == g and all(free[vpos[v]] >= c for v, c in mine.items()):
                for v, c in mine.items():
                    base[i, vpos[v]] += c
                    free[vpos[v]] -= c
            else:
                later.append((i, n, g))
    for i, n, g in later:
        for k in sorted((vpos[v] for v in vids if owner[v] == n), key=lambda k: -free[k]):
            c = int(min(g, free[k]))
            base[i, k] += c
            free[k] -= c
            g -= c
    return base


def devirtualise(best: np.ndarray, ids: list[str], vids: list[str], owner: dict[str, str],
                 ntype: dict[str, str], real_ids: list[str]) -> tuple[np.ndarray, VRows]:
    """Virtual rows → (real rows, the kept split per job); a job spread over several GPU types keeps its
    majority type's GPUs only."""
    rpos = {n: k for k, n in enumerate(real_ids)}
    out = np.zeros((len(ids), len(real_ids)), dtype=np.int64)
    vrows: VRows = {}
    for i, jid in enumerate(ids):
        ks = np.flatnonzero(best[i])
        if not len(ks):
            continue
        count: dict[str, int] = {}
        for k in ks:
            count[ntype[vids[k]]] = count.get(ntype[vids[k]], 0) + int(best[i, k])
        keep = max(count, key=lambda t: (count[t], -(TIE_ORDER.index(t) if t in TIE_ORDER else len(TIE_ORDER))))
        row = {vids[k]: int(best[i, k]) for k in ks if ntype[vids[k]] == keep}
        vrows[jid] = row
        for v, c in row.items():
            out[i, rpos[owner[v]]] += c
    return out, vrows
