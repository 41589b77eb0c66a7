"""Frozen types, events, clocks and errors. No I/O, no dependency on anything else in elastisched.

The names below are imported from their module on first use (PEP 562), so that `from elastisched.core.errors
import ConfigError`, which every command line path runs, does not also build every frozen type and event.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elastisched.core.clock import Clock, SimClock, WallClock
    from elastisched.core.enums import Cause, ChangeKind, GenerationOutcome, GenerationState, LoanState, RequestState
    from elastisched.core.errors import (
        ConfigError,
        ElastischedError,
        InvariantViolation,
        UnknownPolicyError,
        WorkloadError,
    )
    from elastisched.core.events import Action, ActionKind, Event, JobFailed, JobFinished
    from elastisched.core.nodes import NodeSet, node_set
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

_WHERE = {
    "clock": ("Clock", "SimClock", "WallClock"),
    "errors": ("ConfigError", "ElastischedError", "InvariantViolation", "UnknownPolicyError", "WorkloadError"),
    "enums": ("Cause", "ChangeKind", "GenerationOutcome", "GenerationState", "LoanState", "RequestState"),
    "events": ("Action", "ActionKind", "Event", "JobFailed", "JobFinished"),
    "nodes": ("NodeSet", "node_set"),
    "types": ("NO_ALLOCATION", "Allocation", "ClusterSnapshot", "Decision", "JobId", "JobPhase", "JobSpec", "JobView",
              "NodeId", "NodeView", "PendingReason", "Pool"),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "NO_ALLOCATION",
    "Action",
    "ActionKind",
    "Allocation",
    "Cause",
    "ChangeKind",
    "Clock",
    "ClusterSnapshot",
    "ConfigError",
    "Decision",
    "ElastischedError",
    "Event",
    "GenerationOutcome",
    "GenerationState",
    "InvariantViolation",
    "JobFailed",
    "JobFinished",
    "JobId",
    "JobPhase",
    "JobSpec",
    "JobView",
    "LoanState",
    "NodeId",
    "NodeSet",
    "NodeView",
    "PendingReason",
    "Pool",
    "RequestState",
    "SimClock",
    "UnknownPolicyError",
    "WallClock",
    "WorkloadError",
    "node_set",
]


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
