"""Events that flow from a backend (simulated or real) into the engine, and actions that flow back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from elastisched.core.enums import Cause
from elastisched.core.frozen import quick_init
from elastisched.core.types import Allocation, JobId, JobSpec


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
class LaunchSpec:
    """Everything a backend needs to start one generation of a job's workers, so that it never reads the
    service's store: what to run, which generation this is and why, the global batch, the job's own
    environment variables, a launch token that marks every worker of this generation (a restarted service
    finds them by it), and the elastisched user who submitted it (its workers run as that user's account)."""

    script: str
    args: tuple[str, ...]
    generation: int
    cause: Cause
    token: str
    batch_size: int | None = None  # global batch (None: the script's own)
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # the job as its policy sees it (application, work, duration): what a backend that models a run instead
    # of starting one needs (backends/fake.py); a backend that runs the script ignores it
    job: JobSpec | None = None
    user: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Action:
    """One change the engine wants. A live body fills `launch` for LAUNCH and RESIZE before a backend acts;
    the simulator does not need it."""

    kind: ActionKind
    job_id: JobId
    allocation: Allocation
    previous: Allocation
    launch: LaunchSpec | None = None
