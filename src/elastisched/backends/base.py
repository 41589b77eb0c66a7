"""The Backend protocol (DESIGN.md "Interfaces"): actions in, events out.

The daemon owns job states, the engine and the store (the single writer); a backend only turns actions into
running workers and reports what happened to them. It never reads or writes the store: an action carries
its `LaunchSpec`, and after a service restart the daemon hands `recover` the generations the store says
should exist. Backend-specific events extend `core.events` with the facts a real body has and the
simulator does not (a generation started with these processes, a generation ended and how).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from elastisched.core.enums import GenerationOutcome
from elastisched.core.events import Action, ActionKind, JobFailed, JobFinished, LaunchSpec
from elastisched.core.types import Allocation, JobId, NodeView


@dataclass(frozen=True, slots=True)
class JobStarted:
    """Generation `generation` of a job has live workers (after launch, resize, retry or adoption): their
    (PID, start ticks) per rank, CUDA device per rank and rendezvous port, for the daemon to record."""

    time: float
    job_id: JobId
    generation: int
    adopted: bool = False
    pids: tuple[tuple[int, int | None], ...] = ()
    devices: tuple[int | None, ...] = ()
    port: int | None = None
    external_id: str = ""  # the scheduler's own id of this generation (`slurm:1234`), shown by `describe`


# How a generation ended. succeeded: the job is done (rank 0 finished its work); failed: a rank failed (the
# daemon retries from the checkpoint or fails the job); launch_failed: its workers could not be started (the
# job fails with the reason, never the service); interrupted: stopped by a signal nobody asked for, after a
# checkpoint; lost: gone without a trace while the service was down, or a stop cut short (both resume from
# the checkpoint); stopped / cancelled: the stop the daemon asked for.
OUTCOMES = tuple(GenerationOutcome)  # the values, in `core.enums.GenerationOutcome` order


@dataclass(frozen=True, slots=True)
class GenerationEnded:
    time: float
    job_id: JobId
    generation: int
    outcome: str  # a GenerationOutcome
    exit_codes: tuple[int | None, ...] = ()
    reason: str = ""


@dataclass(frozen=True, slots=True)
class GenerationRecord:
    """A generation the store says was planned or running when the service stopped (for `recover`). `keep`:
    the daemon still wants it running (its job is active, not held or cancelled, and this is its newest
    generation); otherwise any of its workers still alive are stopped."""

    job_id: JobId
    generation: int
    token: str
    allocation: Allocation
    state: str  # PLANNED | RUNNING | STOPPING
    pids: tuple[tuple[int, int | None], ...]
    devices: tuple[int | None, ...]
    keep: bool


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
    # gradient statistics of a statistics step (AdaptDL's gradParams): |E g|² and tr(Σ) per sample; None otherwise
    grad_sqr: float | None = None
    grad_var: float | None = None


@dataclass(frozen=True, slots=True)
class NodesChanged:
    """The backend's inventory changed (a Ray node joined or left): `nodes` are the training nodes now,
    `lost` the names of nodes (training or loaned) that are gone. Jobs placed on a lost node are suspended
    by the daemon (their generation is down) and the engine places them again from their checkpoint."""

    time: float
    nodes: tuple[NodeView, ...]
    lost: tuple[str, ...] = ()
    job_id: JobId = ""  # no job: keeps the daemon's per-event error message uniform


BackendEvent = JobStarted | JobFinished | JobFailed | JobHints | GenerationEnded | NodesChanged


class Backend(Protocol):
    def apply(self, actions: Sequence[Action]) -> None:
        """Make the running workers match the actions (LAUNCH / RESIZE carry their `LaunchSpec`; SUSPEND)."""
        ...

    def cancel(self, job_id: JobId) -> None:
        """Stop a job's workers for good (checkpointed stop, then kill after the grace period)."""
        ...

    def poll(self) -> list[BackendEvent]:
        """Events since the last poll: started, generation ended, hints (and, for simple backends, finished /
        failed)."""
        ...

    def recover(self, generations: Sequence[GenerationRecord]) -> list[BackendEvent]:
        """After a service restart: adopt the live workers of the generations to keep (found by recorded PID
        or by launch token), stop those of the others, report the ones that ended or were lost."""
        ...

    def close(self) -> None:
        """Release resources; workers keep running (a restarted service adopts them)."""
        ...

    # Optional capabilities: every backend has them; `BackendBase` gives the answer of one that lacks them.
    def log_paths(self, job_id: JobId) -> list[Path]:
        """The job's log files in generation, then rank order (the API's logs); [] when it keeps none."""
        ...

    def loanable(self) -> list[NodeView] | None:
        """The real servers a loan offer may name (Ray's `loanable` pool), or None when loans are virtual
        nodes the service names itself (`loan-<type>-<k>`, of the size the offer says)."""
        ...

    def set_batch(self, job_id: JobId, batch_size: int) -> None:
        """Hand running workers a new global batch (an in-place change, no relaunch); a no-op where workers
        have no such channel."""
        ...

    def lent(self, node_ids: Sequence[str]) -> None:
        """The servers on loan to training now, told whenever that set changes (Slurm drains the ones that went
        back); a no-op where the backend has nothing to do about loans."""
        ...


class BackendBase:
    """The defaults of the optional capabilities: no logs, virtual loans, no in-place batch channel. A backend
    subclasses it and overrides what it can do, so the service calls every capability without probing."""

    def log_paths(self, job_id: JobId) -> list[Path]:
        return []

    def loanable(self) -> list[NodeView] | None:
        return None

    def set_batch(self, job_id: JobId, batch_size: int) -> None:
        return None

    def lent(self, node_ids: Sequence[str]) -> None:
        return None


def stops_then_launches(actions: Sequence[Action]) -> tuple[list[JobId], list[tuple[Action, LaunchSpec]]]:
    """A round's actions in the order every process backend applies them: the jobs to stop first (resized and
    suspended ones, stopped together so they checkpoint in parallel), then the launches (new jobs and the resized
    ones' next generation), each with its launch spec, whose absence is an error naming the job."""
    stops = [a.job_id for a in actions if a.kind in (ActionKind.RESIZE, ActionKind.SUSPEND)]
    launches = []
    for a in actions:
        if a.kind in (ActionKind.LAUNCH, ActionKind.RESIZE):
            if a.launch is None:
                raise ValueError(f"job {a.job_id}: {a.kind.value} action without a launch spec")
            launches.append((a, a.launch))
    return stops, launches
