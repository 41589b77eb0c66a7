"""Multiple-choice knapsack (MCKP) for Lyra's phase 2 (lyra.md §2.2, §7 row 8).

Each group (one elastic job) offers items "k extra GPUs" with integer weight `w[k]` and value `v[k]` (the JCT
reduction); exactly one item is chosen per group; the total weight must stay within `capacity`. Every group
must contain a weight-0 item first (k = 0), so the empty choice is always feasible. Values may be negative
(a rescale penalty can make k = 0 cost something for a running job that holds extras).

Solvers:
- `solve_reference`: textbook DP in pure Python (tests only; O(items × capacity)).
- `solve_dp`: the same exact DP vectorized with numpy over capacity and over a group's items (one
  (items × capacity) max per group), an int32 choice table for the backtrack. Exact; O(items × capacity), the
  capacity counted only up to the heaviest possible choice (a mostly idle cluster offers far more).
- `solve_greedy`: the LP-relaxation greedy (Sinha–Zoltners): per group the upper convex hull of its
  undominated items; all hull increments sorted by value/weight (numpy argsort), taken while they fit (a
  group whose next increment does not fit is closed); then the single item change with the largest gain
  that fits is applied, repeatedly. A second candidate applies that same single-change fill from the empty
  choice (largest gain first: the classic greedy-or-best-single-item fix, for groups whose value comes only
  at a large weight, which the hull order closes when it no longer fits). Given `start` (the policy passes
  each running job's current item), the start choice — first made to fit, if capacity shrank, by the lighter
  item change that frees enough at the least value lost — improved the same way is a third; the best of them is
  improved by pair exchanges (`_pairs`: the best move of weight from one group to another) and returned.
- `upper_bound`: the LP bound (hull increments taken fractionally), so `solve_greedy(...).value /
  upper_bound(...)` bounds the greedy's gap without solving exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NEG = -np.inf


@dataclass(frozen=True, slots=True)
class Solution:
    choice: tuple[int, ...]  # chosen item index per group
    value: float
    weight: int


def _check(weights: Sequence[np.ndarray], values: Sequence[np.ndarray]) -> None:
    if len(weights) != len(values):
        raise ValueError("weights and values need one entry per group")
    for g, (w, v) in enumerate(zip(weights, values, strict=True)):
        if len(w) == 0 or len(w) != len(v) or w[0] != 0 or np.any(np.asarray(w) < 0):
            raise ValueError(f"group {g}: needs equally long weights/values, weights >= 0, first weight 0")


def _total(weights: Sequence[np.ndarray], values: Sequence[np.ndarray], choice: Sequence[int]) -> Solution:
    val = float(sum(float(values[g][i]) for g, i in enumerate(choice)))
    wt = int(sum(int(weights[g][i]) for g, i in enumerate(choice)))
    return Solution(tuple(int(i) for i in choice), val, wt)


def solve_reference(weights: Sequence[np.ndarray], values: Sequence[np.ndarray], capacity: int) -> Solution:
    """Exact DP in plain Python (for tests and tiny instances)."""
    _check(weights, values)
    cap = max(0, int(capacity))
    dp = [0.0] * (cap + 1)  # best value of the groups so far with total weight <= c
    table: list[list[int]] = []
    for w, v in zip(weights, values, strict=True):
        new = [NEG] * (cap + 1)
        pick = [0] * (cap + 1)
        for i, (wi, vi) in enumerate(zip(w, v, strict=True)):
            wi = int(wi)
            for c in range(wi, cap + 1):
                if dp[c - wi] + vi > new[c]:
                    new[c], pick[c] = dp[c - wi] + float(vi), i
        dp = new
        table.append(pick)
    choice = [0] * len(weights)
    c = cap
    for g in range(len(weights) - 1, -1, -1):
        choice[g] = table[g][c]
        c -= int(weights[g][choice[g]])
    return _total(weights, values, choice)


def solve_dp(weights: Sequence[np.ndarray], values: Sequence[np.ndarray], capacity: int) -> Solution:
    """Exact DP vectorized over capacity and over the items of a group (module docstring)."""
    _check(weights, values)
    # Capacities past the heaviest possible choice all decide alike (every group's table is constant from its
    # prefix's heaviest total on), so the table stops there and the backtrack starts there: the same choice.
    cap = min(max(0, int(capacity)), sum(int(np.max(w)) for w in weights))
    dp = np.zeros(cap + 1)
    cs = np.arange(cap + 1)
    table = np.zeros((len(weights), cap + 1), dtype=np.int32)
    for g, (w, v) in enumerate(zip(weights, values, strict=True)):
        w = np.asarray(w, dtype=np.int64)
        src = cs[None, :] - w[:, None]
        cand = np.where(src >= 0, dp[src.clip(min=0)] + np.asarray(v, dtype=float)[:, None], NEG)
        table[g] = np.argmax(cand, axis=0)  # first maximum = the lightest best item
        dp = cand[table[g], cs]
    choice = [0] * len(weights)
    c = cap
    for g in range(len(weights) - 1, -1, -1):
        choice[g] = int(table[g, c])
        c -= int(weights[g][choice[g]])
    return _total(weights, values, choice)


def _hull(w: np.ndarray, v: np.ndarray) -> list[int]:
    """Indices of the upper convex hull of the undominated items, from the best weight-0 item upwards."""
    wl, vl = w.tolist(), v.tolist()
    start = max((i for i in range(len(wl)) if wl[i] == 0), key=lambda i: (vl[i], -i))
    pts = [start]
    for i in sorted(range(len(wl)), key=lambda i: (wl[i], -vl[i])):  # weight ascending, value descending
        if wl[i] > wl[pts[-1]] and vl[i] > vl[pts[-1]]:
            pts.append(i)
    hull: list[int] = []
    for p in pts:
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b when it lies on or below the segment a -> p
            if (vl[b] - vl[a]) * (wl[p] - wl[a]) <= (vl[p] - vl[a]) * (wl[b] - wl[a]):
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def _padded(weights: Sequence[np.ndarray], values: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(groups × max items) matrices; missing items get a huge weight and value −inf."""
    k = max(len(w) for w in weights)
    wm = np.full((len(weights), k), np.iinfo(np.int64).max // 4, dtype=np.int64)
    vm = np.full((len(weights), k), NEG)
    for g, (w, v) in enumerate(zip(weights, values, strict=True)):
        wm[g, : len(w)] = w
        vm[g, : len(v)] = v
    return wm, vm


def _increments(weights: Sequence[np.ndarray], values: Sequence[np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """Hull increments of every group: (group, to item, Δw, Δv, rank in group) and each group's start item.

    Groups whose items are already a concave chain (weights increasing, marginal value per weight positive
    and non-increasing — the usual diminishing-returns shape) are handled in one vectorized pass; only the
    others go through `_hull` in Python.
    """
    ng = len(weights)
    if ng == 0:
        e = np.zeros(0)
        return e.astype(np.int64), e.astype(np.int64), e, e, e.astype(np.int64), []
    wm, vm = _padded(weights, values)
    lens = np.array([len(w) for w in weights])
    with np.errstate(invalid="ignore"):
        dw = np.diff(wm, axis=1).astype(float)
        dv = np.diff(vm, axis=1)
    valid = np.arange(wm.shape[1] - 1)[None, :] < (lens - 1)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        eff = np.where(valid & (dw > 0), dv / np.where(dw > 0, dw, 1.0), np.nan)
    ok_step = ~valid | ((dw > 0) & (dv > 0))
    ok_conc = ~(valid[:, 1:] & valid[:, :-1]) | (eff[:, 1:] <= eff[:, :-1] + 1e-12)
    chain = ok_step.all(axis=1) & ok_conc.all(axis=1)
    gi, ki = np.nonzero(valid & chain[:, None])
    gs, to, ddw, ddv, rank = [gi], [ki + 1], [dw[gi, ki]], [dv[gi, ki]], [ki]
    starts = [0] * ng
    for g in np.flatnonzero(~chain).tolist():
        w = np.asarray(weights[g])
        v = np.asarray(values[g], dtype=float)
        h = _hull(w, v)
        starts[g] = h[0]
        n = len(h) - 1
        if n:
            a, b2 = np.array(h[:-1]), np.array(h[1:])
            gs.append(np.full(n, g))
            to.append(b2)
            ddw.append((w[b2] - w[a]).astype(float))
            ddv.append(v[b2] - v[a])
            rank.append(np.arange(n))
    return (np.concatenate(gs).astype(np.int64), np.concatenate(to).astype(np.int64), np.concatenate(ddw),
            np.concatenate(ddv), np.concatenate(rank).astype(np.int64), starts)


def upper_bound(weights: Sequence[np.ndarray], values: Sequence[np.ndarray], capacity: int) -> float:
    """LP-relaxation bound: Σ v[0] + hull increments by efficiency, the last one fractionally."""
    _check(weights, values)
    _, _, dw, dv, rank, starts = _increments(weights, values)
    base = float(sum(float(v[i]) for v, i in zip(values, starts, strict=True)))
    if len(dw) == 0:
        return base
    order = np.lexsort((rank, -(dv / dw)))
    cum = np.cumsum(dw[order])
    k = int(np.searchsorted(cum, capacity, side="right"))
    total = base + float(dv[order][:k].sum())
    if k < len(order):
        room = capacity - (cum[k - 1] if k else 0.0)
        total += float(dv[order][k] * room / dw[order][k])
    return total


def solve_greedy(weights: Sequence[np.ndarray], values: Sequence[np.ndarray], capacity: int,
                 fill_rounds: int = 16, start: Sequence[int] | None = None) -> Solution:
    """Hull greedy plus single-item fill; with `start` (e.g. each job's current item) also the start choice
    plus the same fill, if it fits; the better of the two, improved by pair exchanges (module docstring)."""
    _check(weights, values)
    if not weights:
        return Solution((), 0.0, 0)
    cap = max(0, int(capacity))
    wm, vm = _padded(weights, values)
    rows = np.arange(len(weights))
    best = _fill(wm, vm, cap, *_hull_greedy(weights, values, cap), fill_rounds)
    # largest single gains first, from the empty choice: catches a group whose value comes only at a large
    # weight (a non-concave curve, e.g. a whole extra server) that the hull order closes early
    alt = _fill(wm, vm, cap, np.zeros(len(weights), dtype=np.int64), 0, fill_rounds)
    if vm[rows, alt].sum() > vm[rows, best].sum():
        best = alt
    if start is not None:
        ch = _repair(wm, vm, cap, np.asarray(start, dtype=np.int64).copy())
        ch = _fill(wm, vm, cap, ch, int(wm[rows, ch].sum()), fill_rounds)
        if vm[rows, ch].sum() > vm[rows, best].sum():
            best = ch
    return _total(weights, values, _pairs(wm, vm, cap, best).tolist())


def _repair(wm: np.ndarray, vm: np.ndarray, cap: int, choice: np.ndarray) -> np.ndarray:
    """Make an over-capacity choice fit: the lighter item change that frees enough at the least value lost,
    else (none frees enough) the one losing least per unit freed, repeatedly (item 0 weighs 0: this ends)."""
    rows = np.arange(len(wm))
    k = wm.shape[1]
    used = int(wm[rows, choice].sum())
    while used > cap:
        freed = wm[rows, choice][:, None] - wm
        ok = (freed > 0) & np.isfinite(vm)
        lost = vm[rows, choice][:, None] - vm
        enough = ok & (freed >= used - cap)
        score = np.where(enough, lost, np.inf) if enough.any() else np.where(ok, lost / np.maximum(freed, 1), np.inf)
        g, i = divmod(int(np.argmin(score)), k)
        if not np.isfinite(score[g, i]):
            break
        used -= int(freed[g, i])
        choice[g] = i
    return choice


def _fill(wm: np.ndarray, vm: np.ndarray, cap: int, choice: np.ndarray, used: int, rounds: int) -> np.ndarray:
    """Repeatedly apply the single item change (up or down) with the largest gain that fits."""
    rows = np.arange(len(wm))
    k = wm.shape[1]
    for _ in range(rounds):
        room = cap - used
        gain = np.where(wm - wm[rows, choice][:, None] <= room, vm - vm[rows, choice][:, None], NEG)
        g, i = divmod(int(np.argmax(gain)), k)
        if not gain[g, i] > 1e-12:
            break
        used += int(wm[g, i] - wm[g, choice[g]])
        choice[g] = i
    return choice


def _pairs(wm: np.ndarray, vm: np.ndarray, cap: int, choice: np.ndarray, rounds: int = 8) -> np.ndarray:
    """Improve by the best exchange of two groups' items (one gives weight up, the other takes it), repeatedly.

    `gain[g, d]` = the best value change of group g for a weight change d (one scatter-max over all items);
    the best pair (g ≠ h, d₁ + d₂ ≤ room) is found from the top two groups of every d.
    """
    if len(wm) < 2:
        return choice
    ok = np.isfinite(vm)
    rows = np.arange(len(wm))
    for _ in range(rounds):
        room = cap - int(wm[rows, choice].sum())
        dw = np.where(ok, wm - wm[rows, choice][:, None], 0)
        dv = np.where(ok, vm - vm[rows, choice][:, None], NEG)
        lo, hi = int(dw.min()), int(dw.max())
        gain = np.full((len(wm), hi - lo + 1), NEG)
        np.maximum.at(gain, (np.repeat(rows, wm.shape[1]), (dw - lo).ravel()), dv.ravel())
        cols = np.arange(gain.shape[1])
        g1 = np.argmax(gain, axis=0)  # the two best groups per weight change
        v1 = gain[g1, cols]
        gain[g1, cols] = NEG
        g2 = np.argmax(gain, axis=0)
        v2 = gain[g2, cols]
        d = np.arange(lo, hi + 1)
        fits = d[:, None] + d[None, :] <= room
        same = g1[:, None] == g1[None, :]
        total = np.where(same, np.maximum(v1[:, None] + v2[None, :], v2[:, None] + v1[None, :]),
                         v1[:, None] + v1[None, :])
        np.fill_diagonal(total, v1 + v2)  # same d twice: the two best different groups
        total = np.where(fits, total, NEG)
        i, j = divmod(int(np.argmax(total)), total.shape[1])
        if not total[i, j] > 1e-9:
            break
        if i == j:
            a, b = g1[i], g2[i]
        elif g1[i] != g1[j]:
            a, b = g1[i], g1[j]
        else:
            a, b = (g1[i], g2[j]) if v1[i] + v2[j] >= v2[i] + v1[j] else (g2[i], g1[j])
        for g, dd in ((int(a), d[i]), (int(b), d[j])):
            choice[g] = int(np.argmax(np.where(dw[g] == dd, dv[g], NEG)))
    return choice


def _hull_greedy(weights: Sequence[np.ndarray], values: Sequence[np.ndarray], cap: int) -> tuple[np.ndarray, int]:
    """Hull increments by value per weight while they fit: (choice, weight used)."""
    gs, to, dw, dv, rank, starts = _increments(weights, values)
    choice = np.array(starts, dtype=np.int64)
    used = sum(int(weights[g][i]) for g, i in enumerate(starts))
    if len(gs):
        order = np.lexsort((rank, -(dv / dw)))
        cum = used + np.cumsum(dw[order])
        k = int(np.searchsorted(cum, cap, side="right"))  # the prefix that fits, taken at once
        head = order[:k]
        # hull increments of a group come in rank order, so the last one taken per group is its choice
        choice[gs[head]] = to[head]
        used = int(cum[k - 1]) if k else used
        if k < len(order):
            closed = np.zeros(len(weights), dtype=bool)
            closed[gs[order[k]]] = True
            min_dw = float(dw[order[k:]].min())
            for e in order[k + 1:].tolist():
                if cap - used < min_dw:
                    break
                g = int(gs[e])
                if closed[g]:
                    continue
                if used + dw[e] <= cap:
                    used += int(dw[e])
                    choice[g] = int(to[e])
                else:
                    closed[g] = True
    return choice, used
