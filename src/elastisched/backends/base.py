"""The Backend protocol (DESIGN.md "Interfaces"): actions in, events out.

The daemon owns job states and the engine; a backend only turns actions into running workers and reports
what happened to them. Backend-specific events extend `core.events` with the facts a real body has and
the simulator does not (a generation started, a failed generation was retried from its checkpoint).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from elastisched.core.events import Action, JobFailed, JobFinished
from elastisched.core.types import JobId


@dataclass(frozen=True, slots=True)
class JobStarted:
    """Generation `generation` of a job has live workers (after launch, resize, retry or adoption)."""

    time: float
    job_id: JobId
    generation: int
    adopted: bool = False


@dataclass(frozen=True, slots=True)
class JobRetried:
    """A generation failed and was relaunched from the last checkpoint (bounded retries)."""

    time: float
    job_id: JobId
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class JobHints:
    """The newest line a running job's rank 0 wrote to `hints.jsonl` (train library, AdaptDL's hint keys):
    measured progress (optimizer steps, epoch, global batch) and throughput, fed to the policy's snapshot."""

    time: float
    job_id: JobId
    generation: int
    step: int
    epoch: int
    global_batch: int | None
    world_size: int
    throughput: float | None = None


BackendEvent = JobStarted | JobRetried | JobFinished | JobFailed | JobHints


class Backend(Protocol):
    def apply(self, actions: Sequence[Action]) -> None:
        """Make the running workers match the actions (LAUNCH / RESIZE / SUSPEND); persist first."""
        ...

    def cancel(self, job_id: JobId) -> None:
        """Stop a job's workers for good (checkpointed stop, then kill after the grace period)."""
        ...

    def poll(self) -> list[BackendEvent]:
        """Events since the last poll: finished, failed, retried, started, hints."""
        ...

    def recover(self) -> list[BackendEvent]:
        """After a service restart: adopt live workers recorded in the store, relaunch lost ones."""
        ...

    def close(self) -> None:
        """Release resources; workers keep running (a restarted service adopts them)."""
        ...
