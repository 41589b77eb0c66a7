"""When things happen in a simulation: the arrivals in submission order, the queue of the other events, and the
tick grid of a policy's rounds (DESIGN.md "Simulation semantics"; docs/simulator.md)."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from typing import Any

from elastisched.core.types import JobSpec

ARRIVAL = 0  # the event kind of an arrival (the simulator's other kinds follow it)
INF = float("inf")


def in_submission_order(jobs: Sequence[JobSpec]) -> Sequence[JobSpec]:
    """The workload's jobs by submission time (ties in workload order); the jobs themselves when in order."""
    for s in jobs:
        if not math.isfinite(s.submit_time):
            raise ValueError(f"event time must be finite, got {s.submit_time!r} (event kind {ARRIVAL})")
    if all(a.submit_time <= b.submit_time for a, b in itertools.pairwise(jobs)):
        return jobs
    return sorted(jobs, key=lambda s: s.submit_time)


def next_round(now: float, interval: float | None, hint: float | None) -> float:
    """When to consult a policy with rounds every `interval` seconds (None: none due, INF) after a round at
    `now`: the next tick on the grid, or its hint's tick when later."""
    if interval is None:
        return INF
    nxt = (math.floor(now / interval + 1e-9) + 1) * interval  # back on the grid after off-grid rounds
    if hint is not None:
        nxt = max(nxt, hint, math.ceil(hint / interval - 1e-9) * interval) if hint < INF else INF
    return nxt


class EventQueue:
    """Events in the order of (time, order pushed) — the order a heap of (time, sequence number, ...) tuples pops
    them in — kept as a heap of the distinct times (floats compare at a fraction of a tuple's cost) and each
    time's events in the order they came."""

    __slots__ = ("_at", "times")

    def __init__(self) -> None:
        self.times: list[float] = []  # the heap of distinct times: `times[0]` is the next event's (read only)
        self._at: dict[float, list[tuple[float, int, Any]]] = {}

    def push(self, t: float, kind: int, payload: Any) -> None:
        if not math.isfinite(t):  # a NaN in the heap is never popped: the loop would spin forever
            raise ValueError(f"event time must be finite, got {t!r} (event kind {kind})")
        same = self._at.get(t)
        if same is None:
            self._at[t] = [(t, kind, payload)]
            heapq.heappush(self.times, t)
        else:
            same.append((t, kind, payload))

    def pop(self) -> tuple[float, int, Any]:
        """The next event: (its time, kind, payload)."""
        t = self.times[0]
        same = self._at[t]
        if len(same) > 1:
            return same.pop(0)
        heapq.heappop(self.times)
        del self._at[t]
        return same[0]
