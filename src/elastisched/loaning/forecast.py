"""A forecast of what the inference side will lend, from what it lent before (issue 21: reclaim ahead).

Inference demand follows the day (lyra.md §1.1: a diurnal pattern that repeats; GFS, ASPLOS'26, forecasts it to
cut loan evictions). A training scheduler sees it through what it is lent: the number of loaned servers over
time. `SeasonalForecast` keeps that series in bins of `bin_s` seconds over the last `days` periods (bounded
memory) and predicts a future instant as the **median of the same time of day over the periods seen**
(seasonal naive, robust to a single odd day); an instant whose time of day has no history yet is predicted as
the last value observed (persistence). `lowest(now, horizon)` is the least value predicted over the next
`horizon` seconds, the current value included: how many of today's loans are expected to survive that long.

Readings (ours): the value of a bin is the last one observed in it (loan counts change by steps); the period is
a day (`DAY`); a bin counts as seen only once an observation fell in it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

DAY = 86_400.0


class SeasonalForecast:
    """Seasonal-naive forecast of a daily-periodic series (module docstring)."""

    def __init__(self, period: float = DAY, bin_s: float = 900.0, days: int = 7) -> None:
        if not (period > 0 and bin_s > 0 and days >= 1) or period % bin_s:
            raise ValueError(f"period={period}, bin_s={bin_s}, days={days}: need period a multiple of bin_s > 0, "
                             "days ≥ 1")
        self.period, self.bin_s, self.days = period, bin_s, days
        self.bins = int(period // bin_s)
        self.values = np.full((days, self.bins), np.nan)  # [period index mod days, bin]
        self.period_of = np.full(days, -1, dtype=np.int64)  # which absolute period each row holds
        self.last: float | None = None
        self.last_t = -math.inf

    def _slot(self, t: float) -> tuple[int, int]:
        k = int(t // self.bin_s)
        return k // self.bins, k % self.bins

    def observe(self, t: float, value: float) -> None:
        """Record `value` at time `t` (times must not go back; a repeated time overwrites)."""
        if t < self.last_t:
            raise ValueError(f"observation at t={t} is before the last one at {self.last_t}")
        period, b = self._slot(t)
        row = period % self.days
        if self.period_of[row] != period:
            self.values[row] = np.nan
            self.period_of[row] = period
        self.values[row, b] = value
        self.last, self.last_t = float(value), t

    def predict(self, t: float) -> float | None:
        """The value expected at `t`: the median of its time of day over earlier periods, else the last value."""
        period, b = self._slot(t)
        mask = (self.period_of >= 0) & (self.period_of < period)
        seen = self.values[mask, b]
        seen = seen[~np.isnan(seen)]
        if len(seen):
            return float(np.median(seen))
        return self.last

    def lowest(self, now: float, horizon: float) -> float | None:
        """The least value expected over [now, now + horizon] (the last observed value included); None before any
        observation."""
        if self.last is None:
            return None
        low = self.last
        if horizon <= 0:
            return low
        steps = math.ceil(horizon / self.bin_s)
        for i in range(1, steps + 1):
            p = self.predict(now + min(i * self.bin_s, horizon))
            if p is not None:
                low = min(low, p)
        return low

    def state_dict(self) -> dict[str, Any]:
        return {"values": np.where(np.isnan(self.values), -1.0, self.values).tolist(),
                "period_of": self.period_of.tolist(), "last": self.last,
                "last_t": self.last_t if math.isfinite(self.last_t) else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        v = np.asarray(state["values"], dtype=float)
        if v.shape != self.values.shape:
            return  # saved with another binning: start afresh rather than misread it
        self.values = np.where(v < 0, np.nan, v)
        self.period_of = np.asarray(state["period_of"], dtype=np.int64)
        self.last = state.get("last")
        lt = state.get("last_t")
        self.last_t = -math.inf if lt is None else float(lt)
