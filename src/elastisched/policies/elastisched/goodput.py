"""The best goodput a job gets from k GPUs of one type, over batch sizes, and the time left at that pace.

Goodput is the models' own (`Application.data_parallel_rates`: throughput of the batch configuration on a
placement × statistical efficiency of its global batch at the epoch), the rule the simulator and the live
service price a running job with, so the policy plans with what the bodies will measure (Pollux OSDI'21
§3.1–3.2: AdaptDL tunes the batch to each allocation). For an application, a GPU type with `per_node` GPUs per
server and k GPUs packed on as few servers as possible (`packed_shape`), `RateTable` holds, per epoch, the
largest goodput over a geometric grid of global batch sizes and the batch that reaches it.

Guard rails (issue 21 item 3; our readings):
- the global batch stays inside the application's profiled range [smallest, largest validation batch] — the
  efficiency model's domain (outside it the statistics are clamped and the gain would be extrapolated);
- the micro-batch stays at or above the smallest profiled local batch (below it the throughput model
  extrapolates), so a count k with no batch in range is not offered (the application's GPU cap).

The remaining time of a job that will do `work_scale`× the application's work, at progress p in epoch e,
with k GPUs held from now on: `ws·suffix[k, e+1] + (ws·epoch_end[e+1] − p) / rate[k, e]`, where
`suffix[k, e]` sums each later epoch's work over its rate (per-epoch rates: the gain grows as training goes on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from elastisched.models.application import Application, BatchConfig, packed_shape

GRID_POINTS = 12  # global batch sizes tried per count, geometric over the profiled range


@dataclass(frozen=True, slots=True)
class RateTable:
    """Best goodput (progress/s) per (GPU count, epoch) of one application on one GPU type; row 0 is 0."""

    rate: np.ndarray  # [K+1, E]
    batch: np.ndarray  # [K+1, E] global batch reaching it (0 where no batch fits)
    suffix: np.ndarray  # [K+1, E+1] seconds to do epochs e.. at work_scale 1 (inf where rate is 0)
    epoch_end: np.ndarray  # [E+1] progress at the end of each epoch, work_scale 1

    @property
    def max_gpus(self) -> int:
        return self.rate.shape[0] - 1

    def remaining(self, work_scale: float, progress: float, epoch: int, kmax: int) -> np.ndarray:
        """Seconds left with 0..kmax GPUs held from now (index = GPUs; inf at 0 and where no batch fits)."""
        k = min(kmax, self.max_gpus)
        e = min(max(epoch, 0), self.rate.shape[1] - 1)
        head = max(work_scale * float(self.epoch_end[e + 1]) - progress, 0.0)
        with np.errstate(divide="ignore"):
            return work_scale * self.suffix[: k + 1, e + 1] + head / self.rate[: k + 1, e]


def batch_grid(app: Application) -> np.ndarray:
    """Global batch sizes tried: geometric from the smallest to the largest profiled batch, both included."""
    lo, hi = app.init_batch_size, app.max_batch_size
    if hi <= lo:
        return np.array([lo], dtype=np.int64)
    return np.unique(np.round(np.geomspace(lo, hi, GRID_POINTS)).astype(np.int64))


def _usable(app: Application, cfg: BatchConfig) -> bool:
    """Inside the profiled range: global batch ≤ the largest validation batch, micro-batch ≥ the smallest
    profiled local batch (module docstring, guard rails)."""
    return cfg.micro_batch >= app.min_local_bsz and cfg.global_batch <= app.max_batch_size


def best_rates(app: Application, gpu_type: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(best progress/s per epoch, the global batch reaching it) on one placement shape; zeros if no batch fits."""
    n = sum(shape)
    epochs = app.max_epochs
    best = np.zeros(epochs)
    arg = np.zeros(epochs, dtype=np.int64)
    for b in batch_grid(app):
        cfg = app.batch_config(n, int(b))
        if not _usable(app, cfg):
            continue
        r = app.data_parallel_rates(gpu_type, shape, cfg)[1][:epochs]
        better = r > best
        best = np.where(better, r, best)
        arg = np.where(better, cfg.global_batch, arg)
    return best, arg


def build_table(app: Application, gpu_type: str, per_node: int, kmax: int) -> RateTable:
    """`RateTable` for counts 0..kmax packed on servers of `per_node` GPUs."""
    epochs = app.max_epochs
    rate = np.zeros((kmax + 1, epochs))
    batch = np.zeros((kmax + 1, epochs), dtype=np.int64)
    for k in range(1, kmax + 1):
        rate[k], batch[k] = best_rates(app, gpu_type, packed_shape(k, per_node))
    ends = np.asarray(app.epoch_end[: epochs + 1], dtype=float)
    work = np.diff(ends)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_epoch = np.where(rate > 0, work / np.where(rate > 0, rate, 1.0), math.inf)
    suffix = np.zeros((kmax + 1, epochs + 1))
    suffix[:, :epochs] = np.cumsum(per_epoch[:, ::-1], axis=1)[:, ::-1]
    suffix[0, :epochs] = math.inf
    return RateTable(rate, batch, suffix, ends)


def gpu_cap(app: Application) -> int:
    """Most GPUs any batch in the profiled range can spread over (micro-batch ≥ the smallest local batch)."""
    return max(1, app.max_batch_size // max(app.min_local_bsz, 1))


class RateTables:
    """`RateTable`s built on first use and kept per (application, type, server size); bounded by the number of
    applications × types × server sizes a cluster has (a handful), not by jobs."""

    def __init__(self) -> None:
        self._tables: dict[tuple[int, str, int], RateTable] = {}
        self._apps: dict[int, Application] = {}  # keeps the models keyed by id() alive
        self._shapes: dict[tuple[int, str, tuple[int, ...]], tuple[np.ndarray, np.ndarray]] = {}
        self._finite_from: dict[tuple[int, str, tuple[int, ...]], int] = {}

    def table(self, app: Application, gpu_type: str, per_node: int) -> RateTable:
        key = (id(app), gpu_type, per_node)
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = build_table(app, gpu_type, per_node, gpu_cap(app))
            self._apps[id(app)] = app
        return t

    def shape_rates(self, app: Application, gpu_type: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """`best_rates` on a placement's own shape (a running job placed across servers), memoised."""
        key = (id(app), gpu_type, shape)
        r = self._shapes.get(key)
        if r is None:
            if len(self._shapes) > 20_000:
                self._shapes.clear()
                self._finite_from.clear()
            r = self._shapes[key] = best_rates(app, gpu_type, shape)
            self._apps[id(app)] = app
        return r

    def finite_from(self, app: Application, gpu_type: str, shape: tuple[int, ...]) -> int:
        """The first epoch from which every epoch has a usable batch on this placement shape (`shape_rates` > 0):
        a job there at an earlier epoch would never finish."""
        key = (id(app), gpu_type, shape)
        e = self._finite_from.get(key)
        if e is None:
            rates = self.shape_rates(app, gpu_type, shape)[0]
            zero = np.flatnonzero(rates <= 0)
            e = self._finite_from[key] = int(zero[-1]) + 1 if len(zero) else 0
        return e
