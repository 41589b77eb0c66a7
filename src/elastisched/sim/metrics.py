"""Results of a simulation: per-job table, summary figures, utilisation timeline, JCT decomposition.

JCT decomposition (issue 13; docs/seeds.md): per job, `jct = queued + restarting + running` and
`running = best + loss_gpus + loss_batch`, where
- `queued`: seconds without GPUs (before the first start and after preemptions), `jct − run_time`;
- `restarting`: seconds holding GPUs inside a restart / resize window (no progress);
- `best`: the job's whole work at its best achievable goodput — per epoch, the largest goodput over every
  GPU count 1..`spec.gpu_cap`, spread evenly over any feasible number of servers of the type it ran on most
  (packed or spread: on T4 spreading is sometimes faster) and every batch size on a 12-point geometric grid
  from the application's smallest to largest profiled batch plus the job's own;
- `loss_batch`: running time minus the time the same progress would have taken on the very GPUs it had at
  the best batch for them (the batch-size inefficiency, ≥ 0);
- `loss_gpus`: the rest (`running − best − loss_batch`): GPU-count / placement inefficiency. Negative when a
  policy gave the job more GPUs than its cap (a gain from extras).
Progress is priced per (GPU type, shape, epoch) at the data-parallel rate of the slowest type (an IIDP
allocation is priced as data parallel). Per policy (summary): GPU-hours running, restarting and idle.

Batch guard rail (issue 21): per job `mean_batch`, the global batch weighted by the seconds it held GPUs at it,
beside `requested_batch`; the summary's `mean_batch_vs_request` is the mean of their ratio over finished jobs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from elastisched import __version__
from elastisched.core.nodes import node_set
from elastisched.core.types import NodeView, PendingReason
from elastisched.engine.jobstate import JobState
from elastisched.models.application import Application
from elastisched.policies.base import Policy, PolicyContext
from elastisched.sim.table import Rows, WorkLog
from elastisched.workloads.schema import Workload

if TYPE_CHECKING:
    import pandas as pd


class RunRecord(Protocol):
    """What `collect` reads of a finished run (the `Simulator`; named by shape so that the simulator imports
    this module and not the other way round)."""

    @property
    def now(self) -> float: ...
    train_nodes: tuple[NodeView, ...]
    done: list[JobState]
    timeline: list[tuple[float, int, int, int]]
    latencies: list[float]
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


_BEST: dict[tuple[Any, ...], np.ndarray] = {}
_GROUPS: dict[tuple[Any, ...], np.ndarray | None] = {}
#: The applications the two caches are keyed by (their id, not their name: two profile sets can share a name,
#: e.g. Pollux's and Sia's cifar10 in one sweep process). Held here so an id is never reused while cached.
_APPS: dict[int, Application] = {}
#: `best_rates` read at each epoch of a job with `n` epochs (what `decompose` divides by), per its key and `n`
_BEST_AT: dict[tuple[Any, ...], np.ndarray] = {}


def _app_key(app: Application) -> int:
    if len(_BEST) + len(_GROUPS) + len(_BEST_AT) > 200_000:
        _BEST.clear()
        _GROUPS.clear()
        _APPS.clear()
        _BEST_AT.clear()
    _APPS.setdefault(id(app), app)
    return id(app)


def _cached(key: tuple[Any, ...], make: Callable[[], np.ndarray]) -> np.ndarray:
    r = _BEST.get(key)
    if r is None:
        r = _BEST[key] = make()
    return r


def _rate(app: Application, gpu_type: str, shape: tuple[int, ...], batch: int) -> np.ndarray:
    """Progress/s per epoch on `shape` GPUs of `gpu_type` at global batch `batch`."""
    cfg = app.batch_config(sum(shape), int(batch))
    return app.efficiency.gains(cfg.global_batch) / app.iteration_time(gpu_type, shape, cfg)


def _grid_rates(app: Application, gpu_type: str, shape: tuple[int, ...]) -> np.ndarray:
    """The per-epoch best over the 12-point batch grid (the part shared by every job's own batch)."""
    return _cached((_app_key(app), gpu_type, shape), lambda: _elementwise_max(
        [_rate(app, gpu_type, shape, b) for b in _batch_grid(app.init_batch_size, app.max_batch_size)]))


def best_batch_rates(app: Application, gpu_type: str, shape: tuple[int, ...], own_batch: int) -> np.ndarray:
    """Progress/s per epoch on `shape` GPUs of `gpu_type` at the best batch for each epoch (grid above).
    A maximum does not depend on the order it is taken in, so the grid's part is computed once per shape."""
    return _cached((_app_key(app), gpu_type, shape, own_batch), lambda: _elementwise_max(
        [_grid_rates(app, gpu_type, shape), _rate(app, gpu_type, shape, own_batch)]))


@lru_cache(maxsize=4096)
def _batch_grid(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(sorted(set(np.geomspace(lo, hi, 12).astype(int).tolist())))


@lru_cache(maxsize=4096)
def _shapes(cap: int, per_node: int, nodes: int) -> tuple[tuple[int, ...], ...]:
    return tuple(sorted({_balanced(g, k) for g in range(1, cap + 1)
                         for k in range(-(-g // per_node), min(g, nodes) + 1)}))


def best_rates(app: Application, gpu_type: str, cap: int, own_batch: int, per_node: int, nodes: int) -> np.ndarray:
    """Progress/s per epoch at the best GPU count ≤ `cap`, the best spread of it over the type's `nodes`
    servers (balanced over k servers; spreading can beat packing on T4) and the best batch: the best over
    the batch grid (shared by all jobs of the application) and over the job's own batch."""
    shapes = _shapes(cap, per_node, nodes)
    grid_batches = _batch_grid(app.init_batch_size, app.max_batch_size)
    grid = _cached((_app_key(app), gpu_type, cap, per_node, nodes), lambda: _elementwise_max(
        _by_count(app, gpu_type, cap, grid_batches, per_node, nodes)
        or [_grid_rates(app, gpu_type, sh) for sh in shapes]))
    return _cached((_app_key(app), gpu_type, cap, own_batch, per_node, nodes), lambda: _elementwise_max(
        [grid, *(_by_count(app, gpu_type, cap, (own_batch,), per_node, nodes)
                 or [_rate(app, gpu_type, sh, own_batch) for sh in shapes])]))


def _by_count(app: Application, gpu_type: str, cap: int, batches: tuple[int, ...], per_node: int, nodes: int
              ) -> list[np.ndarray] | None:
    """The candidates of `best_rates` for `batches`, one per (GPU count, batch) instead of one per shape: the
    shapes of g GPUs share the batch configuration and so the gains, and gains / t is largest at the least
    iteration time t (a correctly rounded division by a positive number is monotone), so their per-epoch
    maximum is gains / min t, the very same numbers. None (the caller takes every shape) when a time is
    not positive and finite or a gain not positive, where that no longer holds."""
    out = []
    for b in batches:
        for g in range(1, cap + 1):
            key = (_app_key(app), gpu_type, g, b, per_node, nodes)
            if key not in _GROUPS:
                _GROUPS[key] = _count_rate(app, gpu_type, g, b, per_node, nodes)
            r = _GROUPS[key]
            if r is None:
                return None
            out.append(r)
    return out


def _count_rate(app: Application, gpu_type: str, g: int, batch: int, per_node: int, nodes: int) -> np.ndarray | None:
    cfg = app.batch_config(g, int(batch))
    least = math.inf
    for k in range(-(-g // per_node), min(g, nodes) + 1):  # the balanced shapes of g GPUs, as `_shapes`
        t = app.iteration_time(gpu_type, _balanced(g, k), cfg)
        if not 0.0 < t < math.inf:
            return None
        least = min(least, t)
    gains = app.efficiency.gains(cfg.global_batch)
    if least == math.inf or not bool(np.all(gains > 0)):
        return None
    return gains / least


def _elementwise_max(rates: list[np.ndarray]) -> np.ndarray:
    """Per-epoch maximum over candidates; profiles measured at different batches can cover different numbers
    of epochs (Sia's validation files), so the common prefix is compared."""
    n = min(len(r) for r in rates)
    return np.max([r[:n] for r in rates], axis=0)


def _balanced(g: int, k: int) -> tuple[int, ...]:
    return tuple(g // k + (i < g % k) for i in range(k))


def decompose(j: JobState, per_node: dict[str, tuple[int, int]]) -> tuple[float, ...]:
    """The job's JCT decomposition (module docstring) in `DECOMPOSITION` order; NaN losses when it has no
    model (a tuple: `collect` makes one per job)."""
    jct = (j.end_time or 0.0) - j.spec.submit_time
    running = j.run_time - j.restart_time
    nan = float("nan")
    app = j.app
    if app is None or not j.gpu_seconds_by_type or not j.work_by_config:
        return jct - j.run_time, j.restart_time, running, nan, nan, nan
    log = j.work_by_config if isinstance(j.work_by_config, WorkLog) else WorkLog(j.work_by_config, j.tail_entries())
    configs, which, epoch, work_done = log.arrays()
    if len(configs) == 1:  # one configuration all along (most jobs): the same divisions, without the masks
        t, shape = configs[0]
        if t in app.profile.throughput and shape:
            r = best_batch_rates(app, t, shape, j.spec.batch_size)
            per_entry = work_done / r[np.minimum(epoch, len(r) - 1)]
        else:
            per_entry = work_done[:0]
    else:
        per_entry, priced = np.zeros(len(work_done)), np.zeros(len(work_done), dtype=bool)
        for c, (t, shape) in enumerate(configs):
            if t in app.profile.throughput and shape:
                r = best_batch_rates(app, t, shape, j.spec.batch_size)
                m = which == c
                per_entry[m] = work_done[m] / r[np.minimum(epoch[m], len(r) - 1)]
                priced |= m
        per_entry = per_entry[priced]
    # the same divisions, summed one after another in the log's order (add.accumulate is sequential)
    at_best_batch = float(np.add.accumulate(per_entry)[-1]) if len(per_entry) else 0.0
    t = max(j.gpu_seconds_by_type, key=j.gpu_seconds_by_type.__getitem__)
    if t not in app.profile.throughput:
        return jct - j.run_time, j.restart_time, running, nan, nan, nan
    bounds = j.bounds_arr
    n = len(bounds) - 1
    servers = per_node.get(t, (1, 1))
    key = (_app_key(app), t, j.spec.gpu_cap, j.spec.batch_size, servers, n)
    best_at = _BEST_AT.get(key)
    if best_at is None:
        best_r = best_rates(app, t, j.spec.gpu_cap, j.spec.batch_size, *servers)
        best_at = _BEST_AT[key] = best_r[np.minimum(np.arange(n), len(best_r) - 1)]
    work = bounds[1:] - bounds[:-1]  # np.diff, and np.sum below, without their wrappers: same arithmetic
    best = float((work / best_at).sum())
    return jct - j.run_time, j.restart_time, running, best, at_best_batch - best, running - at_best_batch


DECOMPOSITION = ["queued", "restarting", "running", "best", "loss_gpus", "loss_batch"]


def collect(sim: RunRecord, wall: float) -> SimResult:
    rows = []
    train = node_set(sim.train_nodes)
    per_node: dict[str, tuple[int, int]] = {}  # GPU type -> (GPUs per server, servers)
    for n in sim.train_nodes:
        g, k = per_node.get(n.gpu_type, (0, 0))
        per_node[n.gpu_type] = (max(g, n.num_gpus), k + 1)
    cols = ["job", "application", "submit", "start", "end", "jct", "queue", "requested_gpus", "gpu_seconds",
            "avg_gpus", "run_time", "restarts", "preemptions", "state", "reason", *DECOMPOSITION, "restart_gpu_seconds",
            "mean_batch", "requested_batch"]
    for j in sorted(sim.done, key=lambda j: (j.spec.submit_time, j.spec.job_id)):
        spec, start, end = j.spec, j.start_time, j.end_time
        waited = (start or end) - spec.submit_time
        rows.append((  # a tuple per job in `cols` order, not a dict: 74k jobs' rows at once
            spec.job_id, spec.application, spec.submit_time, start, end, end - spec.submit_time, waited,
            spec.num_gpus, j.attained, j.attained / j.run_time if j.run_time else 0.0, j.run_time,
            max(j.launches - 1, 0), j.preemptions, j.phase(end).value,
            # why it last waited (a PendingReason value); a job that waited without one: behind higher priority
            j.reason or (PendingReason.PRIORITY.value if waited > 0 else ""),
            *decompose(j, per_node), j.restart_gpu_seconds,
            j.batch_seconds / j.run_time if j.run_time else float("nan"), spec.batch_size))
    jobs = Rows(cols, rows)
    tl = Rows(["t", "busy_gpus", "total_gpus", "loaned_servers"], sim.timeline)
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
    lat = np.array(sim.latencies) * 1000.0
    summary = {
        "policy": sim.policy.name, "workload": sim.workload.name, "workload_digest": sim.workload.digest,
        "n_jobs": len(sim.workload.jobs), "n_finished": len(jobs), "unfinished": sim.stalled[:20],
        "avg_jct": float(jct.mean()) if len(jct) else float("nan"), "median_jct": _pct(jct, 50),
        "p95_jct": _pct(jct, 95), "p99_jct": _pct(jct, 99),
        "avg_queue": _mean(jobs.array("queue")), "p95_queue": _pct(jobs.array("queue"), 95),
        "makespan": makespan, "gpu_utilization": busy / avail if avail else 0.0,
        "restarts": int(jobs.array("restarts").sum()), "preemptions": int(jobs.array("preemptions").sum()),
        "reclaims": len(sim.reclaims), "reclaim_preemptions": int(sum(r["preempted"] for r in sim.reclaims)),
        "rounds": len(sim.latencies), "events": sim.events,
        "decision_ms_p50": _pct(lat, 50), "decision_ms_p99": _pct(lat, 99),
        "decision_ms_max": float(lat.max()) if len(lat) else 0.0,
        "wall_seconds": wall, "seed": sim.cfg.seed, "version": __version__,
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
