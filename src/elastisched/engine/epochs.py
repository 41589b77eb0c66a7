"""Epoch arrays that many jobs share: a job's scaled epoch bounds, and the seconds a whole run takes at one rate
table. A long trace repeats its jobs' lengths (a million-job Philly replay has some 30,000 distinct ones), so
each is made once per length (and per configuration) instead of once per job; all are read-only."""

from __future__ import annotations

import numpy as np

SHARED = 32768  # most entries of each table below (some 100 MB at most), emptied when full
Bounds = tuple[list[float], np.ndarray, np.ndarray]  # epoch bounds as floats, as an array, and each epoch's work

_WHOLE_RUNS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, float]] = {}


def scaled_bounds(epoch_end: np.ndarray, application: str, scale: float,
                  shared: dict[tuple[str, float], Bounds]) -> Bounds:
    """`epoch_end * scale` (as `JobState.bounds`, `bounds_arr` and `epoch_work`), from `shared` when a job of the
    same application and scale made it already."""
    key = (application, scale)
    hit = shared.get(key)
    if hit is None:
        if len(shared) >= SHARED:
            shared.clear()
        arr = epoch_end * scale
        work = arr[1:] - arr[:-1]  # np.diff, without its wrapper
        arr.flags.writeable = work.flags.writeable = False
        hit = shared[key] = (arr.tolist(), arr, work)
    return hit


def whole_run(work: np.ndarray, rates: np.ndarray) -> float:
    """Seconds to run every epoch's `work` at its `rates` (read-only arrays; `JobState.finish_time` of a fresh
    job), summed once per pair: shared bounds launched on one configuration, whose rates are memoised, recur.
    The entry holds both arrays, so their ids cannot be taken by others while it is there."""
    key = (id(work), id(rates))
    hit = _WHOLE_RUNS.get(key)
    if hit is not None and hit[0] is work and hit[1] is rates:
        return hit[2]
    if len(_WHOLE_RUNS) >= SHARED:
        _WHOLE_RUNS.clear()
    run = float(np.add.reduce(work / rates))  # (ndarray.sum, without its wrapper)
    _WHOLE_RUNS[key] = (work, rates, run)
    return run
