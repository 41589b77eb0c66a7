"""One human sentence per `PendingReason` (core/types.py), for the people reading `logs`, the dashboard and
`GET /v1/reasons`: the enum's code says which case it is, the sentence says what the user can expect or do.

Kept out of core/types.py so the enum stays a bare vocabulary; a test checks that every member has a sentence.
Imports nothing heavy: the CLI's client commands use it.
"""

from __future__ import annotations

from elastisched.core.types import PendingReason

EXPLAIN: dict[str, str] = {
    PendingReason.PRIORITY: "waiting behind jobs the policy puts first (earlier, shorter or less served jobs)",
    PendingReason.RESOURCES: "waiting for free GPUs of a type it may use",
    PendingReason.PLACEMENT: "enough GPUs are free in total, but not on nodes that fit its shape",
    PendingReason.NOT_SELECTED: "the policy's search gave this round's GPUs to other jobs; it is reconsidered "
                                "every round",
    PendingReason.THROTTLED: "the policy limits how often the schedule changes; it waits for the next change",
    PendingReason.GPU_TYPE: "the free GPUs are of a type this job may not use",
    PendingReason.NO_PROFILE: "the policy needs a performance profile of the job's application and has none",
    PendingReason.INFEASIBLE: "can never fit the cluster as it is now (more GPUs, or a GPU type it lacks)",
    PendingReason.PREEMPTED: "stopped by the scheduler after a checkpoint; it queues again and resumes from it",
    PendingReason.HELD: "suspended by its user; `elastisched resume` queues it again",
    PendingReason.RESIZE_PENDING: "an admin resize that does not fit yet; it runs at that size once GPUs free up",
}


def explain(reason: str | None) -> str:
    """The sentence for a reason code ('' for none; the code itself for one this version does not know)."""
    if not reason:
        return ""
    return EXPLAIN.get(reason, reason)


def describe_reason(reason: str | None) -> str:
    """`Resources: waiting for free GPUs of a type it may use`, or 'no reason recorded yet'."""
    if not reason:
        return "no reason recorded yet (the scheduler has not considered it)"
    text = explain(reason)
    return reason if text == reason else f"{reason}: {text}"
