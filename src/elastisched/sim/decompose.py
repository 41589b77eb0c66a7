"""The JCT decomposition of a finished job (issue 13; docs/seeds.md), one at a time or in batches.

Per job, `jct = queued + restarting + running` and `running = best + loss_gpus + loss_batch`, where
- `queued`: seconds without GPUs (before the first start and after preemptions), `jct − run_time`;
- `restarting`: seconds holding GPUs inside a restart / resize window (no progress);
- `best`: the job's whole work at its best achievable goodput — per epoch, the largest goodput over every
  GPU count 1..`spec.gpu_cap`, spread evenly over any feasible number of servers of the type it ran on most
  (packed or spread: on T4 spreading is sometimes faster) and every batch size on a 12-point geometric grid
  from the application's smallest to largest profiled batch plus the job's own;
- `loss_batch`: running time minus the time the same progress would have taken on the very GPUs it had at
  the best batch for them (the batch-size inefficiency, ≥ 0);
- `loss_gpus`: the rest (`running − best − loss_batch`): GPU-count / placement inefficiency. Negative when a
  policy gave the job more GPUs than its cap (a gain from extras).
Progress is priced per (GPU type, shape, epoch) at the data-parallel rate of the slowest type (an IIDP
allocation is priced as data parallel).

`decompose` prices one job. `Batch` prices the jobs that ran undisturbed (one configuration from their first
epoch to their last: most jobs of a long replay) many at a time, one numpy operation per batch of jobs with
the same rate tables instead of several per job: the same numbers, bit for bit (`Batch.add` says why).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np

from elastisched.engine.jobstate import JobState
from elastisched.models.application import Application

DECOMPOSITION = ["queued", "restarting", "running", "best", "loss_gpus", "loss_batch"]


_BEST: dict[tuple[Any, ...], np.ndarray] = {}
_GROUPS: dict[tuple[Any, ...], np.ndarray | None] = {}
#: The applications the two caches are keyed by (their id, not their name: two profile sets can share a name,
#: e.g. Pollux's and Sia's cifar10 in one sweep process). Held here so an id is never reused while cached.
_APPS: dict[int, Application] = {}
#: `best_rates` read at each epoch of a job with `n` epochs (what `decompose` divides by), per its key and `n`
_BEST_AT: dict[tuple[Any, ...], np.ndarray] = {}
#: `best_batch_rates` read at each epoch of a job with `n` epochs, per its key and `n` (`_at_best_batch`)
_RATE_AT: dict[tuple[Any, ...], np.ndarray] = {}


def _app_key(app: Application) -> int:
    if len(_BEST) + len(_GROUPS) + len(_BEST_AT) + len(_RATE_AT) > 200_000:
        _BEST.clear()
        _GROUPS.clear()
        _APPS.clear()
        _BEST_AT.clear()
        _RATE_AT.clear()
    _APPS.setdefault(id(app), app)
    return id(app)


def _cached(key: tuple[Any, ...], make: Callable[[], np.ndarray]) -> np.ndarray:
    r = _BEST.get(key)
    if r is None:
        r = _BEST[key] = make()
    return r


def _rate(app: Application, gpu_type: str, shape: tuple[int, ...], batch: int) -> np.ndarray:
    """Progress/s per epoch on `shape` GPUs of `gpu_type` at global batch `batch`."""
    cfg = app.batch_config(sum(shape), int(batch))
    return app.efficiency.gains(cfg.global_batch) / app.iteration_time(gpu_type, shape, cfg)


def _grid_rates(app: Application, gpu_type: str, shape: tuple[int, ...]) -> np.ndarray:
    """The per-epoch best over the 12-point batch grid (the part shared by every job's own batch)."""
    return _cached((_app_key(app), gpu_type, shape), lambda: _elementwise_max(
        [_rate(app, gpu_type, shape, b) for b in _batch_grid(app.init_batch_size, app.max_batch_size)]))


def best_batch_rates(app: Application, gpu_type: str, shape: tuple[int, ...], own_batch: int) -> np.ndarray:
    """Progress/s per epoch on `shape` GPUs of `gpu_type` at the best batch for each epoch (grid above).
    A maximum does not depend on the order it is taken in, so the grid's part is computed once per shape."""
    return _cached((_app_key(app), gpu_type, shape, own_batch), lambda: _elementwise_max(
        [_grid_rates(app, gpu_type, shape), _rate(app, gpu_type, shape, own_batch)]))


@lru_cache(maxsize=4096)
def _batch_grid(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(sorted(set(np.geomspace(lo, hi, 12).astype(int).tolist())))


@lru_cache(maxsize=4096)
def _shapes(cap: int, per_node: int, nodes: int) -> tuple[tuple[int, ...], ...]:
    return tuple(sorted({_balanced(g, k) for g in range(1, cap + 1)
                         for k in range(-(-g // per_node), min(g, nodes) + 1)}))


def best_rates(app: Application, gpu_type: str, cap: int, own_batch: int, per_node: int, nodes: int) -> np.ndarray:
    """Progress/s per epoch at the best GPU count ≤ `cap`, the best spread of it over the type's `nodes`
    servers (balanced over k servers; spreading can beat packing on T4) and the best batch: the best over
    the batch grid (shared by all jobs of the application) and over the job's own batch."""
    shapes = _shapes(cap, per_node, nodes)
    grid_batches = _batch_grid(app.init_batch_size, app.max_batch_size)
    grid = _cached((_app_key(app), gpu_type, cap, per_node, nodes), lambda: _elementwise_max(
        _by_count(app, gpu_type, cap, grid_batches, per_node, nodes)
        or [_grid_rates(app, gpu_type, sh) for sh in shapes]))
    return _cached((_app_key(app), gpu_type, cap, own_batch, per_node, nodes), lambda: _elementwise_max(
        [grid, *(_by_count(app, gpu_type, cap, (own_batch,), per_node, nodes)
                 or [_rate(app, gpu_type, sh, own_batch) for sh in shapes])]))


def _by_count(app: Application, gpu_type: str, cap: int, batches: tuple[int, ...], per_node: int, nodes: int
              ) -> list[np.ndarray] | None:
    """The candidates of `best_rates` for `batches`, one per (GPU count, batch) instead of one per shape: the
    shapes of g GPUs share the batch configuration and so the gains, and gains / t is largest at the least
    iteration time t (a correctly rounded division by a positive number is monotone), so their per-epoch
    maximum is gains / min t, the very same numbers. None (the caller takes every shape) when a time is
    not positive and finite or a gain not positive, where that no longer holds."""
    out = []
    for b in batches:
        for g in range(1, cap + 1):
            key = (_app_key(app), gpu_type, g, b, per_node, nodes)
            if key not in _GROUPS:
                _GROUPS[key] = _count_rate(app, gpu_type, g, b, per_node, nodes)
            r = _GROUPS[key]
            if r is None:
                return None
            out.append(r)
    return out


def _count_rate(app: Application, gpu_type: str, g: int, batch: int, per_node: int, nodes: int) -> np.ndarray | None:
    cfg = app.batch_config(g, int(batch))
    least = math.inf
    shapes = (_balanced(g, k) for k in range(-(-g // per_node), min(g, nodes) + 1))  # g's, as `_shapes`
    for t in app.iteration_times(gpu_type, shapes, cfg):
        if not 0.0 < t < math.inf:
            return None
        least = min(least, t)
    gains = app.efficiency.gains(cfg.global_batch)
    if least == math.inf or not bool(np.all(gains > 0)):
        return None
    return gains / least


def _elementwise_max(rates: list[np.ndarray]) -> np.ndarray:
    """Per-epoch maximum over candidates; profiles measured at different batches can cover different numbers
    of epochs (Sia's validation files), so the common prefix is compared."""
    n = min(len(r) for r in rates)
    return np.max([r[:n] for r in rates], axis=0)


@lru_cache(maxsize=65536)
def _balanced(g: int, k: int) -> tuple[int, ...]:
    """`g` GPUs over `k` servers as evenly as they go (the first `g % k` take one more); cached: the best rates
    of every batch read the same shapes."""
    return tuple(g // k + (i < g % k) for i in range(k))


def decompose(j: JobState, per_node: dict[str, tuple[int, int]]) -> tuple[float, ...]:
    """The job's JCT decomposition (module docstring) in `DECOMPOSITION` order; NaN losses when it has no
    model (a tuple: `collect` makes one per job)."""
    jct = (j.end_time or 0.0) - j.spec.submit_time
    running = j.run_time - j.restart_time
    nan = float("nan")
    app = j.app
    if app is None or not j.gpu_seconds_by_type or not j.work_by_config:
        return jct - j.run_time, j.restart_time, running, nan, nan, nan
    work = j.epoch_work
    akey = _app_key(app)
    at_best_batch = _at_best_batch(j, app, akey, work)
    t = max(j.gpu_seconds_by_type, key=j.gpu_seconds_by_type.__getitem__)
    if t not in app.profile.throughput:
        return jct - j.run_time, j.restart_time, running, nan, nan, nan
    n = len(work)
    servers = per_node.get(t, (1, 1))
    key = (akey, t, j.spec.gpu_cap, j.spec.batch_size, servers, n)
    best_at = _BEST_AT.get(key)
    if best_at is None:
        best_r = best_rates(app, t, j.spec.gpu_cap, j.spec.batch_size, *servers)
        best_at = _BEST_AT[key] = best_r[np.minimum(np.arange(n), len(best_r) - 1)]
    best = float(np.add.reduce(work / best_at))  # (ndarray.sum's pairwise sum, without its wrapper)
    return jct - j.run_time, j.restart_time, running, best, at_best_batch - best, running - at_best_batch


def _at_best_batch(j: JobState, app: Application, akey: int, work: np.ndarray) -> float:
    """Σ over the job's work log (`work_by_config`, then the whole epochs of its `work_tail`), in the log's
    order, of each entry's work / the best-batch rate of its configuration at its epoch, summed one after
    another (configurations without a profile of their GPU type left out). `work`: each epoch's work, which
    is a tail epoch's (`JobState.tail_entries`) whenever the tail starts at or after the progress it began at."""
    thr, own = app.profile.throughput, j.spec.batch_size
    acc: float | None = None
    config: tuple[str, tuple[int, ...]] | None = None
    r: np.ndarray | None = None
    for (t, shape, e), w in j.work_by_config.items():
        if (t, shape) != config:
            config, r = (t, shape), _batch_rates(app, akey, t, shape, own) if t in thr and shape else None
        if r is not None:
            v = w / float(r[e if e < len(r) else len(r) - 1])
            acc = v if acc is None else acc + v
    if j.work_tail is not None:
        t, shape, first, last, progress = j.work_tail
        r = _batch_rates(app, akey, t, shape, own) if t in thr and shape else None
        if r is not None and last > first:
            key = (akey, t, shape, own, len(work))
            r_at = _RATE_AT.get(key)
            if r_at is None:
                r_at = _RATE_AT[key] = r[np.minimum(np.arange(len(work)), len(r) - 1)]
            tail = work[first:last] if progress <= j.bounds[first] else j.tail_entries()[2]  # type: ignore[index]
            if acc is None:
                acc = float(np.add.accumulate(tail / r_at[first:last])[-1])
            else:  # the head's sum, then each tail entry after it: one sequential sum over [acc, entries...]
                buf = np.empty(last - first + 1)
                buf[0] = acc
                np.divide(tail, r_at[first:last], out=buf[1:])
                acc = float(np.add.accumulate(buf, out=buf)[-1])
    return 0.0 if acc is None else acc


def _batch_rates(app: Application, akey: int, t: str, shape: tuple[int, ...], own: int) -> np.ndarray:
    r = _BEST.get((akey, t, shape, own))
    return r if r is not None else best_batch_rates(app, t, shape, own)


def _rate_tables(app: Application, akey: int, t: str, shape: tuple[int, ...], j: JobState, n: int,
                 servers: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(best-batch rate on the job's own GPUs, best rate) at each of its `n` epochs: what `_at_best_batch` and
    `decompose` divide each epoch's work by."""
    own, cap = j.spec.batch_size, j.spec.gpu_cap
    key = (akey, t, shape, own, n)
    r_at = _RATE_AT.get(key)
    if r_at is None:
        r = _batch_rates(app, akey, t, shape, own)
        r_at = _RATE_AT[key] = r[np.minimum(np.arange(n), len(r) - 1)]
    key = (akey, t, cap, own, servers, n)
    best_at = _BEST_AT.get(key)
    if best_at is None:
        best_r = best_rates(app, t, cap, own, *servers)
        best_at = _BEST_AT[key] = best_r[np.minimum(np.arange(n), len(best_r) - 1)]
    return r_at, best_at


#: jobs waiting in a `Batch` before it prices them all (bounds its memory: each holds its epochs' work)
BATCH_JOBS = 4096


class Batch:
    """Decompositions of undisturbed jobs, priced many at a time (`add`, then `flush`)."""

    def __init__(self, per_node: dict[str, tuple[int, int]], size: int = BATCH_JOBS) -> None:
        self.per_node = per_node
        self.size = size
        # per pair of rate tables: those tables, and the waiting jobs' rows, works and running seconds
        self._groups: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, list[int], list[np.ndarray],
                                                  list[float]]] = {}
        self.waiting = 0

    def add(self, j: JobState, row: int, running: float) -> bool:
        """Take the job (its decomposition's last three figures to be `flush`ed for `row`) when it ran
        undisturbed: one work-log entry for all of its first epoch, in the configuration its tail (every
        later epoch, `JobState.work_tail`) ran in, on one GPU type with a profile. Its log then prices as
        `work / rate` per epoch — the entry's work is the epoch's (checked, bit for bit), the tail's are the
        epochs' — summed one after another (`_at_best_batch`) and pairwise (`decompose`), which numpy's
        accumulate and reduce along each row of a C-ordered 2-D array do alike. False: price it alone."""
        tail, app, wbc = j.work_tail, j.app, j.work_by_config
        if tail is None or app is None or len(wbc) != 1 or len(j.gpu_seconds_by_type) != 1:
            return False
        t, shape, first, last, progress = tail
        bounds = j.bounds
        if (first != 1 or last != len(bounds) - 1 or not shape or progress > bounds[1]
                or t not in j.gpu_seconds_by_type or t not in app.profile.throughput
                or wbc.get((t, shape, 0)) != bounds[1] - bounds[0]):
            return False
        servers = self.per_node.get(t, (1, 1))
        gkey = (id(app), t, shape, j.spec.batch_size, j.spec.gpu_cap, servers, last)
        group = self._groups.get(gkey)
        if group is None:
            group = self._groups[gkey] = (*_rate_tables(app, _app_key(app), t, shape, j, last, servers), [], [], [])
        group[2].append(row)
        group[3].append(j.epoch_work)
        group[4].append(running)
        self.waiting += 1
        return True

    @property
    def full(self) -> bool:
        return self.waiting >= self.size

    def flush(self) -> Iterator[tuple[list[int], np.ndarray, np.ndarray, np.ndarray]]:
        """Per group of waiting jobs: (their rows, best, loss_gpus, loss_batch); then none wait."""
        groups, self._groups, self.waiting = self._groups, {}, 0
        for r_at, best_at, rows, works, running in groups.values():
            work = np.stack(works)
            at_best = np.add.accumulate(work / r_at, axis=1)[:, -1]
            best = np.add.reduce(work / best_at, axis=1)
            yield rows, best, at_best - best, np.asarray(running) - at_best
