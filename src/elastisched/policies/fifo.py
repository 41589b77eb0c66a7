"""FIFO: first come, first served, non-preemptive, no backfilling — the classic baseline (Lyra's baseline)."""

from __future__ import annotations

from elastisched.core.types import Allocation, ClusterSnapshot, Decision
from elastisched.policies._common import fits, take
from elastisched.policies.base import Policy, PolicyContext, register

MAX_REASONS = 1000  # cap the REASON bookkeeping on very deep queues


@register
class FifoPolicy(Policy):
    name = "fifo"
    description = "First come, first served; a job that does not fit blocks the queue behind it."
    interval = None
    needs_progress = False

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        free = snap.capacity_by_type()
        allocs: dict[str, Allocation] = {}
        pending = []
        for jid, job in snap.jobs.items():
            if job.allocation.gpus:
                allocs[jid] = job.allocation  # keep as is (identity lets the engine skip it cheaply)
                take(free, snap, job.allocation)
            else:
                pending.append(jid)
        reasons: dict[str, str] = {}
        blocked = False
        for jid in pending:
            spec = snap.jobs[jid].spec
            if not blocked:
                t = fits(free, spec.gpu_types, spec.num_gpus)
                if t is not None:
                    allocs[jid] = Allocation(num_gpus=spec.num_gpus, gpu_type=t)
                    free[t] -= spec.num_gpus
                    continue
                blocked = True
                reasons[jid] = "Resources"
            elif len(reasons) < MAX_REASONS:
                reasons[jid] = "Priority"
            else:
                break
        return Decision(allocs, reasons)
