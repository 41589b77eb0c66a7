"""Events that flow from a backend (simulated or real) into the engine, and actions that flow back."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from elastisched.core.types import Allocation, JobId, JobSpec, NodeId, NodeView


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    time: float
    spec: JobSpec


@dataclass(frozen=True, slots=True)
class JobFinished:
    time: float
    job_id: JobId


@dataclass(frozen=True, slots=True)
class JobFailed:
    time: float
    job_id: JobId
    reason: str


@dataclass(frozen=True, slots=True)
class NodesChanged:
    time: float
    nodes: tuple[NodeView, ...]


@dataclass(frozen=True, slots=True)
class Hints:
    """Measurements a running job reports (throughput, gradient statistics)."""

    time: float
    job_id: JobId
    gpus: int
    throughput: float
    grad_sqr: float | None = None
    grad_var: float | None = None


Event = JobSubmitted | JobFinished | JobFailed | NodesChanged | Hints


class ActionKind(StrEnum):
    LAUNCH = "launch"  # not running → running
    RESIZE = "resize"  # running → running elsewhere / other size / other batch (checkpoint-restart)
    SUSPEND = "suspend"  # running → not running (preemption, checkpointed)


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    job_id: JobId
    allocation: Allocation
    previous: Allocation


@dataclass(frozen=True, slots=True)
class ReturnNodes:
    """Give loaned servers back to the inference cluster."""

    nodes: tuple[NodeId, ...]
