"""Results of a simulation: per-job table, summary figures, utilisation timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from elastisched import __version__
from elastisched.core.types import PendingReason

if TYPE_CHECKING:
    from elastisched.sim.simulator import Simulator


@dataclass
class SimResult:
    summary: dict[str, Any]
    jobs: pd.DataFrame
    timeline: pd.DataFrame  # t, busy_gpus, total_gpus, loaned_servers
    reclaims: list[dict[str, Any]] = field(default_factory=list)


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def collect(sim: Simulator, wall: float) -> SimResult:
    rows = []
    for j in sorted(sim.done, key=lambda j: (j.spec.submit_time, j.spec.job_id)):
        rows.append({
            "job": j.spec.job_id, "application": j.spec.application, "submit": j.spec.submit_time,
            "start": j.start_time, "end": j.end_time, "jct": j.end_time - j.spec.submit_time,
            "queue": (j.start_time or j.end_time) - j.spec.submit_time, "requested_gpus": j.spec.num_gpus,
            "gpu_seconds": j.attained, "avg_gpus": j.attained / j.run_time if j.run_time else 0.0,
            "run_time": j.run_time, "restarts": max(j.launches - 1, 0), "preemptions": j.preemptions,
            "state": j.phase(j.end_time).value,
            # why it last waited (a PendingReason value); a job that waited without one: behind higher priority
            "reason": j.reason or (PendingReason.PRIORITY.value if (j.start_time or j.end_time) > j.spec.submit_time
                                   else ""),
        })
    jobs = pd.DataFrame(rows, columns=["job", "application", "submit", "start", "end", "jct", "queue",
                                       "requested_gpus", "gpu_seconds", "avg_gpus", "run_time", "restarts",
                                       "preemptions", "state", "reason"])
    tl = pd.DataFrame(sim.timeline, columns=["t", "busy_gpus", "total_gpus", "loaned_servers"])
    jct = jobs["jct"].to_numpy(float)
    t0 = min((s.submit_time for s in sim.workload.jobs), default=0.0)
    makespan = float(jobs["end"].max() - t0) if len(jobs) else 0.0
    # GPU-time utilisation: busy GPU-seconds / available GPU-seconds over the makespan
    if len(tl) > 1:
        dt = np.diff(np.append(tl["t"].to_numpy(float), sim.now))
        avail = float(np.sum(dt * tl["total_gpus"].to_numpy(float)))
        busy = float(np.sum(dt * tl["busy_gpus"].to_numpy(float)))
    else:
        avail = busy = 0.0
    lat = np.array(sim.latencies) * 1000.0
    summary = {
        "policy": sim.policy.name, "workload": sim.workload.name, "workload_digest": sim.workload.digest,
        "n_jobs": len(sim.workload.jobs), "n_finished": len(jobs), "unfinished": sim.stalled[:20],
        "avg_jct": float(jct.mean()) if len(jct) else float("nan"), "median_jct": _pct(jct, 50),
        "p95_jct": _pct(jct, 95), "p99_jct": _pct(jct, 99),
        "avg_queue": float(jobs["queue"].mean()) if len(jobs) else float("nan"),
        "p95_queue": _pct(jobs["queue"].to_numpy(float), 95),
        "makespan": makespan, "gpu_utilization": busy / avail if avail else 0.0,
        "restarts": int(jobs["restarts"].sum()), "preemptions": int(jobs["preemptions"].sum()),
        "reclaims": len(sim.reclaims), "reclaim_preemptions": int(sum(r["preempted"] for r in sim.reclaims)),
        "rounds": len(sim.latencies), "events": sim.events,
        "decision_ms_p50": _pct(lat, 50), "decision_ms_p99": _pct(lat, 99),
        "decision_ms_max": float(lat.max()) if len(lat) else 0.0,
        "wall_seconds": wall, "seed": sim.cfg.seed, "version": __version__,
        "cluster": {"nodes": len(sim.train_nodes), "gpus": sum(n.num_gpus for n in sim.train_nodes),
                    "types": sorted({n.gpu_type for n in sim.train_nodes})},
        "policy_config": {"interval": sim.policy.interval, **sim.ctx.options},
    }
    return SimResult(summary, jobs, tl, list(sim.reclaims))
