"""The tuned preset's fitness: the predicted sum of every job's completion time, queued jobs included.

ONES's own fitness (§2.6, `ones.ops.fitness`) scores only the jobs a candidate runs; reading D4 ("time")
counts a left-out job as if it ran on one GPU, so preempting never looks like a gain and, on a loaded
cluster, long jobs hold the GPUs while short ones queue (docs/ones.md "Results on the Pollux benchmark").
This fitness (`fitness="jct"`, docs/ones.md D5) scores a candidate by the sum over ALL active jobs of their
predicted completion time from now, in the order the candidate serves them:

- a job the candidate runs on n GPUs completes in T_j(n) = rem_j / x_j(n) (remaining samples over the
  interpolated online throughput, as §2.6), or, for a job without a prediction or without a throughput
  reading, in P_j / n where P_j is its prior remaining GPU-time;
- the prior P_j = max(attained GPU-seconds, `prior_s` × its size): with nothing else known, a job is taken
  to need as much again as it has had (the predictor's own ρ = 0.5 answer, in GPU-time: the least-attained-
  service signal Tiresias uses; Tiresias, NSDI'19 §3.1);
- a job the candidate leaves out waits behind the GPU-time of the jobs that run and of the left-out jobs
  served before it, drained at the cluster's capacity C (a fluid reading of "the order the schedule serves
  them"), then runs at its resume size g_j: c_j = (Σ_run n_i T_i(n_i) + Σ_{left out, before j} g_i T_i(g_i))
  / C + T_j(g_j). Left-out jobs are served in ascending g_j · T_j(g_j) (Smith's rule on GPU-time).

Swapping a running job L for a waiting job M of the same size g then gains about g (T_L − T_M) / C, so a
preemption pays only if that exceeds the restart it charges (`ones.deploy.move_cost`, × `preempt_factor`):
LAS with a threshold in units of the restart cost, instead of Tiresias's fixed GPU-time queues.
"""

from __future__ import annotations

import numpy as np


def time_table(rem: np.ndarray, xtab: np.ndarray, has_x: np.ndarray, prior_gpu: np.ndarray) -> np.ndarray:
    """(C + 1, J) predicted remaining time of each job on n = 0..C GPUs (row 0 is that of one GPU)."""
    c1 = xtab.shape[0]
    q = np.maximum(np.arange(c1), 1)
    known = np.isfinite(rem) & has_x
    with np.errstate(divide="ignore", invalid="ignore"):
        pred = np.where(known[None, :], np.maximum(np.nan_to_num(rem), 0.0)[None, :] / xtab[q], 0.0)
    return np.where(known[None, :], pred, prior_gpu[None, :] / q[:, None])


def fitness(counts: np.ndarray, ttab: np.ndarray, size: np.ndarray, capacity: int,
            mask: np.ndarray | None = None, resume_area: bool = False) -> np.ndarray:
    """Sum of predicted completion times per (P, J) row of counts (module docstring); lower is better.

    `mask`: count only these jobs' completion times (the "mixed" fitness: the jobs without a progress log);
    the GPU-time they wait behind is that of every job the row runs. `resume_area`: a running job's GPU-time
    is taken at its resume size (its current size if it runs), whatever the row gives it, so growing a job is
    judged by its own time only and the queue term weighs admissions and preemptions (`queue_area`)."""
    j = counts.shape[1]
    cols = np.arange(j)
    t_run = ttab[counts, cols[None, :]]  # (P, J); only where counts > 0
    run = counts > 0
    served = np.where(run, t_run, 0.0)
    area_run = (served * counts).sum(axis=1)  # GPU-seconds of the jobs the row runs
    if resume_area:
        area_run = np.where(run, (size * ttab[size, cols])[None, :], 0.0).sum(axis=1)
    if mask is not None:
        cols = np.flatnonzero(mask)
        served, run = served[:, cols], run[:, cols]
    d = ttab[size[cols], cols]  # a left-out job's time at its resume size
    area = size[cols] * d
    order = np.argsort(area, kind="stable")
    wait = ~run[:, order]
    a = np.where(wait, area[order][None, :], 0.0)
    before = np.cumsum(a, axis=1) - a
    c_wait = np.where(wait, (area_run[:, None] + before) / max(capacity, 1) + d[order][None, :], 0.0)
    return served.sum(axis=1) + c_wait.sum(axis=1)


def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a 2-D int array (first-seen order) and each row's index into them: what
    `np.unique(a, axis=0, return_inverse=True)` gives up to the order of the distinct rows, several times faster
    for the K survivors of a generation (speed only: the caller lays out each distinct row once)."""
    seen: dict[bytes, int] = {}
    inv = np.array([seen.setdefault(r.tobytes(), len(seen)) for r in a], dtype=np.int64)
    first = np.empty(len(seen), dtype=np.int64)
    first[inv[::-1]] = np.arange(a.shape[0] - 1, -1, -1)
    return a[first], inv


def admit_whole(counts: np.ndarray, capacity: int, order: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Pad stage 1 with whole starts (`start_whole`, D6): new jobs in FIFO `order` get their start size only
    where it fits in the row's free GPUs, else nothing, and a smaller job behind may take the GPUs (backfill),
    instead of the head job taking whatever is left (a 16-GPU job on 3 GPUs would run 5× slower, and a running
    job younger than an epoch is protected from mutation, so it would stay there)."""
    n = counts.copy()
    for i in order:
        free = capacity - n.sum(axis=1)
        n[(n[:, i] == 0) & (free >= start[i]), i] = start[i]
    return n


def explore(xtab: np.ndarray, limit: np.ndarray | None, pts_n: np.ndarray, pts_x: np.ndarray,
            free: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """`explore` (D8), for the jobs in `free` (no progress log) that have a reading: a GPU count above the largest
    observed one is taken to scale linearly from the best observed per-GPU rate, and A16's limit does not stop
    them. On T4 a job measured slower on 8 GPUs (two nodes) than on 4 may still be 2× faster on 16; the online
    model alone, extrapolating the falling segment, would never try. Returns a new table (the cached one is
    left untouched) and the limits."""
    ok = np.isfinite(pts_n)
    largest = np.where(ok, pts_n, 0.0).max(axis=1, initial=0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        per = np.where(ok, pts_x / np.where(ok, pts_n, 1.0), 0.0).max(axis=1, initial=0.0)
    n = np.arange(xtab.shape[0], dtype=float)[:, None]
    beyond = (n > largest[None, :]) & (free & (largest > 0))[None, :]
    out = np.where(beyond, np.maximum(xtab, n * per[None, :]), xtab)
    if limit is not None:
        limit = np.where(free & (largest > 0), np.iinfo(np.int64).max // 4, limit)
    return out, limit
