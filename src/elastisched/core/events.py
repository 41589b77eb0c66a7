"""Events that flow from a backend (simulated or real) into the engine, and actions that flow back."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from elastisched.core.types import Allocation, JobId


@dataclass(frozen=True, slots=True)
class JobFinished:
    time: float
    job_id: JobId


@dataclass(frozen=True, slots=True)
class JobFailed:
    time: float
    job_id: JobId
    reason: str


Event = JobFinished | JobFailed


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
