"""SRTF: preemptive shortest-remaining-time-first on the requested GPU count.

Remaining time = remaining work / goodput at the job's requested size and batch, predicted from the
measured profile. Jobs are admitted shortest first while they fit (smaller jobs may backfill). To avoid
thrashing on the restart cost, a running job is only preempted by a job whose remaining time is shorter by
more than `preempt_margin` × the restart cost (our rule; SRTF papers assume free preemption).
Each job is predicted with its own model (`JobView.model`, else `ctx.perf`); SRTF has no model-free
fallback, so a job without one is a `ConfigError` naming the job and its application. A job that can never
fit the cluster (more GPUs than any type it may use has) is INFEASIBLE.
"""

from __future__ import annotations

from elastisched.core.enums import LengthKnowledge
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobView, PendingReason
from elastisched.models.application import packed_shape
from elastisched.policies._common import can_ever_fit, fits, node_types, require_model, take
from elastisched.policies.base import Policy, PolicyContext, register


@register
class SrtfPolicy(Policy):
    name = "srtf"
    knows_length = LengthKnowledge.TRUTH  # remaining work = total_work − progress (an oracle)
    needs_perf_models = True
    description = "Shortest remaining time first (preemptive, oracle remaining time from measured profiles)."
    interval = 60.0

    def __init__(self, preempt_margin: float = 2.0) -> None:
        self.preempt_margin = preempt_margin

    def remaining_time(self, job: JobView, ctx: PolicyContext, per_node: int) -> float:
        app = require_model(job, ctx, self.name)
        cfg = app.batch_config(job.spec.num_gpus, job.spec.batch_size)
        shape = packed_shape(job.spec.num_gpus, per_node)
        gtype = next(iter(app.gpu_types))
        rate = app.goodput(gtype, shape, cfg, min(job.epoch, app.max_epochs - 1))
        t = (job.total_work - job.progress) / rate
        if not job.allocation.gpus:
            t += self.preempt_margin * app.restart_cost
        return t

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        per_node = max((n.num_gpus for n in snap.nodes), default=1)
        order = sorted(snap.jobs.values(), key=lambda j: (self.remaining_time(j, ctx, per_node), j.spec.submit_time))
        free = snap.capacity_by_type()
        capacity = snap.capacity_by_type()
        allocs: dict[str, Allocation] = {}
        reasons: dict[str, PendingReason] = {}
        types = node_types(snap)
        for job in order:
            need = job.spec.num_gpus
            if not can_ever_fit(capacity, job.spec.gpu_types, need):
                reasons[job.job_id] = PendingReason.INFEASIBLE
                continue
            cur = job.allocation
            if cur.gpus and free.get(types[cur.placement[0][0]], 0) >= need:
                allocs[job.job_id] = cur
                take(free, snap, cur)
                continue
            t = fits(free, job.spec.gpu_types, need)
            if t is not None:
                allocs[job.job_id] = Allocation(num_gpus=need, gpu_type=t)
                free[t] -= need
            else:
                reasons[job.job_id] = PendingReason.RESOURCES
        return Decision(allocs, reasons)
