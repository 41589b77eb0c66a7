"""Optimus (EuroSys'18) as configured in the Pollux artifact (`simulator/optimus.py`).

Every job gets one GPU (in arrival order while GPUs last; a job stays on one GPU type, the one it runs on
or else the allowed type with most free GPUs); the remaining GPUs go one at a time to the job
with the largest marginal reduction of its predicted remaining time, `(t(n) − t(n+1)) × remaining steps`,
up to `target batch // min local batch` GPUs (ncf: 1). The global batch stays the job's own.
Like the artifact, the step-time prediction uses the measured profile (an oracle) and counts at least one
accumulation step on a single GPU; remaining steps come from the validation logs at the target batch.
Jobs whose GPU count is unchanged keep their nodes; the others are re-placed smallest first.
Ours: a job the workload marks elastic starts at its `min_gpus` instead of one GPU (the artifact's jobs all
start at one); each job is predicted with its own model (`JobView.model`, else `ctx.perf`) and, Optimus
having no model-free fallback, a job without one is a `ConfigError` naming the job and its application.
Jobs left without GPUs wait for RESOURCES, or are INFEASIBLE when no type they may use has enough GPUs
in the cluster at all.
"""

from __future__ import annotations

import heapq
import math

from elastisched.core.enums import LengthKnowledge
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobView, PendingReason
from elastisched.models.application import Application, packed_shape
from elastisched.policies._common import node_types, require_model, start_type, wait_reason
from elastisched.policies.base import Policy, PolicyContext, register


@register
class OptimusPolicy(Policy):
    name = "optimus"
    knows_length = LengthKnowledge.TRUTH  # remaining steps from the application's epochs × work_scale (an oracle)
    needs_perf_models = True
    description = "Optimus: greedy GPU-by-GPU allocation by marginal reduction of predicted remaining time."
    interval = 60.0
    elastic = True

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        per_node = max((n.num_gpus for n in snap.nodes), default=1)
        free = snap.capacity_by_type()
        capacity = snap.capacity_by_type()
        reasons: dict[str, PendingReason] = {}
        n: dict[str, int] = {}
        gtype: dict[str, str] = {}
        heap: list[tuple[float, int, str]] = []
        order = {jid: i for i, jid in enumerate(snap.jobs)}
        info: dict[str, tuple[Application, JobView, float, int]] = {}
        for jid, job in snap.jobs.items():
            app = require_model(job, ctx, self.name)
            spec = job.spec
            first, t = start_type(job, node_types(snap), free)
            if t is None:
                reasons[jid] = wait_reason(capacity, spec.gpu_types, first)
                continue
            remaining = remaining_steps(app, job)
            cap = 1 if app.name == "ncf" else max(1, spec.batch_size // app.min_local_bsz)
            if spec.elastic and spec.max_gpus:
                cap = min(cap, spec.max_gpus)
            info[jid] = (app, job, remaining, max(cap, first))
            n[jid], gtype[jid] = first, t
            free[t] -= first
        for jid, (app, job, remaining, cap) in info.items():
            g = self._gain(app, job, n[jid], cap, remaining, per_node)
            if g > 0:
                heapq.heappush(heap, (-g, order[jid], jid))
        while heap and any(v > 0 for v in free.values()):
            _, _, jid = heapq.heappop(heap)
            if free[gtype[jid]] < 1:
                continue  # no GPU of this job's type left
            app, job, remaining, cap = info[jid]
            n[jid] += 1
            free[gtype[jid]] -= 1
            g = self._gain(app, job, n[jid], cap, remaining, per_node)
            if g > 0:
                heapq.heappush(heap, (-g, order[jid], jid))
        allocs: dict[str, Allocation] = {}
        for jid in sorted(n, key=lambda j: (n[j], order[j])):
            allocs[jid] = Allocation(num_gpus=n[jid], gpu_type=gtype[jid])
        return Decision(allocs, reasons)

    @staticmethod
    def _gain(app: Application, job: JobView, k: int, cap: int, remaining: float, per_node: int) -> float:
        if k + 1 > cap:
            return 0.0
        return (predict_step_time(app, job.spec.batch_size, k, per_node)
                - predict_step_time(app, job.spec.batch_size, k + 1, per_node)) * remaining


def remaining_steps(app: Application, job: JobView) -> float:
    """Optimizer steps left at the target batch (artifact: `remaining` from `get_iteration`)."""
    last = app.max_epochs - 1
    if job.epoch >= last:
        return 1.0
    bs = job.spec.batch_size
    return (app.iterations(bs, last) - app.iterations(bs, job.epoch)) * job.spec.work_scale


def predict_step_time(app: Application, batch: int, k: int, per_node: int) -> float:
    local = math.ceil(batch / k - 1e-8)
    accum = math.ceil(local / app.max_local_bsz - 1e-8) - 1
    if k == 1:
        accum = max(1, accum)
    micro = math.ceil(local / (accum + 1) - 1e-8)
    micro = max(1, min(micro, int(app.max_batch_size / (k * (accum + 1)))))
    step, sync = app.model(next(iter(app.gpu_types))).step_sync(packed_shape(k, per_node), float(micro))
    return step + (step - sync) * accum
