"""FIFO: first come, first served, non-preemptive, no backfilling — the classic baseline (Lyra's baseline).

A job that can never fit the cluster as it is now (more GPUs than any type it may use has in total) is
marked INFEASIBLE and passed over: it would otherwise block the queue for ever (issue 11). A job that fits
the cluster but not the free GPUs blocks everyone behind it, as FIFO without backfilling does.
"""

from __future__ import annotations

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, PendingReason
from elastisched.policies._common import can_ever_fit, fits
from elastisched.policies.base import Policy, PolicyContext, register


@register
class FifoPolicy(Policy):
    name = "fifo"
    description = "First come, first served; a job that does not fit blocks the queue behind it."
    interval = None
    needs_progress = False

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        free = snap.free_by_type()
        capacity = snap.capacity_by_type()
        running = snap.running_jobs()
        allocs: dict[str, Allocation] = {jid: j.allocation for jid, j in running.items()}
        reasons: dict[str, PendingReason] = {}
        blocked = False
        for jid, job in snap.jobs.items():
            if jid in running:
                continue
            spec = job.spec
            if not can_ever_fit(capacity, spec.gpu_types, spec.num_gpus):
                reasons[jid] = PendingReason.INFEASIBLE
                continue
            if blocked:
                continue  # waits behind the blocked head (PRIORITY, the default reason)
            t = fits(free, spec.gpu_types, spec.num_gpus)
            if t is not None:
                allocs[jid] = Allocation(num_gpus=spec.num_gpus, gpu_type=t)
                free[t] -= spec.num_gpus
                continue
            blocked = True
            reasons[jid] = PendingReason.RESOURCES
        return Decision(allocs, reasons)
