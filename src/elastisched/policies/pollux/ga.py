"""Pollux's cluster-wide search: NSGA-II over job × node allocation matrices, vectorised in numpy.

Follows the Pollux artifact (petuum/adaptdl `osdi21-artifact`, `simulator/pollux.py`, which runs pymoo's
NSGA-II with custom operators; read, not copied). A state is a (jobs × nodes) matrix of replicas; the
population is one (P × J × N) array and every operator acts on all of it at once.

- Objectives (minimised): −(power mean, p = −1, of the jobs' scaled speedups + 1e-3) and −(cluster utility
  = Σ speedups / GPUs of the nodes in use). Speedups are scaled by `scale` (dominant share × nodes); a job
  whose row differs from the current allocation has its speedup multiplied by its restart factor.
  The chosen state is the non-dominated one with the best first objective (the artifact's `argmin`).
- Crossover: single point over the job axis between two parents, both children kept.
- Mutation: 10 % of job rows reset to the current allocation; 10 % of job rows lose each replica with
  probability 0.1; then each (job, node) cell with free GPUs on its node is raised, with probability
  p₁ + p₂ − p₁p₂ (p₁ = 1 / jobs allowed on the node, p₂ = 1 / jobs already on it), to a uniform draw
  between its value and the per-node cap.
- Repair, in order: interference avoidance (a node keeps at most one distributed job: the first in job
  order), per-job replica cap and at most `max_nodes` nodes per job (both applied over a random node
  order), node capacity (earlier jobs first), per-job minimum (fewer → 0).
- Selection: binary tournament on (rank, crowding distance), survival by rank then crowding distance, as
  NSGA-II; offspring duplicating a member or each other are dropped and mating repeats (pymoo's
  duplicate elimination; we stop after `max_mating_rounds` instead of pymoo's 100).
Readings of the artifact: the initial population is the previous round's non-dominated set mapped onto
the current jobs and nodes (or the current allocation alone), repaired; `n_gen` counts the initial
population as generation 1, as pymoo does; ties in the tournament are broken at random.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

P_NORM = -1.0  # exponent of the power mean; more negative = fairer (artifact `p = -1`)


@dataclass
class AllocationProblem:
    speedup: np.ndarray  # (J, 2, R+1): speedup on r replicas, row 1 = on more than one node
    base: np.ndarray  # (J, N) current replicas per node
    node_caps: np.ndarray  # (N,) GPUs per node
    cap: np.ndarray  # (J, N) most replicas of the job on the node (0 = not allowed)
    max_replicas: np.ndarray  # (J,)
    min_replicas: np.ndarray  # (J,)
    restart_factor: np.ndarray  # (J,) multiplier of the speedup when the job's allocation changes
    scale: float  # speedups × scale: a dominant share of one node ≙ 1
    max_nodes: int = 16

    def __post_init__(self) -> None:
        self.base = self.base.astype(np.int8)
        self.cap = self.cap.astype(np.int8)
        self._allowed_t = np.ascontiguousarray((self.cap > 0).T)  # (N, J)
        self._jidx = np.arange(self.base.shape[0])[None, :]
        self._rmax = self.speedup.shape[2] - 1

    def evaluate(self, states: np.ndarray) -> np.ndarray:
        """(P, 2) objectives of (P, J, N) states."""
        reps = states.sum(axis=2, dtype=np.intp)
        multi = (np.count_nonzero(states, axis=2) > 1).astype(np.intp)
        sp = self.speedup[self._jidx, multi, np.minimum(reps, self._rmax)]
        scaled = sp * self.scale
        restart = (states != self.base).any(axis=2)
        scaled = np.where(restart, scaled * self.restart_factor, scaled)
        mean = np.mean((scaled + 1e-3) ** P_NORM, axis=1) ** (1.0 / P_NORM)
        active = states.any(axis=1)
        total = (active * self.node_caps).sum(axis=1)
        util = np.where(total > 0, sp.sum(axis=1) / np.maximum(total, 1), 0.0)
        return np.column_stack([-mean, -util])

    def crossover(self, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        j = a.shape[1]
        mask = (np.arange(j)[None, :] < rng.integers(j, size=(len(a), 1)))[:, :, None]
        return np.concatenate([np.where(mask, b, a), np.where(mask, a, b)]).astype(np.int8)

    def mutate(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The artifact's three mutation steps; randoms are drawn only where a step can act."""
        p, j = states.shape[:2]
        pi, ji = np.nonzero(rng.random((p, j), dtype=np.float32) < 0.1)
        states[pi, ji] = self.base[ji]
        pi, ji = np.nonzero(rng.random((p, j), dtype=np.float32) < 0.1)
        if len(pi):
            rows = states[pi, ji]
            states[pi, ji] = np.where(rng.random(rows.shape, dtype=np.float32) < 0.1, 0, rows)
        free = self.node_caps - states.sum(axis=1, dtype=np.int32)  # (P, N)
        pf, nf = np.nonzero(free >= 1)
        if not len(pf):
            return states
        col = states[pf, :, nf]  # (K, J): the jobs on each free node
        allowed = self._allowed_t[nf]
        on = (col > 0) & allowed
        p1 = allowed / np.maximum(allowed.sum(axis=1, keepdims=True), 1).astype(np.float32)
        p2 = on / np.maximum(on.sum(axis=1, keepdims=True), 1).astype(np.float32)
        kk, jj = np.nonzero(rng.random(col.shape, dtype=np.float32) < p1 + p2 - p1 * p2)
        if len(kk):
            c = self.cap[jj, nf[kk]]
            low = np.minimum(col[kk, jj], c)
            col[kk, jj] = low + (rng.random(len(kk)) * (c - low + 1)).astype(states.dtype)
            states[pf, :, nf] = col
        return states

    def repair(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Make states feasible. Column fixes touch only the (state, node) pairs that break a rule."""
        states = np.minimum(states, self.cap)
        # interference avoidance: at most one distributed job per node (the first in job order)
        distributed = np.count_nonzero(states, axis=2) > 1
        on = (states > 0) & distributed[:, :, None]
        pi, ni = np.nonzero(on.sum(axis=1) > 1)
        if len(pi):
            cols = states[pi, :, ni]
            states[pi, :, ni] = np.where(np.cumsum(on[pi, :, ni], axis=1) > 1, 0, cols)
        # per-job replica cap and node-count limit, over a random node order
        bad = ((states.sum(axis=2, dtype=np.int32) > self.max_replicas)
               | (np.count_nonzero(states, axis=2) > self.max_nodes))
        if bad.any():
            pi, ji = np.nonzero(bad)
            rows = states[pi, ji]  # (K, N)
            shuffle = np.argsort(rng.random(rows.shape), axis=1)
            rows = np.take_along_axis(rows, shuffle, axis=1)
            rows = np.diff(np.minimum(np.cumsum(rows, axis=1, dtype=np.int32), self.max_replicas[ji, None]), axis=1,
                           prepend=0)
            keep = np.diff(np.minimum(np.cumsum(rows > 0, axis=1), self.max_nodes), axis=1, prepend=0) > 0
            rows = np.where(keep, rows, 0)
            out = np.empty_like(rows)
            np.put_along_axis(out, shuffle, rows, axis=1)
            states[pi, ji] = out
        # node capacity, earlier jobs first
        pi, ni = np.nonzero(states.sum(axis=1, dtype=np.int32) > self.node_caps)
        if len(pi):
            cols = np.cumsum(states[pi, :, ni], axis=1, dtype=np.int32)
            states[pi, :, ni] = np.diff(np.minimum(cols, self.node_caps[ni, None]), axis=1, prepend=0)
        short = states.sum(axis=2, dtype=np.int32) < self.min_replicas
        if short.any():
            states[short] = 0
        return states.astype(np.int8, copy=False)


def nondominated_rank(f: np.ndarray) -> np.ndarray:
    """Pareto rank (0 = non-dominated) of points with two minimised objectives; equal points share a rank."""
    order = np.lexsort((f[:, 1], f[:, 0]))
    rank = np.empty(len(f), dtype=np.intp)
    tails: list[float] = []  # smallest f2 in each front so far (non-decreasing over fronts)
    tail_pt: list[tuple[float, float]] = []
    for i, a, b in zip(order.tolist(), f[order, 0].tolist(), f[order, 1].tolist(), strict=True):
        k = bisect_right(tails, b)
        if k and tail_pt[k - 1] == (a, b):  # a duplicate joins the front of its twin
            k -= 1
        if k == len(tails):
            tails.append(b)
            tail_pt.append((a, b))
        else:
            tails[k] = b
            tail_pt[k] = (a, b)
        rank[i] = k
    return rank


def crowding(f: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance within each front (boundary points and fronts of ≤ 2: infinite)."""
    order = np.lexsort((-f[:, 1], f[:, 0], rank))
    r, a, b = rank[order], f[order, 0], f[order, 1]
    n = len(f)
    first = np.ones(n, dtype=bool)
    first[1:] = r[1:] != r[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = r[1:] != r[:-1]
    starts = np.flatnonzero(first)
    ends = np.flatnonzero(last)
    size = np.repeat(ends - starts + 1, ends - starts + 1)
    span_a = np.repeat(a[ends] - a[starts], ends - starts + 1)
    span_b = np.repeat(np.abs(b[starts] - b[ends]), ends - starts + 1)
    prev_a, next_a = np.roll(a, 1), np.roll(a, -1)
    prev_b, next_b = np.roll(b, 1), np.roll(b, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (np.where(span_a > 0, (next_a - prev_a) / span_a, 0.0)
             + np.where(span_b > 0, np.abs(prev_b - next_b) / span_b, 0.0)) / 2
    d = np.where(first | last | (size <= 2), np.inf, d)
    out = np.empty(n)
    out[order] = d
    return out


def _unique_new(x: np.ndarray, seen: set[bytes]) -> np.ndarray:
    keep = []
    for i, row in enumerate(x.reshape(len(x), -1)):
        key = row.tobytes()
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return x[keep]


def search(problem: AllocationProblem, init: np.ndarray, rng: np.random.Generator, pop_size: int = 100,
           n_gen: int = 100, max_mating_rounds: int = 10, patience: int | None = None,
           ) -> tuple[np.ndarray, np.ndarray]:
    """Run NSGA-II; return (non-dominated states (K, J, N), their objectives (K, 2)).

    `patience`: stop early once the best first objective has not improved for that many generations
    (None: always `n_gen` generations, as the artifact).
    """
    seen: set[bytes] = set()
    pop = _unique_new(problem.repair(np.minimum(init, 127).astype(np.int8), rng), seen)
    f = problem.evaluate(pop)
    rank = nondominated_rank(f)
    crowd = crowding(f, rank)
    n_match = (pop_size + 1) // 2
    best, stale = float(f[:, 0].min()), 0
    for _ in range(n_gen - 1):
        if patience is not None and stale >= patience:
            break
        kids: list[np.ndarray] = []
        n_kids = 0
        for _ in range(max_mating_rounds):
            picks = np.concatenate([rng.permutation(len(pop)) for _ in range(-(-4 * n_match // len(pop)))])
            picks = picks[: 4 * n_match].reshape(2 * n_match, 2)
            a, b = picks[:, 0], picks[:, 1]
            better = np.where(rank[a] != rank[b], rank[a] < rank[b],
                              np.where(crowd[a] != crowd[b], crowd[a] > crowd[b], rng.random(len(a)) < 0.5))
            parents = np.where(better, a, b).reshape(n_match, 2)
            off = problem.crossover(pop[parents[:, 0]], pop[parents[:, 1]], rng)
            off = _unique_new(problem.repair(problem.mutate(off, rng), rng), seen)
            kids.append(off)
            n_kids += len(off)
            if n_kids >= pop_size:
                break
        off = np.concatenate(kids)[:pop_size]
        if len(off):
            pop = np.concatenate([pop, off])
            f = np.concatenate([f, problem.evaluate(off)])
            rank = nondominated_rank(f)
            crowd = crowding(f, rank)
            if len(pop) > pop_size:
                keep = np.lexsort((rng.random(len(pop)), -crowd, rank))[:pop_size]
                pop, f, rank, crowd = pop[keep], f[keep], rank[keep], crowd[keep]
                seen = {row.tobytes() for row in pop.reshape(len(pop), -1)}
        now = float(f[:, 0].min())
        best, stale = min(best, now), (0 if now < best - 1e-12 else stale + 1)
    front = rank == 0
    return pop[front], f[front]
