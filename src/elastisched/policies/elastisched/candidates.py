"""One round's view of each active job: which GPU types and counts it may take, and how long it would still
run with each (the inputs of `assign`).

Readings (ours, written down as the design asks):
- **Which jobs scale.** A job the user marked elastic scales inside its own `min_gpus..max_gpus`. A job whose
  workload declares it adaptive (`category` "adaptive" or "scale-gpus": the Pollux and Sia artifacts' AdaptDL
  jobs) scales from 1 GPU to its application's cap (the most GPUs a batch in the profiled range spreads over).
  Any other job (a fixed request, Sia's "rigid", a Philly gang-scheduled job) runs at exactly its request.
- **GPU types.** Those the job allows, its application is profiled on, and the cluster has now.
- **Time left** on k GPUs of type t: `goodput.RateTable.remaining` over the predicted total work
  (`length.predicted_total`: the declared length, or attained service against the length distribution), with
  the best batch per epoch; a running job's own allocation is priced on its real shape (a job spread over
  servers runs slower than the packed shape the table assumes), plus what is left of a restart in progress.
- A job without a performance model scales linearly from its request: its declared length is its `duration`
  × request GPU-seconds (remaining fraction of it), else the length belief; it may use any GPU type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from elastisched.core.types import ClusterSnapshot, JobPhase, JobView, NodeId
from elastisched.models.application import Application
from elastisched.policies._common import job_model
from elastisched.policies.base import PolicyContext
from elastisched.policies.elastisched.goodput import RateTable, RateTables, gpu_cap
from elastisched.policies.elastisched.length import LengthBelief, predicted_total

ADAPTIVE = ("adaptive", "scale-gpus")
FALLBACK_CAP = 8  # GPUs a job without a model may grow to when its spec gives no maximum


@dataclass(slots=True)
class Candidate:
    """One job in one round (module docstring)."""

    view: JobView
    app: Application | None
    lo: int  # fewest GPUs it runs on
    hi: int  # most GPUs it may hold
    times: dict[str, np.ndarray] = field(default_factory=dict)  # type -> seconds left with 0..hi GPUs (inf at 0)
    batches: dict[str, np.ndarray] = field(default_factory=dict)  # type -> best global batch per count now
    cur_type: str | None = None
    cur_gpus: int = 0
    placement: tuple[tuple[NodeId, int], ...] = ()  # what it holds (after any reclaim)
    disturbed: bool = False  # lost GPUs to a reclaim this round: it restarts whatever is decided
    restart_left: float = 0.0  # seconds of a restart in progress
    restart_cost: float = 30.0
    moved_at: float | None = None  # when it last got other GPUs (a batch change in place does not count)
    key: float = math.inf  # SRPT key: seconds left at its reference size on its best type

    @property
    def job_id(self) -> str:
        return self.view.spec.job_id


def scales(view: JobView) -> bool:
    spec = view.spec
    return spec.elastic or spec.category in ADAPTIVE


def bounds(view: JobView, app: Application | None) -> tuple[int, int]:
    """(fewest, most) GPUs the job may run on (module docstring, "Which jobs scale")."""
    spec = view.spec
    if spec.elastic:
        return max(spec.min_gpus, 1), max(spec.gpu_cap, spec.min_gpus, 1)
    if spec.category in ADAPTIVE:
        return 1, gpu_cap(app) if app is not None else max(spec.num_gpus, FALLBACK_CAP)
    return spec.num_gpus, spec.num_gpus


def usable_types(view: JobView, app: Application | None, cluster: dict[str, int], per_node: dict[str, int]
                 ) -> list[str]:
    allowed = view.spec.gpu_types
    return [t for t in cluster if (not allowed or t in allowed) and (app is None or t in app.gpu_types)
            and per_node.get(t, 0) > 0]


class CandidateBuilder:
    """Builds the round's candidates; owns the per-(application, type) tables, which outlive rounds."""

    def __init__(self, tables: RateTables, belief: LengthBelief) -> None:
        self.tables = tables
        self.belief = belief

    def build(self, snap: ClusterSnapshot, ctx: PolicyContext, surviving: dict[str, tuple[tuple[NodeId, int], ...]],
              cluster: dict[str, int], per_node: dict[str, int], moved: Mapping[str, float]) -> list[Candidate]:
        """Every active job's candidate. `surviving`: the placement each running job keeps after a reclaim
        (absent = unchanged); `cluster`: GPUs per type the round may use; `per_node`: largest server per type;
        `moved`: when the policy last gave a job other GPUs (else its view's last resize or start)."""
        node_type = snap.node_set.gpu_type
        views = list(snap.jobs.values())
        residual = self.belief.residual(np.array([v.attained(snap.now) for v in views]))
        out: list[Candidate] = []
        for v, res in zip(views, residual.tolist(), strict=True):
            app = job_model(v, ctx)
            lo, hi = bounds(v, app)
            c = Candidate(v, app, lo, hi, restart_cost=app.restart_cost if app is not None else 30.0)
            held = v.allocation.placement
            keep = surviving.get(c.job_id, held)
            c.disturbed = keep != held
            c.placement = keep
            if keep:
                c.cur_type = node_type[keep[0][0]]
                c.cur_gpus = sum(g for _, g in keep)
                since = moved.get(c.job_id)
                c.moved_at = since if since is not None else (
                    v.last_resize_time if v.last_resize_time is not None else v.start_time)
                if v.phase is JobPhase.RESTARTING and not c.disturbed:
                    c.restart_left = max(0.0, (c.moved_at or snap.now) + c.restart_cost - snap.now)
            for t in usable_types(v, app, cluster, per_node):
                self._times(c, t, per_node[t], res, snap.now)
            if c.times:
                ref = min(max(v.spec.num_gpus, lo), hi)
                c.key = min(float(ts[min(ref, len(ts) - 1)]) for ts in c.times.values())
            out.append(c)
        return out

    def _times(self, c: Candidate, t: str, per_node: int, residual: float, now: float) -> None:
        v, app = c.view, c.app
        if app is None:
            total = (v.spec.duration * v.spec.num_gpus * v.remaining_fraction if v.spec.duration
                     else residual)
            ks = np.arange(c.hi + 1, dtype=float)
            with np.errstate(divide="ignore"):
                c.times[t] = np.where(ks > 0, max(total, 1e-9) / np.maximum(ks, 1e-12), math.inf)
            c.batches[t] = np.zeros(c.hi + 1, dtype=np.int64)
            return
        table = self.tables.table(app, t, per_node)
        ws, epoch = scale_and_epoch(v, app, table, c.lo, c.hi, residual)
        times = table.remaining(ws, v.progress, epoch, c.hi)
        if len(times) <= c.hi:  # the application cannot spread over more GPUs: those counts are not offered
            times = np.concatenate([times, np.full(c.hi + 1 - len(times), math.inf)])
        e = min(epoch, table.rate.shape[1] - 1)
        batches = np.zeros(c.hi + 1, dtype=np.int64)
        n = min(c.hi, table.max_gpus)
        batches[: n + 1] = table.batch[: n + 1, e]
        if c.cur_type == t and c.cur_gpus:
            shape = tuple(g for _, g in c.placement)
            rates, best = self.tables.shape_rates(app, t, shape)
            if c.cur_gpus < len(times):
                times = times.copy()
                times[c.cur_gpus] = _time_on(rates, app.epoch_end, ws, v.progress, epoch)
                batches[c.cur_gpus] = best[e]
        c.times[t] = times
        c.batches[t] = batches


def scale_and_epoch(v: JobView, app: Application, table: RateTable, lo: int, hi: int, residual: float
                    ) -> tuple[float, int]:
    """(work scale, epoch) of a job: its predicted total work over the application's (`length.predicted_total`,
    GPU-seconds turned into work at the table's pace at its reference size) and the epoch its progress is in."""
    ref = max(1, min(max(v.spec.num_gpus, lo), hi, table.max_gpus))
    pace = float(table.rate[ref, min(v.epoch, table.rate.shape[1] - 1)]) / ref if table.max_gpus else 0.0
    total = predicted_total(v.declared_work, v.progress, residual, pace)
    ws = total / app.total_work if app.total_work > 0 else 1.0
    return ws, app.epoch_at(v.progress, ws)


def _time_on(rates: np.ndarray, epoch_end: np.ndarray, ws: float, progress: float, epoch: int) -> float:
    """Seconds left at per-epoch `rates` (one placement), for a job at `progress` in `epoch` of work scale ws."""
    last = len(rates)
    if epoch >= last:
        return 0.0
    if rates[epoch] <= 0:
        return math.inf
    head = max(ws * float(epoch_end[epoch + 1]) - progress, 0.0) / float(rates[epoch])
    rest = rates[epoch + 1:]
    if (rest <= 0).any():
        return math.inf
    work = ws * np.diff(epoch_end[epoch + 1: last + 1])
    return head + float((work / rest).sum())
