"""A population of allocation states for Pollux's search, kept as its non-zero cells (issue 22).

A state is a (jobs × nodes) matrix of replicas. At cluster scale almost every cell is 0 (a job holds at most
`max_nodes` nodes), so a population of M states is stored as flat arrays of its non-zero cells — `job`, `node`,
`count` (> 0) — sorted by (state, node, job) (cells of state s at `ptr[s]:ptr[s + 1]`), at most one cell per
(state, job, node). The order makes a node's cells contiguous and in job order (what the capacity repair and
interference avoidance walk) and lets a cell be found by binary search; operations that add cells merge
sorted runs. Every operation costs about O(cells), not O(M × jobs × nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


@dataclass
class Population:
    ptr: np.ndarray  # (M + 1,) int64 offsets
    job: np.ndarray  # (E,) intp
    node: np.ndarray  # (E,) intp
    count: np.ndarray  # (E,) int64, > 0
    _state: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.ptr) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.ptr)

    @property
    def state(self) -> np.ndarray:
        """State index of every cell (computed once)."""
        if self._state is None:
            self._state = np.repeat(np.arange(len(self), dtype=np.intp), self.sizes)
        return self._state


def empty(m: int = 0) -> Population:
    z = np.zeros(0, dtype=np.intp)
    return Population(np.zeros(m + 1, dtype=np.int64), z, z.copy(), np.zeros(0, dtype=np.int64))


def cell_keys(state: np.ndarray, job: np.ndarray, node: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The sort key of cells: (state · nodes + node) · jobs + job."""
    num_jobs, num_nodes = shape
    return (state.astype(np.int64) * num_nodes + node) * num_jobs + job  # type: ignore[no-any-return]


def from_cells(state: np.ndarray, job: np.ndarray, node: np.ndarray, count: np.ndarray, m: int,
               shape: tuple[int, int]) -> Population:
    """Distinct cells with their state ids, in any order → a population of `m` states over `shape` = (jobs,
    nodes); cells of 0 are dropped."""
    keep = count > 0
    if not keep.all():
        state, job, node, count = state[keep], job[keep], node[keep], count[keep]
    key = cell_keys(state, job, node, shape)
    if len(key) > 1 and (key[1:] < key[:-1]).any():
        order = np.argsort(key, kind="stable")  # pieces arrive sorted: timsort merges the runs
        state, job, node, count = state[order], job[order], node[order], count[order]
    ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(state, minlength=m), out=ptr[1:])
    return Population(ptr, job.astype(np.intp, copy=False), node.astype(np.intp, copy=False),
                      count.astype(np.int64, copy=False), state.astype(np.intp, copy=False))


def keep_cells(pop: Population, mask: np.ndarray, state: np.ndarray | None = None) -> Population:
    """The population with only the cells where `mask` holds."""
    st = pop.state if state is None else state
    st = st[mask]
    ptr = np.zeros(len(pop) + 1, dtype=np.int64)
    np.cumsum(np.bincount(st, minlength=len(pop)), out=ptr[1:])
    return Population(ptr, pop.job[mask], pop.node[mask], pop.count[mask], st)


def take(pop: Population, idx: np.ndarray) -> Population:
    """States `idx` (repeats allowed), in that order."""
    idx = np.asarray(idx, dtype=np.intp)
    starts = pop.ptr[idx]
    lens = pop.ptr[idx + 1] - starts
    ptr = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    pos = np.repeat(starts - ptr[:-1], lens) + np.arange(ptr[-1])
    return Population(ptr, pop.job[pos], pop.node[pos], pop.count[pos])


def concat(a: Population, b: Population) -> Population:
    return Population(np.concatenate([a.ptr, a.ptr[-1] + b.ptr[1:]]), np.concatenate([a.job, b.job]),
                      np.concatenate([a.node, b.node]), np.concatenate([a.count, b.count]))


def hashes(pop: Population, num_nodes: int) -> np.ndarray:
    """A 64-bit fingerprint per state, independent of the order of its cells (a sum of mixed cell keys):
    equal states give equal fingerprints; distinct ones collide with probability ~2⁻⁶⁴."""
    key = (pop.job.astype(np.uint64) * np.uint64(num_nodes) + pop.node.astype(np.uint64)) * np.uint64(1024)
    z = key + pop.count.astype(np.uint64) + _MIX[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX[1]
    z = (z ^ (z >> np.uint64(27))) * _MIX[2]
    z ^= z >> np.uint64(31)
    cs = np.zeros(len(z) + 1, dtype=np.uint64)
    np.cumsum(z, out=cs[1:])
    return cs[pop.ptr[1:]] - cs[pop.ptr[:-1]]  # type: ignore[no-any-return]


def grouped_cumsum(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running sum of `values` within runs of equal `group` (cells already ordered by group)."""
    cs = np.cumsum(values)
    if not len(cs):
        return cs
    start = np.ones(len(group), dtype=bool)
    start[1:] = group[1:] != group[:-1]
    first = np.flatnonzero(start)
    before = np.repeat(cs[first] - values[first], np.diff(np.append(first, len(group))))
    return cs - before  # type: ignore[no-any-return]


def to_dense(pop: Population, num_jobs: int, num_nodes: int) -> np.ndarray:
    """(M, jobs, nodes) replicas."""
    out = np.zeros((len(pop), num_jobs, num_nodes), dtype=np.int64)
    out[pop.state, pop.job, pop.node] = pop.count
    return out


def from_dense(states: np.ndarray) -> Population:
    """(M, jobs, nodes) replicas → cells."""
    st, j, n = np.nonzero(states)
    return from_cells(st, j, n, states[st, j, n].astype(np.int64), len(states), states.shape[1:])
