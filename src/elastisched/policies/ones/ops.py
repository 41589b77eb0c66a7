"""ONES evolutionary-search operators as pure, vectorized numpy functions (docs/ones.md, ones.md §2.6–§2.8).

Encoding (ones.md §2.2): an individual is an int array of C GPU slots holding a job *index* (0..J-1) or -1
(empty); a population is a (P, C) array. Per-job inputs are arrays of length J indexed the same way. Nothing
here keeps state or draws randomness except through the `rng` argument.

Readings (docs/ones.md "Ambiguities"):
- crossover/refresh accept a gene left→right only while the job holds fewer slots than its cap — the
  artifact's order, implemented as "occurrence rank of the job within the row < cap";
- fitness counts only jobs with a prediction (finite, positive remaining samples); a job's term is
  n·rem/x(n) (A1: GPU-time, as the code);
- selection is (μ+λ) truncation on the allocation counts; since the score depends only on counts, reorder is
  applied to the K survivors only (same result as reordering all 3K candidates, 3× cheaper).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from elastisched.core.types import JobSpec
from elastisched.policies.ones.online_throughput import interp_throughput
from elastisched.policies.ones.progress_predictor import BetaProgressPredictor, HistoryTable

EMPTY = -1
NO_LIMIT = 1 << 40  # `scaling_limit` of a job with no observed slowdown


def _rank_in_row(pop: np.ndarray) -> np.ndarray:
    """For each slot, how many earlier slots of the same row hold the same job (0 for the first)."""
    p, c = pop.shape
    flat = pop.reshape(-1)
    key = np.repeat(np.arange(p, dtype=np.int64), c) * (int(flat.max(initial=0)) + 2) + (flat + 1)
    order = np.argsort(key, kind="stable")
    sk = key[order]
    start = np.r_[True, sk[1:] != sk[:-1]]
    idx = np.arange(flat.size)
    first = np.maximum.accumulate(np.where(start, idx, 0))
    rank = np.empty(flat.size, dtype=np.int64)
    rank[order] = idx - first
    return rank.reshape(p, c)


def trim_to_caps(pop: np.ndarray, caps: np.ndarray, keep_first: bool = False) -> np.ndarray:
    """`refresh` (§2.8): keep a job's genes left→right while its count < cap; jobs with cap 0 vanish.

    `keep_first`: the artifact's `_refresh` accepts a job's first gene before it checks the cap, so a job
    whose cap is 0 (never started, or stopped but not waiting to resume) keeps one slot (artifact preset)."""
    pop = np.atleast_2d(pop)
    valid = pop >= 0
    cap_of = np.where(valid, caps[np.where(valid, pop, 0)], 0)
    rank = _rank_in_row(pop)
    keep = valid & ((rank < cap_of) | ((rank == 0) & keep_first))
    return np.where(keep, pop, EMPTY)


def counts(pop: np.ndarray, num_jobs: int) -> np.ndarray:
    """(P, J) number of slots each individual gives each job."""
    pop = np.atleast_2d(pop)
    p = pop.shape[0]
    valid = pop >= 0
    flat = (np.arange(p)[:, None] * num_jobs + pop)[valid]
    return np.bincount(flat, minlength=p * num_jobs).reshape(p, num_jobs)


def crossover(a: np.ndarray, b: np.ndarray, caps: np.ndarray, rng: np.random.Generator,
              xi: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Uniform crossover of parent rows a[i] × b[i] (§2.8): each slot swaps with probability `xi`; children
    are then trimmed to the caps (cap-respecting gene acceptance). Returns two (N, C) child arrays."""
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    swap = rng.random(a.shape) < xi
    c1 = np.where(swap, b, a)
    c2 = np.where(swap, a, b)
    return trim_to_caps(c1, caps), trim_to_caps(c2, caps)


def mutate(pop: np.ndarray, executed: np.ndarray, rng: np.random.Generator, theta: float = 0.3) -> np.ndarray:
    """Job-drop mutation (§2.8): each executed job present in an individual is removed entirely with
    probability `theta`; jobs with < 2 completed epochs (not `executed`) are protected."""
    pop = np.atleast_2d(pop)
    drop = (rng.random((pop.shape[0], executed.shape[0])) < theta) & executed[None, :]
    valid = pop >= 0
    hit = np.take_along_axis(drop, np.where(valid, pop, 0), axis=1) & valid
    return np.where(hit, EMPTY, pop)


def _fill(n: np.ndarray, order: np.ndarray, target: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Raise jobs in `order` towards `target` (per job) while `free` (per row) lasts; returns new counts."""
    if order.size == 0:
        return n
    want = np.clip(target[order][None, :] - n[:, order], 0, None)
    before = np.cumsum(want, axis=1) - want
    give = np.clip(free[:, None] - before, 0, want)
    out = n.copy()
    out[:, order] += give
    return out


def pad(n: np.ndarray, capacity: int, new_order: np.ndarray, exec_order: np.ndarray, caps: np.ndarray,
        max_size: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Three-stage greedy pad of (P, J) counts (§2.8).

    1. new jobs (`new_order`, FIFO) absent from a row get 1 GPU while capacity remains (`start`: per-job
       start size instead of 1, docs/ones.md D1; a job gets what is left when fewer GPUs are free);
    2. executed jobs (`exec_order`, ascending predicted remaining time on one GPU) rise to their GA cap;
    3. the same jobs rise to `max_size` (soaks up idle GPUs only).
    """
    n = np.atleast_2d(n).astype(np.int64, copy=True)
    free = capacity - n.sum(axis=1)
    n = _fill(n, new_order, np.ones(n.shape[1], dtype=np.int64) if start is None else start, free)
    for target in (caps, max_size):
        free = capacity - n.sum(axis=1)
        n = _fill(n, exec_order, target, free)
    return n


def fitness(n: np.ndarray, remaining: np.ndarray, pts_n: np.ndarray, pts_x: np.ndarray,
            mode: str = "gpu_time", xtab: np.ndarray | None = None) -> np.ndarray:
    """Score per row of (P, J) counts; lower is better. Jobs with rem ≤ 0 or non-finite (no prediction)
    contribute 0.

    - "gpu_time" (§2.6, A1 as the code): predicted remaining GPU-time Σ_j n_j · rem_j / x_j(n_j); a job the
      row leaves out adds 0.
    - "time" (A1's other reading, docs/ones.md D4): predicted remaining time Σ_j rem_j / x_j(max(n_j, 1)); a
      job the row leaves out is counted as if it ran on one GPU, so leaving a job out never lowers the score.
    """
    known = np.isfinite(remaining) & (remaining > 0)
    if not known.any():
        return np.zeros(n.shape[0])
    cols = np.flatnonzero(known)
    nk = n[:, cols]

    def x_of(q: np.ndarray) -> np.ndarray:  # `xtab`: x(n) precomputed for n = 0..C, (C + 1, J)
        return xtab[q, cols[None, :]] if xtab is not None else interp_throughput(pts_n[cols], pts_x[cols], q)

    if mode == "time":
        return (remaining[cols][None, :] / x_of(np.maximum(nk, 1))).sum(axis=1)
    x = x_of(nk)
    return (nk * remaining[cols][None, :] / x).sum(axis=1)


def scaling_limit(pts_n: np.ndarray, pts_x: np.ndarray, min_gain: float = 0.0) -> np.ndarray:
    """Per job, the largest GPU count worth growing to (docs/ones.md A16, a deviation from the artifact).

    The smallest observed count n whose throughput no larger observed count beats by a factor (1 + min_gain),
    provided some larger count was observed (a job at its largest observed size may still explore);
    otherwise NO_LIMIT. (J, M) inputs as for `interp_throughput`.
    """
    ok = np.isfinite(pts_n)
    n = np.where(ok, pts_n, np.inf)
    x = np.where(ok, pts_x, -np.inf)
    larger = n[:, None, :] > n[:, :, None]  # [j, i, k]: point k is larger than point i
    beaten = (larger & (x[:, None, :] > x[:, :, None] * (1.0 + min_gain))).any(axis=2)
    cand = np.where(ok & ~beaten, n, np.inf).min(axis=1)
    has_larger = (np.where(ok, n, -np.inf) > cand[:, None]).any(axis=1)
    return np.where(has_larger, np.where(np.isfinite(cand), cand, 0), NO_LIMIT).astype(np.int64)


def select(scores: np.ndarray, k: int) -> np.ndarray:
    """(μ+λ) truncation selection: indices of the k lowest scores (stable, duplicates allowed)."""
    return np.argsort(scores, kind="stable")[:k]


def _runs(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each maximal run of True in a 1-D bool array."""
    d = np.diff(np.r_[0, free.astype(np.int8), 0])
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    return starts, ends - starts


def _keep_blocks(alloc: np.ndarray, current: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1 of `reorder`: (slot array with the kept blocks, each job's first slot, slots kept per job)."""
    c = current.shape[0]
    j = alloc.shape[0]
    out = np.full(c, EMPTY, dtype=np.int64)
    valid = current >= 0
    cur_n = np.bincount(current[valid], minlength=j)[:j]
    first = np.full(j, c, dtype=np.int64)
    np.minimum.at(first, current[valid], np.flatnonzero(valid))
    last = np.full(j, -1, dtype=np.int64)
    np.maximum.at(last, current[valid], np.flatnonzero(valid))
    contiguous = (cur_n > 0) & (last - first + 1 == cur_n)
    keep_n = np.where(contiguous, np.minimum(alloc, cur_n), 0)
    kept = np.flatnonzero(keep_n > 0)
    if kept.size:
        slots = np.repeat(first[kept], keep_n[kept]) + (np.arange(keep_n[kept].sum())
                                                        - np.repeat(np.cumsum(keep_n[kept]) - keep_n[kept],
                                                                    keep_n[kept]))
        out[slots] = np.repeat(kept, keep_n[kept])
    return out, first, keep_n


def _grow_in_place(out: np.ndarray, alloc: np.ndarray, first: np.ndarray, keep_n: np.ndarray) -> None:
    """Step 2 of `reorder` (in place): a growing job extends its kept block into free slots after, then before
    it; one that cannot is cleared (`keep_n` 0) to be placed whole."""
    for jj in np.flatnonzero((keep_n > 0) & (alloc > keep_n)):
        need = int(alloc[jj] - keep_n[jj])
        s, e = int(first[jj]), int(first[jj] + keep_n[jj])
        after = out[e:e + need]
        if after.size == need and (after == EMPTY).all():
            out[e:e + need] = jj
            keep_n[jj] = alloc[jj]
            continue
        before = out[max(s - need, 0):s]
        if before.size == need and (before == EMPTY).all():
            out[s - need:s] = jj
            keep_n[jj] = alloc[jj]
            continue
        out[out == jj] = EMPTY  # cannot grow in place: re-place the whole block
        keep_n[jj] = 0


def reorder(alloc: np.ndarray, current: np.ndarray, node_of_slot: np.ndarray) -> np.ndarray:
    """Lay each job out as one contiguous block of `alloc[j]` slots, moving few running jobs (§2.8).

    Greedy replacement of the artifact's approximate-Levenshtein DP (docs/ones.md "reorder"), O(C + J log J)
    numpy work plus one short Python step per job that must be (re)placed:
    1. a job already deployed on one contiguous block keeps the first min(alloc, current) slots of it;
    2. a job that grows extends its kept block into free slots right after (then before) it, if they suffice;
    3. every other job (new, resumed, growing without room, or fragmented) is placed largest first into
       the free run that fits it best (fewest spare slots, ties: node-aligned, then lowest slot);
    4. if fragmentation leaves no run large enough, everything is compacted left in current order (a
       job moves only if its start slot changes) and the rest is appended.
    Returns the new (C,) slot array.
    """
    out, first, keep_n = _keep_blocks(alloc, current)
    _grow_in_place(out, alloc, first, keep_n)
    todo = np.flatnonzero((alloc > 0) & (keep_n == 0))
    todo = todo[np.argsort(-alloc[todo], kind="stable")]
    node_start = np.r_[True, node_of_slot[1:] != node_of_slot[:-1], True]
    starts, lens = _runs(out == EMPTY)  # free runs, updated in place: a job takes the front of its run
    for jj in todo:
        need = int(alloc[jj])
        ok = np.flatnonzero(lens >= need)
        if not ok.size:
            return _compact(out, alloc, todo)
        st, ln = starts[ok], lens[ok]
        r = ok[np.lexsort((st, ~node_start[st], ln - need))[0]]
        out[starts[r]:starts[r] + need] = jj
        starts[r] += need
        lens[r] -= need
    return out


def _compact(out: np.ndarray, alloc: np.ndarray, todo: np.ndarray) -> np.ndarray:
    """Fallback of `reorder`: placed jobs packed left in slot order, then the remaining jobs appended."""
    occ = out[out >= 0]
    placed = occ[np.r_[True, occ[1:] != occ[:-1]]] if occ.size else occ  # blocks are contiguous: slot order
    rest = todo[~np.isin(todo, placed)]
    order = np.concatenate([placed, rest]).astype(np.int64)
    seq = np.repeat(order, alloc[order])
    res = np.full(out.shape[0], EMPTY, dtype=np.int64)
    res[:seq.size] = seq
    return res


def layout_from_counts(alloc: np.ndarray, capacity: int) -> np.ndarray:
    """Blocks in job order from slot 0 (used to seed a population)."""
    seq = np.repeat(np.arange(alloc.shape[0]), alloc)
    res = np.full(capacity, EMPTY, dtype=np.int64)
    res[:min(seq.size, capacity)] = seq[:capacity]
    return res


_FITS: dict[tuple[str, int], dict[str, Any]] = {}  # fitted predictor per (table digest, seed): pure memo


def bootstrap_state(table: HistoryTable, seed: int) -> dict[str, Any]:
    """The predictor's state after fitting the bootstrap table (memoised per table content and seed)."""
    x, rho = np.ascontiguousarray(table[0], dtype=float), np.ascontiguousarray(table[1], dtype=float)
    key = (hashlib.sha1(x.tobytes() + rho.tobytes()).hexdigest(), seed)
    if key not in _FITS:
        p = BetaProgressPredictor(seed=seed)
        p.add(x, rho)
        p.fit()
        _FITS[key] = p.state_dict()
    return _FITS[key]


def job_batch(spec: JobSpec, n: int) -> int:
    """Global batch on n GPUs: local batch fixed, linear LR scaling capped at max_lr (ones.md §1)."""
    a = spec.attrs
    local = int(a.get("local_batch", max(1, spec.batch_size // max(spec.num_gpus, 1))))
    lr, max_lr = a.get("lr"), a.get("max_lr")
    if lr is None or max_lr is None or lr * n <= max_lr:
        return local * n
    return max(n, (int(local * max_lr / lr) // n) * n)


def defer(cur: np.ndarray, best: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """Per-job δ throttle (docs/ones.md A14): blocked jobs keep their current slots; a job whose target slots
    collide with a deferred job's current slots is deferred too (kept as is, or not started), until stable."""
    deferred = blocked.copy()
    while True:
        keep = np.where(deferred[np.where(cur >= 0, cur, 0)] & (cur >= 0), cur, EMPTY)
        take = np.where((best >= 0) & ~deferred[np.where(best >= 0, best, 0)], best, EMPTY)
        clash = (keep >= 0) & (take >= 0)
        if not clash.any():
            return np.where(keep >= 0, keep, take)
        deferred[np.unique(take[clash])] = True
