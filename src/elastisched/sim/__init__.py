"""The trace-driven simulator: a heap event loop and a simulated backend around the shared engine."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from elastisched.core.types import NodeView
from elastisched.loaning.timeline import LoanPlan
from elastisched.models.interp_cache import save_all
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy
from elastisched.sim.metrics import SimResult
from elastisched.sim.simulator import SimConfig, Simulator
from elastisched.workloads.schema import Workload

YOUNG_GC = 200_000  # allocations between young garbage collections while a simulation runs

__all__ = ["LoanPlan", "SimConfig", "SimResult", "Simulator", "simulate", "young_gc_only"]


def simulate(workload: Workload, policy: Policy, nodes: Sequence[NodeView], models: PerfModels,
             config: SimConfig | None = None) -> SimResult:
    """Run one simulation to completion and return its results. What it asked scipy's interpolators is saved
    when it ends, not only at exit: a pool's or Ray's worker may end without running `atexit`."""
    try:
        with young_gc_only():
            return Simulator(workload, policy, nodes, models, config).run()
    finally:
        save_all()


@contextmanager
def young_gc_only() -> Iterator[None]:
    """No full (oldest-generation) garbage collection while a simulation runs: its job states and views live
    for the whole run, and each full collection walks all of them again (the time it saves:
    `benchmarks/gc_effect.py`). Young collections still run, so garbage cycles a round makes are freed, but
    after `YOUNG_GC` allocations rather than 700: the views, allocations and actions of a round are mostly
    gone by then, so a young collection walks fewer objects per allocation (a few per cent of a replay)."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG_GC), old[1], 1 << 30)
    try:
        yield
    finally:
        gc.set_threshold(*old)
