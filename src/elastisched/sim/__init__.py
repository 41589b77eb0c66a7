"""The trace-driven simulator: a heap event loop and a simulated backend around the shared engine."""

from __future__ import annotations

from collections.abc import Sequence

from elastisched.core.types import NodeView
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy
from elastisched.sim.metrics import SimResult
from elastisched.sim.simulator import LoanTimeline, SimConfig, Simulator
from elastisched.workloads.schema import Workload

__all__ = ["LoanTimeline", "SimConfig", "SimResult", "Simulator", "simulate"]


def simulate(workload: Workload, policy: Policy, nodes: Sequence[NodeView], models: PerfModels,
             config: SimConfig | None = None) -> SimResult:
    """Run one simulation to completion and return its results."""
    return Simulator(workload, policy, nodes, models, config).run()
