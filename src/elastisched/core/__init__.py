"""Frozen types, events, clocks and errors. No I/O, no dependency on anything else in elastisched."""

from elastisched.core.clock import Clock, SimClock, WallClock
from elastisched.core.errors import (
    ConfigError,
    ElastischedError,
    InvariantViolation,
    UnknownPolicyError,
    WorkloadError,
)
from elastisched.core.events import Action, ActionKind, Event, JobFailed, JobFinished
from elastisched.core.types import (
    NO_ALLOCATION,
    Allocation,
    ClusterSnapshot,
    Decision,
    JobId,
    JobPhase,
    JobSpec,
    JobView,
    NodeId,
    NodeView,
    PendingReason,
    Pool,
)

__all__ = [
    "NO_ALLOCATION",
    "Action",
    "ActionKind",
    "Allocation",
    "Clock",
    "ClusterSnapshot",
    "ConfigError",
    "Decision",
    "ElastischedError",
    "Event",
    "InvariantViolation",
    "JobFailed",
    "JobFinished",
    "JobId",
    "JobPhase",
    "JobSpec",
    "JobView",
    "NodeId",
    "NodeView",
    "PendingReason",
    "Pool",
    "SimClock",
    "UnknownPolicyError",
    "WallClock",
    "WorkloadError",
]
