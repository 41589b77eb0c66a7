"""NSGA-II over Pollux's allocation problem (`policies/pollux/ga.py`), as the artifact runs it with pymoo.

- Selection: binary tournament on (rank, crowding distance), survival by rank then crowding distance, as
  NSGA-II; offspring duplicating a member or each other are dropped and mating repeats (pymoo's
  duplicate elimination; we stop after `max_mating_rounds` instead of pymoo's 100). Duplicates are found by
  a 64-bit fingerprint of each state (`population.hashes`).
- The chosen state is the non-dominated one with the best first objective (the artifact's `argmin`).
Readings of the artifact: the initial population is the previous round's non-dominated set mapped onto
the current jobs and nodes (or the current allocation alone), repaired; `n_gen` counts the initial
population as generation 1, as pymoo does; ties in the tournament are broken at random.
Ours: `patience` stops a round once its best first objective has not improved for that many generations,
and `budget_s` bounds a round's CPU time (`time.thread_time`): a generation that would not fit breeds only the
children that do (a child is expected to cost what one cost so far; every round breeds at least `MIN_BROOD`,
so a budget never freezes the search: new jobs get GPUs only through it), the search stops when not even two
fit, the best state found so far is returned, and the population carries over to the next round.
"""

from __future__ import annotations

import time
from bisect import bisect_right

import numpy as np

from elastisched.policies.pollux.ga import AllocationProblem
from elastisched.policies.pollux.population import Population, concat, hashes, take

MIN_BROOD = 10  # children a round breeds whatever its budget (new jobs get GPUs only through the search)


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


def _new_states(problem: AllocationProblem, pop: Population, seen: set[int]) -> Population:
    """The states of `pop` not in `seen` (nor repeated within `pop`); they join `seen`."""
    keep = []
    for i, h in enumerate(hashes(pop, problem.num_nodes).tolist()):
        if h not in seen:
            seen.add(h)
            keep.append(i)
    return pop if len(keep) == len(pop) else take(pop, np.array(keep, dtype=np.intp))


def _offspring(problem: AllocationProblem, pop: Population, rank: np.ndarray, crowd: np.ndarray,
               rng: np.random.Generator, pop_size: int, seen: set[int], max_mating_rounds: int) -> Population:
    """Up to `pop_size` new, repaired children of tournament-selected parents."""
    n_match = (pop_size + 1) // 2
    kids: list[Population] = []
    n_kids = 0
    for _ in range(max_mating_rounds):
        picks = np.concatenate([rng.permutation(len(pop)) for _ in range(-(-4 * n_match // len(pop)))])
        picks = picks[: 4 * n_match].reshape(2 * n_match, 2)
        a, b = picks[:, 0], picks[:, 1]
        better = np.where(rank[a] != rank[b], rank[a] < rank[b],
                          np.where(crowd[a] != crowd[b], crowd[a] > crowd[b], rng.random(len(a)) < 0.5))
        parents = np.where(better, a, b).reshape(n_match, 2)
        off = problem.crossover(pop, parents[:, 0], parents[:, 1], rng)
        off = _new_states(problem, problem.repair(problem.mutate(off, rng), rng), seen)
        kids.append(off)
        n_kids += len(off)
        if n_kids >= pop_size:
            break
    out = kids[0]
    for k in kids[1:]:
        out = concat(out, k)
    return take(out, np.arange(min(len(out), pop_size))) if len(out) > pop_size else out


def search(problem: AllocationProblem, init: Population, rng: np.random.Generator, pop_size: int = 100,
           n_gen: int = 100, max_mating_rounds: int = 10, patience: int | None = None,
           budget_s: float | None = None, stats: dict[str, float | str] | None = None
           ) -> tuple[Population, np.ndarray]:
    """Run NSGA-II; return (non-dominated states, their objectives (K, 2)).

    `patience`: stop early once the best first objective has not improved for that many generations
    (None: always `n_gen` generations, as the artifact). `budget_s`: CPU seconds this call may take (None: no
    limit); a generation that would not fit breeds only the children that do (by the CPU a child cost so far,
    `stats["per_kid"]` carried from the last call), and the search stops when not even two fit. The best state
    found so far is among the returned ones. `stats`, when given, also receives the generations run and why
    the search stopped ("patience", "generations", "budget").
    """
    t0 = time.thread_time()
    stats = {} if stats is None else stats
    seen: set[int] = set()
    pop = _new_states(problem, problem.repair(init, rng), seen)
    f = problem.evaluate(pop)
    rank = nondominated_rank(f)
    crowd = crowding(f, rank)
    best, stale = float(f[:, 0].min()), 0
    gens, stopped = 1, "generations"
    for _ in range(n_gen - 1):
        brood = _brood(pop_size, budget_s, time.thread_time() - t0, float(stats.get("per_kid", 0.0)))
        if gens == 1:  # every round breeds at least a tenth of a generation: a budget never freezes the search
            brood = max(brood, min(pop_size, MIN_BROOD))
        if patience is not None and stale >= patience:
            stopped = "patience"
            break
        if brood < 2:
            stopped = "budget"
            break
        t_gen = time.thread_time()
        gens += 1
        off = _offspring(problem, pop, rank, crowd, rng, brood, seen, max_mating_rounds)
        if len(off):
            pop = concat(pop, off)
            f = np.concatenate([f, problem.evaluate(off)])
            rank = nondominated_rank(f)
            crowd = crowding(f, rank)
            if len(pop) > pop_size:
                keep = np.lexsort((rng.random(len(pop)), -crowd, rank))[:pop_size]
                pop, f, rank, crowd = take(pop, keep), f[keep], rank[keep], crowd[keep]
                seen = set(hashes(pop, problem.num_nodes).tolist())
        now = float(f[:, 0].min())
        best, stale = min(best, now), (0 if now < best - 1e-12 else stale + 1)
        stats["per_kid"] = (time.thread_time() - t_gen) / max(brood, 1)
    stats.update(generations=gens, stopped=stopped)
    front = np.flatnonzero(rank == 0)
    return take(pop, front), f[front]


def _brood(pop_size: int, budget_s: float | None, used: float, per_kid: float) -> int:
    """Children the next generation may breed: all of them without a budget, else those that fit in it."""
    if budget_s is None:
        return pop_size
    left = budget_s - used
    if left <= 0:
        return 0
    return pop_size if per_kid <= 0 else min(pop_size, int(left / per_kid))
