"""FIFO: first come, first served, non-preemptive, no backfilling — the classic baseline (Lyra's baseline)."""

from __future__ import annotations

from elastisched.core.types import Allocation, ClusterSnapshot, Decision
from elastisched.policies._common import fits
from elastisched.policies.base import Policy, PolicyContext, register


@register
class FifoPolicy(Policy):
    name = "fifo"
    description = "First come, first served; a job that does not fit blocks the queue behind it."
    interval = None
    needs_progress = False

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        free = snap.free_by_type()
        running = snap.running_jobs()
        allocs: dict[str, Allocation] = {jid: j.allocation for jid, j in running.items()}
        reasons: dict[str, str] = {}
        blocked = False
        for jid, job in snap.jobs.items():
            if jid in running:
                continue
            spec = job.spec
            if not blocked:
                t = fits(free, spec.gpu_types, spec.num_gpus)
                if t is not None:
                    allocs[jid] = Allocation(num_gpus=spec.num_gpus, gpu_type=t)
                    free[t] -= spec.num_gpus
                    continue
                blocked = True
                reasons[jid] = "Resources"
            else:
                break  # everyone behind the blocked head waits for it ("Priority", the default reason)
        return Decision(allocs, reasons)
