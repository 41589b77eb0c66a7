"""Deploying ONES's best individual (ones.md §2.9) and the restart-aware hold of the tuned preset.

Pure numpy over slot arrays (job index per GPU slot, -1 empty), no state: `ones.OnesPolicy` applies the
result to its per-job bookkeeping. Two readings of the artifact's `_update` are options (docs/ones.md
"Presets"):
- `delta_reset`: "changed" (ours: the δ clock restarts for the jobs whose placement changed) or "all" (the
  artifact: `_wait_for_execution(new_schedule)` stamps `last_epoch_scheduled` on every job of a newly
  deployed schedule, moved or not);
- `scale_in`: "passed_over" (A15: a preempted job is halved when another job (re)starts while it stays out)
  or "every" (the artifact: every unthrottled update halves every preempted job it leaves out).
"""

from __future__ import annotations

import numpy as np

from elastisched.policies.ones.online_throughput import interp_throughput
from elastisched.policies.ones.ops import EMPTY, defer


def changed_jobs(cur: np.ndarray, new: np.ndarray, num_jobs: int) -> np.ndarray:
    """Jobs whose slot set differs between two slot arrays (bool per job)."""
    out = np.zeros(num_jobs, dtype=bool)
    diff = cur != new
    for col in (cur[diff], new[diff]):
        out[col[col >= 0]] = True
    return out


def slot_counts(slots: np.ndarray, num_jobs: int) -> np.ndarray:
    return np.bincount(slots[slots >= 0], minlength=num_jobs)[:num_jobs]


def hold(cur: np.ndarray, best: np.ndarray, running: np.ndarray, rem: np.ndarray, pts_n: np.ndarray,
         pts_x: np.ndarray, resize_cost: float, factor: float | np.ndarray = 1.0,
         xtab: np.ndarray | None = None) -> np.ndarray:
    """Running jobs that keep their slots because the move does not pay for itself (tuned preset).

    - a job whose GPU count stays the same but whose slots move (a migration) gains nothing: held;
    - a job that grows n → n' is held unless its predicted remaining time rem/x(n) exceeds
      rem/x(n') + `factor` × `resize_cost` (a job without a prediction, rem NaN, is never held for growth);
    - a job that shrinks or stops is not held: it frees GPUs for others, and the fitness already charged it.
    `factor`: one for all jobs or one per job (`hold_free`, D13). `xtab`: x(n) already interpolated for n = 0..C,
    (C + 1, J) (the same values, looked up).
    """
    j = running.shape[0]
    n_cur, n_new = slot_counts(cur, j), slot_counts(best, j)
    moved = changed_jobs(cur, best, j) & running
    same = moved & (n_new == n_cur)
    grow = moved & (n_new > n_cur)
    known = grow & np.isfinite(rem) & (rem > 0)
    held = same.copy()
    if known.any():
        idx = np.flatnonzero(known)
        q = np.stack([n_cur[idx], n_new[idx]])
        x = xtab[q, idx[None, :]] if xtab is not None else interp_throughput(pts_n[idx], pts_x[idx], q.astype(float))
        gain = rem[idx] / x[0] - (rem[idx] / x[1] + np.broadcast_to(factor, (j,))[idx] * resize_cost)
        held[idx] = gain <= 0.0
    return held


def plan(cur: np.ndarray, best: np.ndarray, running: np.ndarray, since_placed: np.ndarray, delta: float,
         throttle: str, held: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """The slot array to deploy and whether the update was applied in full (§2.9).

    `held` jobs keep their current slots first (`defer`: a job whose target collides with them waits too).
    Then the δ throttle: if a running job whose placement would change has done < δ epochs since its last
    (re)placement, "global" (artifact) applies only immediate starts on idle GPUs, "job" defers just the young
    jobs and their collisions."""
    j = running.shape[0]
    if held is not None and held.any():
        best = defer(cur, best, held)
    blocked = changed_jobs(cur, best, j) & running & (since_placed < delta)
    if not blocked.any():
        return best.copy(), True
    if throttle == "job":
        return defer(cur, best, blocked), False
    out = cur.copy()  # artifact: defer everything but immediate starts on idle GPUs
    for i in np.flatnonzero(~running):
        tgt = best == i
        if tgt.any() and (out[tgt] == EMPTY).all():
            out[tgt] = i
    return out, False


def scale_in(cur: np.ndarray, out: np.ndarray, running: np.ndarray, executed: np.ndarray, full: bool,
             mode: str) -> np.ndarray:
    """Preempted executed jobs whose resume size is halved this round (§2.7 scale-in)."""
    j = running.shape[0]
    left_out = ~running & executed & (slot_counts(out, j) == 0)
    if mode == "every":
        return left_out if full else np.zeros(j, dtype=bool)
    started = np.zeros(j, dtype=bool)
    started[np.unique(out[(out >= 0) & (cur == EMPTY)])] = True
    return left_out if (started & ~running).any() else np.zeros(j, dtype=bool)


def move_cost(counts: np.ndarray, n_cur: np.ndarray, running: np.ndarray, restart_cost: float,
              resize_cost: float, mode: str = "gpu_time") -> np.ndarray:
    """Per candidate row of (P, J) counts, the restart/resize cost its changes to running jobs would charge:
    a resize to n' > 0 stalls n' GPUs for `resize_cost`, a stop costs a restart on the job's current GPUs when
    it resumes. In GPU-seconds ("gpu_time") or seconds ("time"), the fitness's own unit."""
    change = (counts != n_cur[None, :]) & running[None, :]
    if not change.any():
        return np.zeros(counts.shape[0])
    stop = change & (counts == 0)
    resize = change & (counts > 0)
    if mode == "time":
        return (stop * restart_cost + resize * resize_cost).sum(axis=1)
    return (stop * (restart_cost * n_cur[None, :]) + resize * (resize_cost * counts)).sum(axis=1)
