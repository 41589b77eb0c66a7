"""Where each job's GPUs go, once its type and count are chosen.

Rules (ours; Lyra's best fit, lyra.md §2.3, with the goodput tables' packing):
1. A job whose type and count are unchanged keeps its GPUs (no restart); so does a job that only changes batch.
2. Every other job that runs is placed afresh, largest first, after the kept ones: whole free servers for each
   full server's worth, the rest on the server that fits it most tightly (best fit), so that jobs span as few
   servers as the table assumed and large holes stay for large jobs. Ties go to a training server over a
   loaned one (a loaned server can be reclaimed: a job's GPUs there may be lost), then to a server the job
   already uses (fewer GPUs move), then to the lower node index.
3. When no single server fits the remainder the job is spread over the servers with most free GPUs
   (fewest pieces).
Free GPUs are numpy arrays per type, so a round costs O(changed jobs × servers of their type).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from elastisched.core.nodes import NodeSet, node_set
from elastisched.core.types import NodeId, NodeView, Pool

Placement = tuple[tuple[NodeId, int], ...]


@dataclass(slots=True)
class TypeNodes:
    """The servers of one GPU type: ids, capacity, free GPUs now, loaned or not."""

    ids: list[NodeId]
    capacity: np.ndarray
    free: np.ndarray
    loaned: np.ndarray
    index: np.ndarray
    pos: dict[NodeId, int]


def type_nodes(nodes: tuple[NodeView, ...], gone: frozenset[NodeId]) -> dict[str, TypeNodes]:
    """Servers per GPU type, without the returned ones; all GPUs free (the caller takes the kept jobs'). Without a
    reclaim the arrays are built once per node tuple and only `free` is fresh each round."""
    if gone:
        return _group(nodes, gone)
    base = node_set(nodes).derived("elastisched.type_nodes", _whole)
    return {t: TypeNodes(tn.ids, tn.capacity, tn.capacity.copy(), tn.loaned, tn.index, tn.pos)
            for t, tn in base.items()}


def _whole(ns: NodeSet) -> dict[str, TypeNodes]:
    return _group(cast("tuple[NodeView, ...]", ns.nodes), frozenset())


def _group(nodes: Sequence[NodeView], gone: frozenset[NodeId]) -> dict[str, TypeNodes]:
    groups: dict[str, list[NodeView]] = {}
    for n in nodes:
        if n.node_id not in gone:
            groups.setdefault(n.gpu_type, []).append(n)
    out: dict[str, TypeNodes] = {}
    for t, ns in groups.items():
        cap = np.array([n.num_gpus for n in ns], dtype=np.int64)
        out[t] = TypeNodes([n.node_id for n in ns], cap, cap.copy(), np.array([n.pool is Pool.LOANABLE for n in ns]),
                           np.array([n.index for n in ns], dtype=np.int64), {n.node_id: i for i, n in enumerate(ns)})
    return out


def place_job(tn: TypeNodes, gpus: int, old: Placement) -> Placement:
    """Choose `gpus` GPUs on these servers (module docstring); () when they do not fit."""
    if gpus <= 0 or int(tn.free.sum()) < gpus:
        return ()
    mine = np.zeros(len(tn.ids), dtype=bool)
    for n, _ in old:
        i = tn.pos.get(n)
        if i is not None:
            mine[i] = True
    picks: dict[int, int] = {}
    left = gpus
    size = int(tn.capacity.max())
    while left >= size:  # whole free servers
        whole = np.flatnonzero((tn.free == tn.capacity) & (tn.capacity >= size))
        if not len(whole):
            break
        i = int(whole[np.lexsort((tn.index[whole], ~mine[whole], tn.loaned[whole]))[0]])
        picks[i] = int(tn.capacity[i])
        tn.free[i] = 0
        left -= picks[i]
    if left > 0:
        fit = np.flatnonzero(tn.free >= left)
        if len(fit):
            i = int(fit[np.lexsort((tn.index[fit], ~mine[fit], tn.free[fit], tn.loaned[fit]))[0]])
            picks[i] = picks.get(i, 0) + left
            tn.free[i] -= left
            left = 0
    while left > 0:  # spread: most free first
        i = int(np.lexsort((tn.index, ~mine, tn.loaned, -tn.free))[0])
        g = min(int(tn.free[i]), left)
        picks[i] = picks.get(i, 0) + g
        tn.free[i] -= g
        left -= g
    return tuple((tn.ids[i], g) for i, g in sorted(picks.items()))


def place_all(nodes: tuple[NodeView, ...], gone: frozenset[NodeId], kept: Mapping[str, Placement],
              wanted: Sequence[tuple[str, str, int, Placement]], closed: frozenset[NodeId] = frozenset()
              ) -> dict[str, Placement]:
    """Placements for `wanted` = (job, type, GPUs, old placement) after the `kept` ones (job -> placement);
    the result holds the kept ones unchanged and every wanted one that fits. `closed` servers keep what runs on
    them but take no new GPUs."""
    per_type = type_nodes(nodes, gone)
    node_type = node_set(nodes).gpu_type
    out: dict[str, Placement] = dict(kept)
    for p in kept.values():
        for n, g in p:
            tn = per_type[node_type[n]]
            tn.free[tn.pos[n]] -= g
    for n in closed:
        tn = per_type.get(node_type.get(n, ""))
        if tn is not None and n in tn.pos:
            tn.free[tn.pos[n]] = 0
    for job, t, gpus, old in sorted(wanted, key=lambda w: (-w[2], w[0])):
        tn = per_type.get(t)
        if tn is None:
            continue
        p = place_job(tn, gpus, old)
        if p:
            out[job] = p
    return out
