"""Inference demand over time: how many inference servers are busy (lyra.md §1.1, §5, §6.1).

Three sources, all returning a `DemandSeries` (a right-continuous step function of busy servers):

- `diurnal(...)`: a seeded generator, a raised cosine over `period` seconds between `trough` and `peak`
  utilisation plus Gaussian noise, sampled every `step` seconds. The defaults (peak 0.75, trough 0.10)
  keep utilisation below 40 % for about half of each day, the paper's "below 40 % for long periods"
  (lyra.md §1.1 [S]); `low_stretches` measures it.
- `from_csv(path)`: rows `time,busy_servers` (seconds, integer servers), any order; bad rows raise
  `WorkloadError` naming the line, column and value.
- `from_inference_tasks(tasks, ...)`: DeepBoot inference rows (`Workload.inference`).

Readings of ambiguities (written down as the design asks):
- DeepBoot rows: a row holds `num_replicas` GPUs from `submit_time` for `duration` seconds; `num_task`
  (DeepBoot's request count inside the pod) is ignored unless `seconds_per_task` is given, in which case the
  row holds its GPUs for `num_task × seconds_per_task` seconds. Busy servers = ⌈busy GPUs / GPUs per
  server⌉ (the inference scheduler packs its pods); `overhead` seconds are added to every hold (DeepBoot: a
  pod's start-up plus the keep-alive it stays on its GPU after the task) and `gpus_per_task` overrides
  `num_replicas` (DeepBoot's simulator runs every inference task on one GPU whatever the row says). Busy
  servers are capped at the cluster size (excess demand is served by the inference side's own queue, which
  Lyra never sees).
- The generator's noise is drawn once per sample point; utilisation is clipped to [0, 1] and rounded to
  whole servers (loaning is in whole servers, lyra.md §1.2).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elastisched.core.errors import ConfigError, WorkloadError
from elastisched.workloads.schema import InferenceTask

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class DemandSeries:
    """Busy inference servers: `busy[i]` holds from `times[i]` until `times[i+1]` (the last one forever)."""

    times: tuple[float, ...]
    busy: tuple[int, ...]
    servers: int

    def __post_init__(self) -> None:
        if len(self.times) != len(self.busy) or not self.times:
            raise ConfigError("demand", len(self.times), "times and busy must be non-empty and equally long")
        if any(b > a for a, b in zip(self.times[1:], self.times, strict=False)):
            raise ConfigError("demand.times", self.times[:5], "must be non-decreasing")
        if self.servers <= 0 or any(not 0 <= b <= self.servers for b in self.busy):
            raise ConfigError("demand.busy", max(self.busy), f"must lie in 0..servers={self.servers}")

    def at(self, t: float) -> int:
        """Busy servers at time `t` (0 before the first point)."""
        i = int(np.searchsorted(np.asarray(self.times), t, side="right")) - 1
        return self.busy[i] if i >= 0 else 0

    @property
    def end(self) -> float:
        return self.times[-1]

    def utilisation(self) -> np.ndarray:
        return np.asarray(self.busy, dtype=float) / self.servers

    def mean_utilisation(self, until: float | None = None) -> float:
        """Time-weighted mean utilisation from the first point to `until` (default: the last point)."""
        t = np.asarray(self.times, dtype=float)
        end = self.end if until is None else until
        dt = np.diff(np.append(t, end)).clip(min=0)
        return float(np.sum(dt * self.utilisation()) / dt.sum()) if dt.sum() > 0 else float(self.utilisation()[0])


def low_stretches(series: DemandSeries, threshold: float = 0.4, until: float | None = None
                  ) -> list[tuple[float, float]]:
    """Maximal intervals with utilisation strictly below `threshold` (the paper's "< 40 %" periods)."""
    out: list[tuple[float, float]] = []
    end = series.end if until is None else until
    start: float | None = None
    for t, u in zip(series.times, series.utilisation(), strict=True):
        if t >= end:
            break
        if u < threshold and start is None:
            start = t
        elif u >= threshold and start is not None:
            out.append((start, t))
            start = None
    if start is not None and end > start:
        out.append((start, end))
    return out


def _compress(times: Sequence[float], busy: Sequence[int]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Keep the last value given at a repeated time, then drop points that do not change the value."""
    last: dict[float, int] = {}
    for t, b in zip(times, busy, strict=True):
        last[float(t)] = int(b)
    ts: list[float] = []
    bs: list[int] = []
    for t in sorted(last):
        if not bs or bs[-1] != last[t]:
            ts.append(t)
            bs.append(last[t])
    return tuple(ts), tuple(bs)


def diurnal(servers: int, days: float = 15.0, *, period: float = DAY, peak: float = 0.75, trough: float = 0.10,
            noise: float = 0.03, step: float = 600.0, peak_at: float = 14 * 3600.0, seed: int = 0) -> DemandSeries:
    """Seeded diurnal demand: `trough + (peak − trough)·(1 + cos(2π(t − peak_at)/period))/2 + N(0, noise)`."""
    if servers <= 0:
        raise ConfigError("servers", servers, "must be > 0")
    if not 0 <= trough <= peak <= 1:
        raise ConfigError("peak/trough", (peak, trough), "need 0 <= trough <= peak <= 1")
    if step <= 0 or period <= 0 or days <= 0:
        raise ConfigError("step/period/days", (step, period, days), "must be > 0")
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, days * DAY, step)
    u = trough + (peak - trough) * 0.5 * (1.0 + np.cos(2 * math.pi * (t - peak_at) / period))
    u = np.clip(u + rng.normal(0.0, noise, size=len(t)), 0.0, 1.0)
    busy = np.rint(u * servers).astype(int)
    ts, bs = _compress(t.tolist(), busy.tolist())
    return DemandSeries(ts, bs, servers)


def from_csv(path: str | Path, servers: int | None = None) -> DemandSeries:
    """Read `time,busy_servers`; `servers` defaults to the largest busy count in the file."""
    p = str(path)
    rows: list[tuple[float, int]] = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        missing = [c for c in ("time", "busy_servers") if c not in header]
        if missing:
            raise WorkloadError(p, 1, missing[0], None, f"missing column(s) {missing}; header is {header}")
        for line, row in enumerate(reader, start=2):
            raw_t, raw_b = row.get("time"), row.get("busy_servers")
            try:
                t = float(raw_t or "")
                if not math.isfinite(t) or t < 0:
                    raise ValueError("must be a finite number >= 0")
            except ValueError as e:
                raise WorkloadError(p, line, "time", raw_t, str(e)) from None
            try:
                fb = float(raw_b or "")
                if fb != int(fb) or fb < 0:
                    raise ValueError("must be an integer >= 0")
            except ValueError as e:
                raise WorkloadError(p, line, "busy_servers", raw_b, str(e)) from None
            rows.append((t, int(fb)))
    if not rows:
        raise WorkloadError(p, 2, "time", None, "no rows")
    rows.sort(key=lambda r: r[0])
    n = servers if servers is not None else max(b for _, b in rows)
    if n <= 0:
        raise WorkloadError(p, 2, "busy_servers", 0, "all rows are 0 and no server count was given")
    over = next(((i, b) for i, (_, b) in enumerate(rows) if b > n), None)
    if over is not None:
        raise WorkloadError(p, over[0] + 2, "busy_servers", over[1], f"exceeds the {n} inference servers")
    ts, bs = _compress([t for t, _ in rows], [b for _, b in rows])
    return DemandSeries(ts, bs, n)


def from_inference_tasks(tasks: Iterable[InferenceTask], servers: int, gpus_per_server: int = 4, *,
                         seconds_per_task: float | None = None, overhead: float = 0.0,
                         gpus_per_task: int | None = None) -> DemandSeries:
    """Busy servers implied by DeepBoot inference rows (see the module docstring for the reading)."""
    if servers <= 0 or gpus_per_server <= 0:
        raise ConfigError("servers/gpus_per_server", (servers, gpus_per_server), "must be > 0")
    if overhead < 0:
        raise ConfigError("overhead", overhead, "must be >= 0")
    deltas: dict[float, int] = {0.0: 0}
    for task in tasks:
        hold = task.num_task * seconds_per_task if seconds_per_task is not None else task.duration
        gpus = task.num_replicas if gpus_per_task is None else gpus_per_task
        if hold <= 0 or gpus <= 0:
            continue
        deltas[task.submit_time] = deltas.get(task.submit_time, 0) + gpus
        end = task.submit_time + hold + overhead
        deltas[end] = deltas.get(end, 0) - gpus
    times = sorted(deltas)
    gpus = np.cumsum([deltas[t] for t in times])
    busy = np.minimum(np.ceil(gpus / gpus_per_server).astype(int), servers)
    ts, bs = _compress(times, busy.tolist())
    return DemandSeries(ts, bs, servers)
