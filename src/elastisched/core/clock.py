"""Injected time (DESIGN.md: one engine, two clocks — SimPy's Environment vs RealtimeEnvironment split)."""

from __future__ import annotations

import math
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class SimClock:
    """Simulated seconds; only the simulator moves it, and never backwards."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if not math.isfinite(t):  # NaN compares false with everything: it would pass the check below
            raise ValueError(f"simulated time must be finite: now={self._now}, asked={t}")
        if t < self._now:
            raise ValueError(f"time must not go backwards: now={self._now}, asked={t}")
        self._now = t


class WallClock:
    """Seconds since the service started (monotonic), offset so restarts can continue a timeline."""

    __slots__ = ("_offset", "_t0")

    def __init__(self, offset: float = 0.0) -> None:
        self._t0 = time.monotonic()
        self._offset = offset

    def now(self) -> float:
        return self._offset + time.monotonic() - self._t0
