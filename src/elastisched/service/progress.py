"""Engine-owned progress of live jobs, so that the service's job views carry what the simulator's carry.

For each job with a profiled application: [progress, wall time it refers to], in the models' units
(reference steps), integrated from the models' goodput while the job runs (no progress during the restart
cost after each generation starts), and reset to measured values when the job's hints arrive (steps x the
models' gain at the job's batch). Measured throughput per world size goes to `observed_throughput`.
Held in memory: after a service restart a job's progress comes back with its next hint.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from elastisched.backends.base import JobHints
from elastisched.core.types import ClusterSnapshot, JobView


class ProgressTracker:
    def __init__(self) -> None:
        self.progress: dict[str, list[float]] = {}
        self.started: dict[str, tuple[float, bool]] = {}  # job -> (wall time its generation started, adopted)
        self.observed: dict[str, dict[int, float]] = {}

    def generation_started(self, job_id: str, t: float, adopted: bool) -> None:
        self.started[job_id] = (t, adopted)

    def forget(self, job_id: str) -> None:
        for d in (self.progress, self.started, self.observed):
            d.pop(job_id, None)  # type: ignore[attr-defined]

    def with_progress(self, snap: ClusterSnapshot, perf: Any) -> ClusterSnapshot:
        """The snapshot with progress, total work and epoch of every job (what the simulator's views carry),
        from the models and the jobs' hints; needed by policies that predict remaining time (Lyra, SRTF)."""
        now = time.time()
        gtype = {n.node_id: n.gpu_type for n in snap.nodes}
        jobs: dict[str, JobView] = {}
        for jid, v in snap.jobs.items():
            app = perf.app(v.spec.application)
            total = app.total_work * v.spec.work_scale
            place = v.allocation.placement
            began, adopted = self.started.get(jid, (now, True))
            st = self.progress.setdefault(jid, [0.0, began if place else now])
            if place and now > st[1]:
                t0 = max(st[1], began if adopted else began + app.restart_cost)
                if now > t0 and place[0][0] in gtype:
                    cfg = app.batch_config(v.allocation.gpus, v.allocation.batch_size or v.spec.batch_size)
                    epoch = app.epoch_at(st[0], v.spec.work_scale)
                    rate = app.goodput(gtype[place[0][0]], tuple(k for _, k in place), cfg, epoch)
                    st[0] = min(total, st[0] + rate * (now - t0))
            st[1] = now
            jobs[jid] = dataclasses.replace(
                v, progress=st[0], total_work=total, epoch=min(app.epoch_at(st[0], v.spec.work_scale), app.max_epochs),
                observed_throughput=dict(self.observed.get(jid, {})))
        return ClusterSnapshot(snap.now, snap.nodes, jobs, snap.reclaim_demand)

    def hinted(self, h: JobHints, row: dict[str, Any], perf: Any) -> None:
        """Measured progress from a job's hints replaces the models' estimate (steps × the models' gain at
        the job's batch); the measured throughput goes to `JobView.observed_throughput`."""
        if h.throughput:
            self.observed.setdefault(h.job_id, {})[h.world_size] = float(h.throughput)
        app_name = (row.get("spec") or {}).get("application")
        if perf is None or not app_name or app_name not in perf:
            return
        app = perf.app(app_name)
        batch = h.global_batch or int(row.get("batch_size") or app.init_batch_size)
        epoch = app.epoch_at(self.progress.get(h.job_id, [0.0])[0], float(row["spec"].get("work_scale") or 1.0))
        self.progress[h.job_id] = [h.step * app.efficiency.gain(batch, epoch), h.time]
