"""Tiresias (NSDI'19) 2D-LAS with two queues, as configured in the Pollux artifact (`simulator/tiresias.py`).

- Jobs enter queue 0 in arrival order; a running job whose attained service (GPU-seconds) reaches the
  threshold (16 GPU-hours, the artifact's `_queue_threshold = 3600 * 16`) is demoted to the end of queue 1.
- Each round, jobs are admitted in queue order (queue 0, then 1) while their requested GPUs fit; a job that
  does not fit is skipped (later, smaller jobs may still run) and loses its GPUs if it had them.
- Starvation handling is off (the artifact's `_solve_starvation = 0`).
- Pending reasons (ours): RESOURCES for a job skipped because its GPUs are not free, INFEASIBLE for a job
  that can never fit (more GPUs than any type it may use has in the cluster; skipped like the others).
  Once no GPU is left the round stops, as the artifact's does: the jobs after that wait for PRIORITY (no
  reason), which keeps a round O(admitted jobs) on a long queue.
Reading: the artifact counts service by integer wall seconds since the job's last status change times its
GPU count; we use the engine's attained GPU-seconds, which is the same quantity without rounding.
"""

from __future__ import annotations

from typing import Any

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobSpec, NodeView, PendingReason
from elastisched.policies._common import can_ever_fit, fits, node_types
from elastisched.policies.base import Policy, PolicyContext, register

INF = float("inf")


@register
class TiresiasPolicy(Policy):
    name = "tiresias"
    description = "Tiresias 2D-LAS: two priority queues by attained GPU-time, preemptive, skips jobs that don't fit."
    interval = 60.0
    needs_progress = False

    def __init__(self, threshold_gpu_seconds: float = 3600.0 * 16) -> None:
        self.threshold = threshold_gpu_seconds
        self._q0: dict[str, None] = {}
        self._q1: dict[str, None] = {}
        self._fit_for: tuple[NodeView, ...] | None = None  # node set that `_fit` was computed for
        self._fit: dict[tuple[tuple[str, ...], int], bool] = {}  # (GPU types, GPUs) -> can ever fit

    def on_submit(self, spec: JobSpec, now: float) -> None:
        if spec.job_id not in self._q1:
            self._q0.setdefault(spec.job_id, None)

    def on_finish(self, job_id: str, now: float) -> None:
        self._q0.pop(job_id, None)
        self._q1.pop(job_id, None)

    def _sync(self, snap: ClusterSnapshot) -> None:
        """Catch up with jobs the hooks did not announce (e.g. a restored service)."""
        if len(snap.jobs) == len(self._q0) + len(self._q1):
            return
        for jid in snap.jobs:
            if jid not in self._q0 and jid not in self._q1:
                self._q0[jid] = None
        for q in (self._q0, self._q1):
            for jid in [j for j in q if j not in snap.jobs]:
                del q[jid]

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        self._sync(snap)
        now = snap.now
        thr = self.threshold
        q0 = self._q0
        # attained(now) written out (`d if d > 0.0 else 0.0` is max(0.0, d)): this loop and the one below run
        # for every running job every round
        demote = []
        for jid, v in snap.running_jobs().items():
            if jid in q0:
                d = now - v.updated_at
                if v.attained_service + (d if d > 0.0 else 0.0) * v.allocation.gpus >= thr:
                    demote.append(jid)
        for jid in demote:
            del q0[jid]
            self._q1[jid] = None
        free = snap.capacity_by_type()
        if self._fit_for is not snap.nodes:  # can_ever_fit depends only on the node set: memoised per set
            self._fit_for, self._fit = snap.nodes, {}
        fit = self._fit
        types_of = node_types(snap)
        total_free = sum(free.values())
        allocs: dict[str, Allocation] = {}
        reasons: dict[str, PendingReason] = {}
        wake = INF
        jobs = snap.jobs
        for q in (q0, self._q1):
            first = q is q0
            for jid in q:
                if total_free <= 0:
                    break
                job = jobs[jid]
                spec = job.spec
                need = spec.num_gpus
                key = (spec.gpu_types, need)
                ok = fit.get(key)
                if ok is None:
                    ok = fit[key] = can_ever_fit(snap.capacity_by_type(), spec.gpu_types, need)
                if not ok:
                    reasons[jid] = PendingReason.INFEASIBLE
                    continue
                cur = job.allocation
                if cur.gpus:
                    pl = cur.placement
                    t = types_of[pl[0][0]]
                    if free.get(t, 0) >= need:
                        allocs[jid] = cur
                        if len(pl) == 1:  # `take`, inlined; one node (most jobs): its type is `t`
                            free[t] -= pl[0][1]
                        else:
                            for n, g in pl:
                                tn = types_of.get(n)
                                if tn is not None:
                                    free[tn] -= g
                        total_free -= need
                        if first:
                            d = now - job.updated_at
                            w = now + (thr - (job.attained_service + (d if d > 0.0 else 0.0) * cur.gpus)) / need
                            if w < wake:  # min(wake, w)
                                wake = w
                        continue
                t2 = fits(free, spec.gpu_types, need)
                if t2 is not None:
                    allocs[jid] = Allocation(num_gpus=need, gpu_type=t2)
                    free[t2] -= need
                    total_free -= need
                    if first and now + thr / need < wake:
                        wake = now + thr / need
                else:
                    reasons[jid] = PendingReason.RESOURCES
        return Decision(allocs, reasons, next_round_at=wake)

    def state_dict(self) -> dict[str, Any]:
        return {"q0": list(self._q0), "q1": list(self._q1), "threshold": self.threshold}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._q0 = dict.fromkeys(state.get("q0", []))
        self._q1 = dict.fromkeys(state.get("q1", []))
        self.threshold = float(state.get("threshold", self.threshold))

