"""Pollux's allocation problem and its genetic operators, on populations of sparse states.

Follows the Pollux artifact (petuum/adaptdl `osdi21-artifact`, `simulator/pollux.py`, which runs pymoo's
NSGA-II with custom operators; read, not copied). A state is a (jobs × nodes) matrix of replicas, kept as its
non-zero cells (`policies/pollux/population.py`); every operator acts on a whole population at once and costs
O(cells + states × (jobs + nodes)), so the search scales to thousands of nodes (issue 22).

- Objectives (minimised): −(power mean, p = −1, of the jobs' scaled speedups + 1e-3) and −(cluster utility
  = Σ speedups / GPUs of the nodes in use). Speedups are scaled by `scale` (dominant share × nodes); a job
  whose row differs from the current allocation has its speedup multiplied by its restart factor.
- Crossover: single point over the job axis between two parents, both children kept.
- Mutation: 10 % of job rows reset to the current allocation; 10 % of job rows lose each replica with
  probability 0.1; then each (job, node) cell with free GPUs on its node is raised, with probability
  p₁ + p₂ − p₁p₂ (p₁ = 1 / jobs allowed on the node, p₂ = 1 / jobs already on it), to a uniform draw
  between its value and the per-node cap.
- Repair, in order: interference avoidance (a node keeps at most one distributed job: the first in job
  order), per-job replica cap and at most `max_nodes` nodes per job (both applied over a random node
  order), node capacity (earlier jobs first), per-job minimum (fewer → 0).
Reading (sparse form): a cell that is 0 is not stored, so the mutation draws p₁ + p₂ − p₁p₂ = 1 − (1 − p₁)(1 − p₂)
as two lotteries — for each free node, how many of its allowed jobs win p₁ (binomial) and which (uniformly,
without repetition), and p₂ for each job on it — raising a cell that wins either: the same law as one draw
per cell, with random numbers drawn only where a cell can change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elastisched.policies.pollux.population import (
    Population,
    cell_keys,
    from_cells,
    grouped_cumsum,
    keep_cells,
    take,
    to_dense,
)

P_NORM = -1.0  # exponent of the power mean; more negative = fairer (artifact `p = -1`)
MAX_REDRAWS = 64  # mutation: redraws of a job drawn twice for one node (then dropped; ~never reached)


@dataclass
class AllocationProblem:
    speedup: np.ndarray  # (J, 2, R+1): speedup on r replicas, row 1 = on more than one node
    base: Population  # one state: the current replicas per (job, node)
    node_caps: np.ndarray  # (N,) GPUs per node
    node_class: np.ndarray  # (N,) class of each node (its GPU type)
    allowed: np.ndarray  # (J, C) may the job use nodes of the class
    max_replicas: np.ndarray  # (J,)
    min_replicas: np.ndarray  # (J,)
    restart_factor: np.ndarray  # (J,) multiplier of the speedup when the job's allocation changes
    scale: float  # speedups × scale: a dominant share of one node ≙ 1
    max_nodes: int = 16

    def __post_init__(self) -> None:
        self.node_caps = np.asarray(self.node_caps, dtype=np.int64)
        self.node_class = np.asarray(self.node_class, dtype=np.intp)
        self.allowed = np.asarray(self.allowed, dtype=bool)
        self.num_jobs, self.num_nodes = self.allowed.shape[0], len(self.node_caps)
        self.shape = (self.num_jobs, self.num_nodes)
        self._num_classes = self.allowed.shape[1]
        self._allowed_flat = self.allowed.reshape(-1).astype(np.int64)
        self._rmax = self.speedup.shape[2] - 1
        b = self.base
        self._base_nnz = np.bincount(b.job, minlength=self.num_jobs)
        self._base_lookup = _CellLookup(b.job, b.node, b.count, self.num_nodes, self.num_jobs)
        order = np.argsort(b.job, kind="stable")
        self._base_sorted = (b.node[order], b.count[order])
        self._base_ptr = np.zeros(self.num_jobs + 1, dtype=np.int64)
        np.cumsum(self._base_nnz, out=self._base_ptr[1:])
        cls_job, self._class_jobs = np.nonzero(self.allowed.T)  # jobs allowed on each class, class by class
        per_class = np.bincount(cls_job, minlength=self.allowed.shape[1])
        self._class_ptr = np.concatenate([[0], np.cumsum(per_class)])
        self._allowed_on_node = per_class[self.node_class]

    @classmethod
    def from_dense(cls, speedup: np.ndarray, base: np.ndarray, node_caps: np.ndarray, cap: np.ndarray,
                   max_replicas: np.ndarray, min_replicas: np.ndarray, restart_factor: np.ndarray, scale: float,
                   max_nodes: int = 16) -> AllocationProblem:
        """From a dense (J, N) current allocation and per-cell caps (each 0 or the node's GPUs)."""
        from elastisched.policies.pollux.population import from_dense

        cap = np.asarray(cap)
        if ((cap != 0) & (cap != np.asarray(node_caps)[None, :])).any():
            raise ValueError("cap: each cell must be 0 or its node's GPUs")
        return cls(speedup, from_dense(np.asarray(base)[None]), np.asarray(node_caps), np.arange(len(node_caps)),
                   cap > 0, np.asarray(max_replicas), np.asarray(min_replicas), np.asarray(restart_factor),
                   scale, max_nodes)

    def cell_cap(self, job: np.ndarray, node: np.ndarray) -> np.ndarray:
        """Most replicas of the job on the node (0 = not allowed)."""
        return self._allowed_flat[job * self._num_classes + self.node_class[node]] * self.node_caps[node]

    def base_rows(self, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(index into `jobs`, node, count) of the current allocation's cells of those jobs."""
        bn, bc = self._base_sorted
        starts, lens = self._base_ptr[jobs], self._base_nnz[jobs]
        offs = np.zeros(len(jobs) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        pos = np.repeat(starts - offs[:-1], lens) + np.arange(offs[-1])
        return np.repeat(np.arange(len(jobs)), lens), bn[pos], bc[pos]

    # ------------------------------------------------------------------ objectives
    def evaluate(self, pop: Population) -> np.ndarray:
        """(M, 2) objectives."""
        m, nj = len(pop), self.num_jobs
        st = pop.state
        row = st * nj + pop.job
        reps = np.bincount(row, weights=pop.count, minlength=m * nj).reshape(m, nj).astype(np.intp)
        nnz = np.bincount(row, minlength=m * nj).reshape(m, nj)
        same = self._base_lookup.get(pop.job, pop.node) == pop.count
        match = np.bincount(row[same], minlength=m * nj).reshape(m, nj)
        sp = self.speedup[np.arange(nj)[None, :], (nnz > 1).astype(np.intp), np.minimum(reps, self._rmax)]
        scaled = sp * self.scale
        restart = (nnz != self._base_nnz) | (match != self._base_nnz)
        scaled = np.where(restart, scaled * self.restart_factor, scaled)
        mean = np.mean((scaled + 1e-3) ** P_NORM, axis=1) ** (1.0 / P_NORM)
        used = np.bincount(st * self.num_nodes + pop.node, minlength=m * self.num_nodes).reshape(m, -1) > 0
        total = used @ self.node_caps
        util = np.where(total > 0, sp.sum(axis=1) / np.maximum(total, 1), 0.0)
        return np.column_stack([-mean, -util])

    def dense(self, pop: Population) -> np.ndarray:
        return to_dense(pop, self.num_jobs, self.num_nodes)

    # ------------------------------------------------------------------ variation
    def crossover(self, pop: Population, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> Population:
        """Children of parents a[k], b[k]: jobs below a random cut from one parent, the rest from the other."""
        n = len(a)
        cut = rng.integers(self.num_jobs, size=n)
        pa, pb = take(pop, a), take(pop, b)
        sa, sb = pa.state, pb.state
        low_a, low_b = pa.job < cut[sa], pb.job < cut[sb]
        parts = [(sb[low_b], pb, low_b), (sa[~low_a], pa, ~low_a), (n + sa[low_a], pa, low_a),
                 (n + sb[~low_b], pb, ~low_b)]
        return from_cells(np.concatenate([s for s, _, _ in parts]), np.concatenate([p.job[k] for _, p, k in parts]),
                          np.concatenate([p.node[k] for _, p, k in parts]),
                          np.concatenate([p.count[k] for _, p, k in parts]), 2 * n, self.shape)

    def mutate(self, pop: Population, rng: np.random.Generator) -> Population:
        """The artifact's three mutation steps; randoms are drawn only where a step can act."""
        m, nj = len(pop), self.num_jobs
        st = pop.state
        reset = rng.random((m, nj), dtype=np.float32) < 0.1
        keep = ~reset[st, pop.job]
        ps, js = np.nonzero(reset)
        k, bn, bc = self.base_rows(js)
        pop = from_cells(np.concatenate([st[keep], ps[k]]), np.concatenate([pop.job[keep], js[k]]),
                         np.concatenate([pop.node[keep], bn]), np.concatenate([pop.count[keep], bc]), m, self.shape)
        st = pop.state
        lose = rng.random((m, nj), dtype=np.float32) < 0.1
        hit = np.flatnonzero(lose[st, pop.job])
        if len(hit):  # a lost cell keeps a count of 0 until the raise step merges and compacts
            pop.count[hit[rng.random(len(hit), dtype=np.float32) < 0.1]] = 0
        return self._raise_free(pop, rng)

    def _raise_free(self, pop: Population, rng: np.random.Generator) -> Population:
        """Step 3: on every (state, node) with free GPUs, raise each allowed job's cell with p₁ + p₂ − p₁p₂,
        drawn as two lotteries: p₁ over every allowed job, p₂ over the jobs on the node (raised if either)."""
        m, nn = len(pop), self.num_nodes
        st = pop.state
        pk = st * nn + pop.node
        free = self.node_caps[None, :] - np.bincount(pk, weights=pop.count, minlength=m * nn).reshape(m, nn)
        fp, fnode = np.nonzero(free >= 1)
        if not len(fp):
            return pop
        pair = np.full(m * nn, -1, dtype=np.intp)
        pair[fp * nn + fnode] = np.arange(len(fp))
        cap = self.cell_cap(pop.job, pop.node)
        cell_pair = pair[pk]
        on_cell = (cell_pair >= 0) & (cap > 0) & (pop.count > 0)
        on = np.bincount(cell_pair[on_cell], minlength=len(fp))
        n_allowed = self._allowed_on_node[fnode]
        p1 = (1.0 / np.maximum(n_allowed, 1)).astype(np.float32) * (n_allowed > 0)
        idx = np.flatnonzero(on_cell)
        raised = np.zeros(len(pk), dtype=bool)
        raised[idx[rng.random(len(idx), dtype=np.float32) < 1.0 / np.maximum(on[cell_pair[idx]], 1)]] = True
        pairs, jobs = self._lottery(fnode, n_allowed, p1, rng)
        key = (fp[pairs] * nn + fnode[pairs]) * self.num_jobs + jobs
        keys = cell_keys(st, pop.job, pop.node, self.shape)
        pos = np.minimum(np.searchsorted(keys, key), max(len(keys) - 1, 0))
        found = (pos < len(keys)) & (keys[pos] == key) if len(keys) else np.zeros(len(key), dtype=bool)
        raised[pos[found]] = True
        count = pop.count.copy()
        up = np.flatnonzero(raised)
        low = np.minimum(count[up], cap[up])
        count[up] = low + (rng.random(len(up)) * (cap[up] - low + 1)).astype(np.int64)
        new_pair, new_job = pairs[~found], jobs[~found]
        new_node = fnode[new_pair]
        value = (rng.random(len(new_pair)) * (self.cell_cap(new_job, new_node) + 1)).astype(np.int64)
        return from_cells(np.concatenate([st, fp[new_pair]]), np.concatenate([pop.job, new_job]),
                          np.concatenate([pop.node, new_node]), np.concatenate([count, value]), m, self.shape)

    def _lottery(self, fnode: np.ndarray, n_allowed: np.ndarray, p1: np.ndarray, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(free pair, job) drawn with probability p₁ for each job allowed on the pair's node: how many per
        pair is binomial, which ones uniform without repetition (a repeat is drawn again)."""
        pairs = np.repeat(np.arange(len(fnode)), rng.binomial(n_allowed, p1.astype(np.float64)))
        jobs = np.empty(len(pairs), dtype=np.intp)
        start = self._class_ptr[self.node_class[fnode[pairs]]]
        lens = self._allowed_on_node[fnode[pairs]]
        first = np.searchsorted(pairs, pairs)  # pairs come sorted: a pair's draws sit side by side
        rank = np.arange(len(pairs)) - first
        todo = np.arange(len(pairs))
        for _ in range(MAX_REDRAWS):
            if not len(todo):
                break
            jobs[todo] = self._class_jobs[start[todo] + (rng.random(len(todo)) * lens[todo]).astype(np.intp)]
            dup = np.zeros(len(pairs), dtype=bool)
            for d in range(1, int(rank.max(initial=0)) + 1):  # a repeat of an earlier draw of the same pair
                dup[d:] |= (rank[d:] >= d) & (jobs[d:] == jobs[:-d])
            todo = np.flatnonzero(dup)
        ok = np.ones(len(pairs), dtype=bool)
        ok[todo] = False
        return pairs[ok], jobs[ok]

    # ------------------------------------------------------------------ repair
    def repair(self, pop: Population, rng: np.random.Generator) -> Population:
        """Make states feasible. Each fix sets counts (0 = cell gone) and touches only the cells of the
        (state, node) or (state, job) pairs that break its rule; the cells are compacted once at the end."""
        m, nj, nn = len(pop), self.num_jobs, self.num_nodes
        st = pop.state
        row, pk = st * nj + pop.job, st * nn + pop.node
        count = np.minimum(pop.count, self.cell_cap(pop.job, pop.node))
        self._one_distributed_per_node(count, row, pk, m)
        self._job_limits(count, row, pop.job, m, rng)
        self._node_capacity(count, pk, pop.node, m)
        reps = np.bincount(row, weights=count, minlength=m * nj)
        count[reps[row] < self.min_replicas[pop.job]] = 0
        return keep_cells(Population(pop.ptr, pop.job, pop.node, count), count > 0, st)

    def _one_distributed_per_node(self, count: np.ndarray, row: np.ndarray, pk: np.ndarray, m: int) -> None:
        """A node keeps only its first distributed job (cells of a node come in job order)."""
        on = count > 0
        idx = np.flatnonzero(on & (np.bincount(row[on], minlength=m * self.num_jobs)[row] > 1))
        later = np.zeros(len(idx), dtype=bool)
        later[1:] = pk[idx[1:]] == pk[idx[:-1]]
        count[idx[later]] = 0

    def _job_limits(self, count: np.ndarray, row: np.ndarray, job: np.ndarray, m: int,
                    rng: np.random.Generator) -> None:
        """Per job: at most its replica cap and `max_nodes` nodes, over a random order of its nodes."""
        reps = np.bincount(row, weights=count, minlength=m * self.num_jobs)
        nnz = np.bincount(row[count > 0], minlength=m * self.num_jobs)
        idx = np.flatnonzero(((reps[row] > self.max_replicas[job]) | (nnz[row] > self.max_nodes)) & (count > 0))
        if not len(idx):
            return
        idx = idx[np.argsort((row[idx] << 30) | rng.integers(1 << 30, size=len(idx)))]  # random node order per row
        g, c = row[idx], count[idx]
        cs = grouped_cumsum(c, g)
        upto = np.minimum(cs, self.max_replicas[job[idx]])
        new = upto - np.minimum(cs - c, upto)
        nodes = grouped_cumsum((new > 0).astype(np.int64), g)
        count[idx] = np.where(nodes <= self.max_nodes, new, 0)

    def _node_capacity(self, count: np.ndarray, pk: np.ndarray, node: np.ndarray, m: int) -> None:
        """Per node: earlier jobs first up to its GPUs (cells of a node come in job order)."""
        used = np.bincount(pk, weights=count, minlength=m * self.num_nodes)
        idx = np.flatnonzero(used[pk] > self.node_caps[node])
        if not len(idx):
            return
        c = count[idx]
        cs = grouped_cumsum(c, pk[idx])
        upto = np.minimum(cs, self.node_caps[node[idx]])
        count[idx] = upto - np.minimum(cs - c, upto)


class _CellLookup:
    """Value of (job, node) in one sparse state (0 where absent): a dense table when jobs × nodes is small
    enough, else a binary search."""

    DENSE_MAX = 1 << 24

    def __init__(self, job: np.ndarray, node: np.ndarray, count: np.ndarray, num_nodes: int,
                 num_jobs: int) -> None:
        self.num_nodes = num_nodes
        key = job.astype(np.int64) * num_nodes + node
        self.table: np.ndarray | None = None
        if num_jobs * num_nodes <= self.DENSE_MAX:
            self.table = np.zeros(num_jobs * num_nodes, dtype=np.int64)
            self.table[key] = count
        order = np.argsort(key)
        self.keys, self.values = key[order], count[order]

    def get(self, job: np.ndarray, node: np.ndarray) -> np.ndarray:
        if self.table is not None:
            return self.table[job * self.num_nodes + node]  # type: ignore[no-any-return]
        if not len(self.keys):
            return np.zeros(len(job), dtype=np.int64)
        key = job.astype(np.int64) * self.num_nodes + node
        pos = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        return np.where(self.keys[pos] == key, self.values[pos], 0)
