"""When things happen in a simulation: the arrivals in submission order, and the tick grid of a policy's rounds
(DESIGN.md "Simulation semantics"; docs/simulator.md)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

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
