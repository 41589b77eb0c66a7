"""The service's vocabularies besides job phases and pending reasons (`core.types`): how a generation ended,
why it was started, what a change of allocation costs, and the states of generations, loans and reclaims.

Each is a StrEnum, so a member compares equal to its text and is written as that text to the store, JSON
and CSV: the bytes on disk do not change, only the place the words are decided in.
"""

from __future__ import annotations

from enum import StrEnum


class GenerationOutcome(StrEnum):
    """How a generation (one launch of a job's workers) ended, as a backend reports it."""

    SUCCEEDED = "succeeded"  # the job is done (rank 0 finished its work)
    FAILED = "failed"  # a rank failed: the daemon retries from the checkpoint or fails the job
    LAUNCH_FAILED = "launch_failed"  # its workers could not be started: the job fails, never the service
    INTERRUPTED = "interrupted"  # stopped by a signal nobody asked for, after a checkpoint
    LOST = "lost"  # gone without a trace while the service was down, or a stop cut short (resumes)
    STOPPED = "stopped"  # the stop the daemon asked for
    CANCELLED = "cancelled"  # the cancel the daemon asked for


class Cause(StrEnum):
    """Why a generation was started."""

    LAUNCH = "launch"  # the job's first start
    RESIZE = "resize"  # a running job moved to other GPUs / another size
    RESUME = "resume"  # a suspended (preempted / reclaimed) job continues from its checkpoint
    RETRY = "retry"  # a failed generation is started again from its checkpoint


class LengthKnowledge(StrEnum):
    """What a policy reads about how long a job will run (`Policy.knows_length`, shown by `policies`): nothing
    (attained service, goodput only), the length the job declared (`JobView.declared_work`: epochs or steps as
    a user submits them, noisy in the simulator when asked), or the true remaining work (`JobView.total_work`,
    an oracle no live service has)."""

    NOTHING = "nothing"
    DECLARED = "declared length"
    TRUTH = "true remaining work"


class ChangeKind(StrEnum):
    """What a change of allocation costs (`engine.jobstate.change_kind`, the one rule of both bodies)."""

    STOP = "stop"  # to no GPUs
    LAUNCH = "launch"  # from no GPUs
    RECONFIGURE = "reconfigure"  # batch / accumulation only, on the same GPUs: in place, not a restart
    RESIZE = "resize"  # keeps some of its GPUs
    RESTART = "restart"  # keeps none


class GenerationState(StrEnum):
    """Where a generation's workers are."""

    PLANNED = "PLANNED"  # recorded, not started yet
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"  # a stop was asked for
    EXITED = "EXITED"  # ended (its `GenerationOutcome` says how)


class LoanState(StrEnum):
    """Where a loanable (inference) server is."""

    LOANED = "LOANED"  # on loan to training
    RECLAIMING = "RECLAIMING"  # asked back, being vacated
    RETURNED = "RETURNED"  # back with inference


class RequestState(StrEnum):
    """A reclaim request's or a loan offer's progress."""

    PENDING = "PENDING"
    VACATING = "VACATING"  # reclaims only: jobs are being moved off the servers
    DONE = "DONE"
