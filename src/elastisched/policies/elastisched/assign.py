"""GPU count and GPU type for every job at once: one assignment problem across types.

Each job j has, per GPU type t it may use, a value `V[t][j, k]` for holding k GPUs of t (k = 0..K; −inf where
not allowed) and the value of holding none is 0 (−inf when the job must keep running). Maximise Σ_j V_j
subject to each type's capacity, one type per job: a multiple-choice knapsack with one capacity per type.

- **One type** (`greedy`): the hull greedy of the multiple-choice knapsack (Lyra's phase 2, lyra.md §2.2):
  repeatedly give the job whose next step (to any larger count) adds most value per GPU that step; for concave
  value curves this is optimal, and it is the step the exact DP refines on small instances.
- **Several types** (`lp_rounded`): the linear relaxation (HiGHS) over every allowed (type, count), rounded
  down and completed by a greedy over every job and type at once; its prices are what make a job take the type
  it gains most on relative to the others (Sia's insight: goodput per type decides the type, not who came
  first). A round with more than `LP_COLUMNS` options solves it on counts thinned to steps of about ×1.25
  (each job's current count kept) and lets the greedy refill between them.
  `tests/policies/test_elastisched_assign.py` measures both against the exact MILP.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NEG = -math.inf
LP_COLUMNS = 20_000  # up to this many (job, type, count) options the LP is solved whole (tens of ms), else thinned


@dataclass(frozen=True, slots=True)
class Problem:
    """`values[t]`: [jobs, K_t + 1] value of k GPUs of type t (column 0 = holding none: 0, or −inf if the job
    must run); `capacity[t]`: GPUs of type t. A row that is −inf past column 0 cannot use that type."""

    types: tuple[str, ...]
    values: tuple[np.ndarray, ...]
    capacity: tuple[int, ...]
    current: tuple[np.ndarray, np.ndarray] | None = None  # (type index or −1, GPUs) each job holds now

    @property
    def jobs(self) -> int:
        return self.values[0].shape[0] if self.values else 0


@dataclass(frozen=True, slots=True)
class Assignment:
    gpu_type: np.ndarray  # [jobs] index into Problem.types, −1 = no GPUs
    gpus: np.ndarray  # [jobs]

    def value(self, p: Problem) -> float:
        total = 0.0
        for j, (t, k) in enumerate(zip(self.gpu_type.tolist(), self.gpus.tolist(), strict=True)):
            total += float(p.values[t][j, k]) if t >= 0 else float(p.values[0][j, 0])
        return total


def solve(p: Problem) -> Assignment:
    """The assignment: the greedy on one type, prices then the greedy on several."""
    n = p.jobs
    if len(p.types) == 1:
        k = greedy(p.values[0], p.capacity[0], np.zeros(n, dtype=np.int64))
        return Assignment(np.where(k > 0, 0, -1), k)
    if sum(int(np.isfinite(v[:, 1:]).sum()) for v in p.values) <= LP_COLUMNS:
        return lp_rounded(p)
    coarse = lp_rounded(_coarse(p))
    return global_greedy(p, coarse.gpu_type.copy(), coarse.gpus.copy())


def _coarse(p: Problem) -> Problem:
    """`p` with counts thinned to 1..8 then steps of about ×1.25 (and each job's current count kept), for the
    LP of a large round: a few times fewer columns, and the greedy refills between the steps afterwards."""
    width = max(v.shape[1] for v in p.values)
    grid = np.zeros(width, dtype=bool)
    grid[: min(width, 9)] = True
    k = 8.0
    while k < width:
        grid[int(k)] = True
        k *= 1.25
    grid[width - 1] = True
    values = []
    for t, v in enumerate(p.values):
        keep = np.broadcast_to(grid[: v.shape[1]], v.shape).copy()
        if p.current is not None:
            on = np.flatnonzero((p.current[0] == t) & (p.current[1] < v.shape[1]))
            keep[on, p.current[1][on]] = True
        values.append(np.where(keep, v, NEG))
    return Problem(p.types, tuple(values), p.capacity, p.current)


def _next_step(row: np.ndarray, k: int, room: int) -> tuple[float, int]:
    """The best value per GPU of moving from k to some k' in (k, k + room]: (ratio, k'); (−inf, k) if none."""
    hi = min(len(row) - 1, k + room)
    if hi <= k:
        return NEG, k
    if row[k] == NEG:  # a count it may not hold (a job that must run, at 0): its smallest allowed one first
        allowed = np.flatnonzero(np.isfinite(row[k + 1: hi + 1]))
        return (math.inf, k + 1 + int(allowed[0])) if len(allowed) else (NEG, k)
    with np.errstate(invalid="ignore"):
        gain = row[k + 1: hi + 1] - row[k]
        ratio = gain / np.arange(1, hi - k + 1)
    if not np.isfinite(ratio).any():
        return NEG, k
    i = int(np.nanargmax(np.where(np.isfinite(ratio), ratio, NEG)))
    return float(ratio[i]), k + 1 + i


def greedy(values: np.ndarray, capacity: int, start: np.ndarray, jobs: Sequence[int] | None = None) -> np.ndarray:
    """Hull greedy on one type: from `start` GPUs per job (forced: a job whose column 0 is −inf starts at its
    smallest allowed count), hand out the rest of `capacity` by best value per GPU. Returns GPUs per job."""
    k = start.copy()
    idx = range(values.shape[0]) if jobs is None else jobs
    for j in idx:
        if k[j] == 0 and values[j, 0] == NEG:
            allowed = np.flatnonzero(np.isfinite(values[j]))
            if len(allowed):
                k[j] = int(allowed[0])
    left = capacity - int(k.sum())
    heap: list[tuple[float, int, int]] = []
    for j in idx:
        r, to = _next_step(values[j], int(k[j]), max(left, 0))
        if r > 0:
            heap.append((-r, j, to))
    heapq.heapify(heap)
    while heap and left > 0:
        _, j, to = heapq.heappop(heap)
        step = to - int(k[j])
        if step > left:  # too big now: the best step that still fits
            r, to = _next_step(values[j], int(k[j]), left)
            if r > 0:
                heapq.heappush(heap, (-r, j, to))
            continue
        k[j] = to
        left -= step
        r, to = _next_step(values[j], to, left)
        if r > 0:
            heapq.heappush(heap, (-r, j, to))
    return k


def _trim(p: Problem, choice: np.ndarray, gpus: np.ndarray) -> None:
    """Should a rounding leave a type over its capacity, take back its least valuable GPUs until it fits (in place),
    never below a count a job may hold (a job that must run keeps its smallest allowed count)."""
    for t, v in enumerate(p.values):
        on = np.flatnonzero(choice == t)
        while int(gpus[on].sum()) > p.capacity[t]:
            able = [x for x in on if gpus[x] > 0 and np.isfinite(v[x, gpus[x] - 1])]
            if not able:
                break
            j = min(able, key=lambda x: v[x, gpus[x]] - v[x, gpus[x] - 1])
            gpus[j] -= 1
            if gpus[j] == 0:
                choice[j] = -1


def _step(p: Problem, j: int, t: int, k: int, room: list[int]) -> tuple[float, int, int]:
    """A job's best next step: on its type t (k GPUs now), or — holding none — a start on any type with room."""
    if t >= 0:
        r, to = _next_step(p.values[t][j], k, room[t])
        return r, t, to
    best = (NEG, -1, 0)
    for u, v in enumerate(p.values):
        r, to = _next_step(v[j], 0, room[u])
        if r > best[0]:
            best = (r, u, to)
    return best


def global_greedy(p: Problem, choice: np.ndarray, gpus: np.ndarray) -> Assignment:
    """From a feasible start, hand out the GPUs left by best value per GPU over every job and type at once (a job
    holding none may start on any type with room); a stale step (its type filled up) is recomputed."""
    choice, gpus = choice.copy(), gpus.copy()
    room = [c - int(gpus[choice == t].sum()) for t, c in enumerate(p.capacity)]
    heap: list[tuple[float, int, int, int]] = []
    for j in range(p.jobs):
        r, t, to = _step(p, j, int(choice[j]), int(gpus[j]), room)
        if r > 0:
            heap.append((-r, j, t, to))
    heapq.heapify(heap)
    while heap:
        _, j, t, to = heapq.heappop(heap)
        cur_t, cur_k = int(choice[j]), int(gpus[j])
        need = to - (cur_k if cur_t == t else 0)
        if (cur_t >= 0 and cur_t != t) or need > room[t]:  # stale: recompute this job's step
            r, t2, to2 = _step(p, j, cur_t, cur_k, room)
            if r > 0:
                heapq.heappush(heap, (-r, j, t2, to2))
            continue
        choice[j], gpus[j] = t, to
        room[t] -= need
        r, t2, to2 = _step(p, j, t, to, room)
        if r > 0:
            heapq.heappush(heap, (-r, j, t2, to2))
    return Assignment(np.where(gpus > 0, choice, -1), gpus)


def _forced_start(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Jobs that must run, each on the type where its smallest allowed count is worth most (others: none)."""
    choice = np.full(p.jobs, -1, dtype=np.int64)
    gpus = np.zeros(p.jobs, dtype=np.int64)
    for j in range(p.jobs):
        if p.values[0][j, 0] != NEG:
            continue
        best = NEG
        for t, v in enumerate(p.values):
            allowed = np.flatnonzero(np.isfinite(v[j, 1:]))
            if len(allowed) and v[j, allowed[0] + 1] > best:
                best, choice[j], gpus[j] = v[j, allowed[0] + 1], t, allowed[0] + 1
    return choice, gpus


def _options(p: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every allowed (job, type, count ≥ 1) and its value, as flat arrays."""
    parts = []
    for t, v in enumerate(p.values):
        j, k = np.nonzero(np.isfinite(v[:, 1:]))
        parts.append((j, np.full(len(j), t), k + 1, v[j, k + 1]))
    return tuple(np.concatenate([x[i] for x in parts]) for i in range(4))  # type: ignore[return-value]


def lp_rounded(p: Problem) -> Assignment:
    """The linear relaxation (HiGHS) over every allowed (type, count), rounded down: each job takes, of the
    options its LP solution uses on its heaviest type, the one with fewest GPUs (none if it is less than half
    allocated and may wait); `global_greedy` then hands out what is left. A basic solution has at most one
    fractional job per type, so the rounding loses little (tests/policies/test_elastisched_assign.py)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    jj, tt, kk, vv = _options(p)
    n = len(jj)
    if n == 0:
        return Assignment(np.full(p.jobs, -1), np.zeros(p.jobs, dtype=np.int64))
    idx = np.arange(n)
    must = ~np.isfinite(p.values[0][:, 0])
    row = np.where(must, -1, np.cumsum(~must) - 1)  # a job's "≤ 1" row, or −1 when it must run ("= 1")
    free = row[jj] >= 0
    a_ub = coo_matrix((np.concatenate([np.ones(int(free.sum())), kk.astype(float)]),
                       (np.concatenate([row[jj][free], int((~must).sum()) + tt]), np.concatenate([idx[free], idx]))),
                      shape=(int((~must).sum()) + len(p.types), n)).tocsr()
    b_ub = np.concatenate([np.ones(int((~must).sum())), np.asarray(p.capacity, dtype=float)])
    eq_row = np.cumsum(must) - 1
    a_eq = coo_matrix((np.ones(int((~free).sum())), (eq_row[jj][~free], idx[~free])), shape=(int(must.sum()), n))
    res = linprog(-vv, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq.tocsr() if must.any() else None,
                  b_eq=np.ones(int(must.sum())) if must.any() else None, bounds=(0, 1),
                  method="highs-ipm" if n > LP_COLUMNS else "highs")
    if res.status != 0 or res.x is None:
        return global_greedy(p, *_forced_start(p))
    weight = np.zeros((p.jobs, len(p.types)))
    np.add.at(weight, (jj, tt), res.x)
    heavy = weight.argmax(axis=1)
    choice = np.full(p.jobs, -1, dtype=np.int64)
    gpus = np.zeros(p.jobs, dtype=np.int64)
    for i in np.flatnonzero(res.x > 1e-9):
        j = jj[i]
        if tt[i] == heavy[j] and (choice[j] < 0 or kk[i] < gpus[j]):
            choice[j], gpus[j] = tt[i], kk[i]
    drop = (weight.sum(axis=1) < 0.5) & ~must
    choice[drop], gpus[drop] = -1, 0
    _trim(p, choice, gpus)
    return global_greedy(p, choice, gpus)
