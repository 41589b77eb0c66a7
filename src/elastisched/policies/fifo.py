"""FIFO: first come, first served, non-preemptive, no backfilling — the classic baseline (Lyra's baseline).

A job that can never fit the cluster as it is now (more GPUs than any type it may use has in total) is
marked INFEASIBLE and passed over when the queue reaches it: it would otherwise block the queue for ever
(issue 11). A job that fits the cluster but not the free GPUs blocks everyone behind it (RESOURCES), as FIFO
without backfilling does; the jobs behind it wait for PRIORITY (no reason) and are not looked at. A round
looks only at the pending jobs up to the blocked head (`ClusterSnapshot.pending_jobs`) and leaves every
running job its allocation (`KeptAllocations`), so it costs O(jobs started) however long the queue is and
however many run (infeasible ones among them are marked when they reach the head).
"""

from __future__ import annotations

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, KeptAllocations, NodeView, PendingReason
from elastisched.policies._common import can_ever_fit, fits
from elastisched.policies.base import Policy, PolicyContext, register


@register
class FifoPolicy(Policy):
    name = "fifo"
    description = "First come, first served; a job that does not fit blocks the queue behind it."
    interval = None
    needs_progress = False
    idle_without_pending = True  # nothing pending: every running job keeps its GPUs, nothing to say
    idle_while_blocked = True  # a blocked head blocks the arrivals behind it until GPUs are freed

    def __init__(self) -> None:
        self._fit_for: tuple[NodeView, ...] | None = None  # node set that `_fit` was computed for
        self._fit: dict[tuple[tuple[str, ...], int], bool] = {}  # (GPU types, GPUs) -> can ever fit

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        free = snap.free_by_type()
        if self._fit_for is not snap.nodes:  # can_ever_fit depends only on the node set: memoised per set
            self._fit_for, self._fit = snap.nodes, {}
        fit = self._fit
        running = snap.running_jobs()
        added: dict[str, Allocation] = {}  # every running job keeps its allocation (non-preemptive)
        reasons: dict[str, PendingReason] = {}
        for jid, job in snap.pending_jobs().items():
            spec = job.spec
            key = (spec.gpu_types, spec.num_gpus)
            ok = fit.get(key)
            if ok is None:
                ok = fit[key] = can_ever_fit(snap.capacity_by_type(), spec.gpu_types, spec.num_gpus)
            if not ok:
                reasons[jid] = PendingReason.INFEASIBLE
                continue
            t = fits(free, spec.gpu_types, spec.num_gpus)
            if t is not None:
                added[jid] = Allocation(num_gpus=spec.num_gpus, gpu_type=t)
                free[t] -= spec.num_gpus
                continue
            reasons[jid] = PendingReason.RESOURCES
            break  # everyone behind the blocked head waits for it (PRIORITY, the default reason)
        return Decision(KeptAllocations(running, added), reasons)
