"""What Pollux's search runs over: the nodes it needs, and the previous round's front mapped onto them.

On a large, mostly idle cluster identical empty nodes are one choice, not many (issue 22). Two nodes of the
same GPU type and GPU count that hold no job now are interchangeable: swapping them maps every state to one
with the same objectives (speedups depend on a job's replicas and node count, the restart test on its current
cells, utility on the GPUs of the nodes in use) and the same feasibility. No feasible state uses more nodes of
a type than the jobs allowed on it can span — Σ min(`max_nodes`, max replicas) over those jobs — so the search
keeps only that many empty nodes per (type, GPU count), the first in cluster order, besides every node in use,
and the previous front's states are mapped onto them by that swap. The optimum over the kept nodes equals the
optimum over all of them; the search's random draws differ (fewer nodes to raise), so the policy narrows only
clusters larger than the artifacts' (`PolluxPolicy.narrow_above`).
Reading (ours; the artifacts' clusters are small enough to search whole): the choice among identical empty
nodes is by cluster order, so a job starts on the lowest-numbered free nodes the search picks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elastisched.policies.pollux.population import Population, from_cells

#: the last round's front, its jobs and its nodes (ids)
Front = tuple[Population, list[str], list[str]]


@dataclass
class KeptNodes:
    """The nodes a round searches over. `keep`: their indices (ascending) among all nodes; `group`: per node,
    its group of identical empty nodes (-1: busy, kept); `slot`: (group, rank) → position in `keep` of the
    group's kept empty nodes in cluster order (-1 past the last)."""

    keep: np.ndarray
    group: np.ndarray
    slot: np.ndarray

    @property
    def everything(self) -> bool:
        return len(self.keep) == len(self.group)


def kept_nodes(base: Population, caps: np.ndarray, node_class: np.ndarray, allowed: np.ndarray,
               max_replicas: np.ndarray, max_nodes: int) -> KeptNodes:
    """Every node with a current cell, and per (class, GPUs) group of the others the most any state can use:
    Σ min(max replicas, `max_nodes`) over the jobs allowed on the class."""
    n = len(caps)
    busy = np.zeros(n, dtype=bool)
    busy[base.node] = True
    need = np.minimum(max_replicas, max_nodes) @ allowed.astype(np.int64)  # per class
    empty = np.flatnonzero(~busy)
    group = np.full(n, -1, dtype=np.intp)
    if not len(empty):
        return KeptNodes(np.arange(n), group, np.full((0, 1), -1, dtype=np.intp))
    key = node_class[empty].astype(np.int64) * (int(caps.max()) + 1) + caps[empty]
    uniq, group[empty] = np.unique(key, return_inverse=True)
    by_group = empty[np.argsort(group[empty], kind="stable")]  # empty nodes by group, cluster order within one
    g = group[by_group]
    rank = np.arange(len(g)) - np.searchsorted(g, g)
    wanted = rank < need[node_class[by_group]]
    kept_empty = by_group[wanted]
    mask = busy.copy()
    mask[kept_empty] = True
    keep = np.flatnonzero(mask)
    slot = np.full((len(uniq), max(int(rank[wanted].max(initial=0)) + 1, 1)), -1, dtype=np.intp)
    slot[g[wanted], rank[wanted]] = np.searchsorted(keep, kept_empty)
    return KeptNodes(keep, group, slot)


def onto_kept(states: Population, kept: KeptNodes, num_jobs: int) -> Population:
    """States over all nodes → over the kept ones. A cell on a busy node keeps its node; a state's empty nodes
    of one group move, in cluster order, onto the group's kept ones — a swap of identical empty nodes, so the
    objectives are unchanged — and cells past the last kept one are dropped (the repair would drop them)."""
    st, node = states.state, states.node
    grp = kept.group[node]
    target = np.searchsorted(kept.keep, node)  # busy nodes: their own position
    moved = np.flatnonzero(grp >= 0)
    if len(moved):  # cells come sorted by (state, node): a (state, node) pair's cells sit side by side
        s, nd, g = st[moved], node[moved], grp[moved]
        new_pair = np.ones(len(moved), dtype=bool)
        new_pair[1:] = (s[1:] != s[:-1]) | (nd[1:] != nd[:-1])
        pair = np.cumsum(new_pair) - 1
        first = np.flatnonzero(new_pair)
        run = s[first].astype(np.int64) * len(kept.slot) + g[first]
        order = np.argsort(run, kind="stable")  # pairs by (state, group), cluster order within one
        rank = np.empty(len(first), dtype=np.intp)
        rank[order] = np.arange(len(order)) - np.searchsorted(run[order], run[order])
        width = kept.slot.shape[1]
        pos = np.where(rank < width, kept.slot[g[first], np.minimum(rank, width - 1)], -1)
        target[moved] = pos[pair]
    ok = target >= 0
    return from_cells(st[ok], states.job[ok], target[ok], states.count[ok], len(states),
                      (num_jobs, len(kept.keep)))


def initial_states(prev: Front | None, base: Population, ids: list[str], node_ids: list[str]) -> Population:
    """The previous round's non-dominated states mapped onto today's jobs and nodes (artifact
    `_adapt_prev_states`; cells of jobs or nodes gone are dropped), or the current allocation alone."""
    if prev is None:
        return base
    states, pjobs, pnodes = prev
    jpos = {j: k for k, j in enumerate(ids)}
    npos = {n: k for k, n in enumerate(node_ids)}
    jmap = np.array([jpos.get(j, -1) for j in pjobs] + [-1], dtype=np.intp)
    nmap = np.array([npos.get(n, -1) for n in pnodes] + [-1], dtype=np.intp)
    job, node = jmap[states.job], nmap[states.node]
    ok = (job >= 0) & (node >= 0)
    return from_cells(states.state[ok], job[ok], node[ok], states.count[ok], len(states), (len(ids), len(node_ids)))
