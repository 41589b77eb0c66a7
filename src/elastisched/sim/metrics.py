"""Results of a simulation: per-job table, summary figures, utilisation timeline.

Per job, the JCT decomposition (`sim.decompose`: queued, restarting, running = best + loss_gpus + loss_batch);
per policy (summary): GPU-hours running, restarting and idle.

Batch guard rail (issue 21): per job `mean_batch`, the global batch weighted by the seconds it held GPUs at it,
beside `requested_batch`; the summary's `mean_batch_vs_request` is the mean of their ratio over finished jobs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from elastisched import __version__, native
from elastisched.core.nodes import node_set
from elastisched.core.types import JobPhase, NodeView, PendingReason
from elastisched.engine.jobstate import JobState
from elastisched.policies.base import Policy, PolicyContext
from elastisched.sim.decompose import DECOMPOSITION, Batch, decompose
from elastisched.sim.table import Rows, Table
from elastisched.workloads.schema import Workload

if TYPE_CHECKING:
    import pandas as pd


class RunRecord(Protocol):
    """What `collect` reads of a finished run (the `Simulator`; named by shape so that the simulator imports
    this module and not the other way round)."""

    @property
    def now(self) -> float: ...
    train_nodes: tuple[NodeView, ...]
    job_rows: Table
    timeline: Table
    latencies: Sequence[float]
    rounds_skipped: int
    reclaims: list[dict[str, Any]]
    events: int
    stalled: list[str]
    workload: Workload
    policy: Policy
    ctx: PolicyContext
    cfg: Any  # the run's `SimConfig` (its `seed`; that class lives in the simulator, which imports this module)


@dataclass
class SimResult:
    """`jobs` and `timeline` are DataFrames built on first use (pandas is not imported by a run that only
    writes files: `job_rows.to_csv()`)."""

    summary: dict[str, Any]
    job_rows: Rows
    timeline_rows: Rows  # t, busy_gpus, total_gpus, loaned_servers
    reclaims: list[dict[str, Any]] = field(default_factory=list)

    @property
    def jobs(self) -> pd.DataFrame:
        return self.job_rows.frame

    @property
    def timeline(self) -> pd.DataFrame:
        return self.timeline_rows.frame


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def _mean(x: np.ndarray) -> float:
    """pandas' Series.mean, same arithmetic: NaN counted as 0 in the sum and left out of the count."""
    n = int(np.count_nonzero(~np.isnan(x)))
    return _nansum(x) / n if n else float("nan")


def _batch_vs_request(jobs: Rows) -> float:
    """Mean over finished jobs of the global batch they ran at (time-weighted) over the batch they asked for:
    how far a policy's batch choices stray from the user's (issue 21's guard rail)."""
    req = jobs.array("requested_batch")
    ran = jobs.array("mean_batch")
    ok = req > 0
    return _mean(np.where(ok, ran, np.nan) / np.where(ok, req, 1.0))


def _nansum(x: np.ndarray) -> float:
    return float(np.where(np.isnan(x), 0.0, x).sum())


JOB_COLUMNS = ["job", "application", "submit", "start", "end", "jct", "queue", "requested_gpus", "gpu_seconds",
               "avg_gpus", "run_time", "restarts", "preemptions", "state", "reason", *DECOMPOSITION,
               "restart_gpu_seconds", "mean_batch", "requested_batch"]
_JOB_TEXT = ("job", "application", "state", "reason")
TIMELINE_COLUMNS = ["t", "busy_gpus", "total_gpus", "loaned_servers"]


def job_table() -> Table:
    """The rows of `jobs.csv`, appended as jobs end (`JobRows`)."""
    return Table(JOB_COLUMNS, _JOB_TEXT)


def timeline_table() -> Table:
    """The rows of `timeline.csv`, one per round: (t, busy GPUs, total GPUs, loaned servers)."""
    return Table(TIMELINE_COLUMNS)


def servers_per_type(nodes: tuple[NodeView, ...]) -> dict[str, tuple[int, int]]:
    """GPU type -> (most GPUs on one of its servers, servers): what `decompose` spreads the best run over."""
    per_node: dict[str, tuple[int, int]] = {}
    for n in nodes:
        g, k = per_node.get(n.gpu_type, (0, 0))
        per_node[n.gpu_type] = (max(g, n.num_gpus), k + 1)
    return per_node


# a finished job's state (`JobState.phase` once it ended) and the reason of one that waited without any, as text
_SUCCEEDED, _FAILED, _PRIORITY = JobPhase.SUCCEEDED.value, JobPhase.FAILED.value, PendingReason.PRIORITY.value


class JobRows:
    """Each finished job's row of `jobs.csv` (`table`), appended as it ends. The decompositions of jobs that ran
    undisturbed are priced in batches (`decompose.Batch`): their last three figures are written into their
    rows at the next `flush` (every `BATCH_JOBS` such jobs, and at the end of a run: read `table` after one)."""

    def __init__(self, per_node: dict[str, tuple[int, int]]) -> None:
        self.table = job_table()
        self.per_node = per_node
        self._batch = Batch(per_node)

    def add(self, j: JobState) -> None:
        """The row of a job that has just ended (its state is final then)."""
        spec, start, end = j.spec, j.start_time, j.end_time
        assert end is not None
        waited = (start if start is not None else end) - spec.submit_time  # a start at t = 0 is a start
        table = self.table
        running = j.run_time - j.restart_time
        if self._batch.add(j, len(table), running):
            nan = math.nan  # (until `flush`)
            parts: tuple[float, ...] = (end - spec.submit_time - j.run_time, j.restart_time, running, nan, nan, nan)
        else:
            parts = decompose(j, self.per_node)
        table.append((spec.submit_time, start, end, end - spec.submit_time, waited, spec.num_gpus, j.attained,
                      j.attained / j.run_time if j.run_time else 0.0, j.run_time, max(j.launches - 1, 0),
                      j.preemptions, *parts, j.restart_gpu_seconds,
                      j.batch_seconds / j.run_time if j.run_time else math.nan, spec.batch_size),
                     # why it last waited (a PendingReason value); one that waited without one: behind higher priority
                     (spec.job_id, spec.application, _FAILED if j.failed else _SUCCEEDED,
                      j.reason or (_PRIORITY if waited > 0 else "")))
        if self._batch.full:
            self.flush()

    def flush(self) -> None:
        """Write the batched decompositions into their rows."""
        for rows, best, loss_gpus, loss_batch in self._batch.flush():
            self.table.patch(rows, {"best": best, "loss_gpus": loss_gpus, "loss_batch": loss_batch})


def _by_submission(submit: np.ndarray, job_ids: list[str]) -> np.ndarray:
    """Row order by (submit time, job name): numpy's stable sort by time, names ordering each run of equal times."""
    order = np.argsort(submit, kind="stable")
    ties = np.flatnonzero(np.diff(submit[order]) == 0)
    if len(ties):
        starts = ties[np.concatenate(([True], np.diff(ties) > 1))]
        for a in starts.tolist():
            b = a + 1
            while b < len(order) and submit[order[b]] == submit[order[a]]:
                b += 1
            order[a:b] = sorted(order[a:b].tolist(), key=job_ids.__getitem__)
    return order


def collect(sim: RunRecord, wall: float) -> SimResult:
    train = node_set(sim.train_nodes)
    table = sim.job_rows
    jobs = table.freeze(_by_submission(table.numbers("submit"), table.texts("job")))
    tl = sim.timeline.freeze()
    jct = jobs.array("jct")
    t0 = min((s.submit_time for s in sim.workload.jobs), default=0.0)
    makespan = float(jobs.array("end").max() - t0) if len(jobs) else 0.0
    # GPU-time utilisation: busy GPU-seconds / available GPU-seconds over the makespan
    if len(tl) > 1:
        dt = np.diff(np.append(tl.array("t"), sim.now))
        avail = float(np.sum(dt * tl.array("total_gpus")))
        busy = float(np.sum(dt * tl.array("busy_gpus")))
    else:
        avail = busy = 0.0
    restart_gs = float(_nansum(jobs.array("restart_gpu_seconds")))
    lat = np.asarray(sim.latencies, dtype=float) * 1000.0
    summary = {
        "policy": sim.policy.name, "workload": sim.workload.name, "workload_digest": sim.workload.digest,
        "n_jobs": len(sim.workload.jobs), "n_finished": len(jobs), "unfinished": sim.stalled[:20],
        "avg_jct": float(jct.mean()) if len(jct) else float("nan"), "median_jct": _pct(jct, 50),
        "p95_jct": _pct(jct, 95), "p99_jct": _pct(jct, 99),
        "avg_queue": _mean(jobs.array("queue")), "p95_queue": _pct(jobs.array("queue"), 95),
        "makespan": makespan, "gpu_utilization": busy / avail if avail else 0.0,
        "restarts": int(jobs.array("restarts").sum()), "preemptions": int(jobs.array("preemptions").sum()),
        "reclaims": len(sim.reclaims), "reclaim_preemptions": int(sum(r["preempted"] for r in sim.reclaims)),
        "rounds": len(sim.latencies) + sim.rounds_skipped, "events": sim.events,
        "decision_ms_p50": _pct(lat, 50), "decision_ms_p99": _pct(lat, 99),
        "decision_ms_max": float(lat.max()) if len(lat) else 0.0,
        "wall_seconds": wall, "compiled_modules": native.loaded(), "seed": sim.cfg.seed, "version": __version__,
        "length_estimate": str(sim.cfg.length_estimate),
        "cluster": {"nodes": len(sim.train_nodes), "gpus": train.total_gpus, "types": sorted(train.capacity)},
        "policy_config": {"interval": sim.policy.interval, **sim.ctx.options},
        # JCT decomposition, mean seconds per finished job (module docstring) and GPU-hours by use
        "decomposition": {k: _mean(jobs.array(k)) for k in DECOMPOSITION},
        "mean_batch_vs_request": _batch_vs_request(jobs),
        "gpu_hours": {"available": avail / 3600, "running": (busy - restart_gs) / 3600,
                      "restarting": restart_gs / 3600, "idle": (avail - busy) / 3600},
    }
    return SimResult(summary, jobs, tl, list(sim.reclaims))
