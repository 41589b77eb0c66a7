"""JABAS (EuroSys '25) as a cluster policy: adaptive global batch + heterogeneity-aware IIDP configuration +
epoch-level auto-scaling, for several jobs sharing a heterogeneous cluster (``docs/jabas.md`` "Cluster policy").

The paper scales **one** job over the servers it owns (digest §2(c)).  Cluster-level reading (ours):

* **Order** (``order``; ours, issue 13; the paper has one job).  ``"srpt"`` (default): jobs being (re-)planned
  are served shortest predicted remaining time first — remaining work over the application model's goodput at
  the request, packed, on the job's first profiled type in the cluster, at its own batch (Lyra's SJF
  estimate), so a long job re-planned at its epoch end yields to shorter ones; ``"las"``: least attained
  service first (Tiresias's order); ``"submit"``: submission order (on the Pollux workloads long jobs then keep
  the cluster).  On the Pollux workloads srpt beats las in mean JCT and restarts (docs/seeds.md).
  ``grow_idle`` (default on; ours): a running job below ``min(request, fair share)`` is re-planned whenever GPUs
  are idle, not only at its epoch end (long epochs left GPUs idle while jobs ran small).
* **Cap** (``scale_to``; ours, issue 13).  ``"request"`` (default) caps a job the workload does not mark
  elastic at its request; ``"cap"`` at the larger application profile cap (``max_batch_size //
  min_local_bsz``), as Pollux lets every job grow (preset ``jabas_scaled``).  ``grow_idle`` still grows toward
  the request only.  ``share_factor`` f (ours, default 1): the fair share below is ``⌈f × total / active⌉``, so
  jobs early in ``order`` may take up to f even shares (preset ``jabas_scaled``: f = 2).  Tried and dropped
  (docs/seeds.md): a max-min fair share, and no share with SRPT preemption.
* **Offer.**  Jobs are served in that order.  A job is *offered* the GPUs that no earlier job keeps,
  capped at its fair share ``⌈total GPUs / active jobs⌉`` (and at ``spec.min_gpus..gpu_cap`` for elastic
  jobs); GPU types are those its application is profiled on and its spec allows.
* **Auto-scaling.**  A job is re-planned when it has no GPUs, or at an epoch boundary (``JobView.epoch``
  changed), as the release does at epoch ends.  Candidates are GPU counts per type over the offer (0, powers
  of two, all: ``autoscale.count_candidates``) — a server-type reading of the release's unit subsets;
  the next-epoch time of each is ``autoscale.estimate_epoch`` (digest §2(c)) and the fastest
  (``objective="time"``, the release) or cheapest (``"cost"``, our addition) wins.  A running job moves only
  when the predicted saving over ``move_horizon`` epochs (default 1) exceeds its restart cost (ours).
* **Adaptive batch.**  The SimiGrad ±10 % rule every ``p`` steps (``similarity.gbs_schedule``) on the expected
  cosine similarity from the application's gradient statistics (digest §2(a)).  Between re-plans the GBS
  follows that schedule at the job's position in its epoch and the IIDP configuration is re-solved on the
  same GPUs (the release applies it in place, without a restart); the forecast for auto-scaling is the rest
  of the epoch's schedule (our stand-in for the GP+SES forecaster, which needs the in-job trace).
* **Configuration.**  ``models.iidp.pollux.PolluxIIDP`` (the one ``models.iidp.config.IIDPSolver`` interface): one local
  batch everywhere, faster GPUs run more micro-batches; the allocation carries ``local_batch`` and
  ``accumulation`` per node, which the simulator turns into a rate with ``models.iidp.pollux.iidp_iteration_time``.

* **Budget** (``budget_s``; ours, issue 22, default None = unbounded).  A round re-plans jobs in ``order`` until
  it has used that much CPU time (``time.thread_time``; at least one job a round); the job being planned then
  takes the best of the
  candidates ranked so far (fewest GPUs first); a job whose re-plan is put off keeps its GPUs if they are still
  free of the jobs planned before it (else it waits, THROTTLED) and is re-planned in the next round.
  Candidates are packed on a node order computed once per job and ranked by ``autoscale.epoch_time`` (the
  epoch time alone, without building each point's per-server configuration); neither changes a decision.

``adaptive=False, autoscale=False`` is the experiment's *static* baseline: the first plan at the initial GBS,
kept for the whole run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from elastisched.core.enums import LengthKnowledge
from elastisched.core.types import (
    Allocation,
    ClusterSnapshot,
    Decision,
    JobSpec,
    JobView,
    NodeView,
    PendingReason,
    same_gpus,
)
from elastisched.models.application import Application, packed_shape
from elastisched.models.iidp.config import IIDPConfig, ServerSpec
from elastisched.models.iidp.pollux import PolluxIIDP
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.jabas.autoscale import count_candidates, epoch_time, servers_of, type_price
from elastisched.policies.jabas.similarity import (
    AdaptiveBatchingConfig,
    PolluxGradTrace,
    dataset_size,
    gbs_schedule,
    grad_trace,
)

__all__ = ["JabasPolicy", "epoch_fraction", "servers_of"]

Objective = Literal["time", "cost"]
Schedule = tuple[int, list[tuple[float, int]], int, int]  # (epoch, [(samples, GBS)], GBS at end, step at end)


def epoch_fraction(job: JobView, app: Application) -> float:
    """How far the job is into its current epoch (0..1), from its progress and the application's epoch ends."""
    e, ws = job.epoch, job.spec.work_scale
    if e + 1 >= len(app.epoch_end):
        return 0.0
    lo, hi = app.epoch_end[e] * ws, app.epoch_end[e + 1] * ws
    return min(max((job.progress - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 0.0


@register
class JabasPolicy(Policy):
    name = "jabas"
    knows_length = LengthKnowledge.TRUTH  # remaining work = total_work − progress (an oracle)
    needs_perf_models = True
    description = "JABAS: adaptive batch (gradient similarity) + IIDP on heterogeneous GPUs + epoch auto-scaling."
    interval = 60.0
    elastic = True
    needs_progress = True

    option_help: ClassVar[dict[str, str]] = {
        "objective": "what the auto-scaler minimises: time, or GPU cost",
        "similarity_target": "gradient similarity target γ of the batch rule",
        "adjust_interval": "steps between batch adjustments",
        "max_candidates": "candidate server sets the auto-scaler prices",
        "move_horizon": "epochs over which a move must pay for its restart",
        "adaptive": "adapt the global batch (else the job's own)",
        "autoscale": "epoch-level auto-scaling of the GPUs",
        "grow_idle": "give idle GPUs to running jobs",
        "order": "queue order of waiting jobs",
        "scale_to": "how far a job may grow: its request or the cap",
        "share_factor": "how much larger than its request a job may grow (≥ 1)",
        "budget_s": "CPU seconds a round may spend before it returns the best found so far (none: unbounded)",
    }
    option_choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "order": ("submit", "las", "srpt"),
        "scale_to": ("request", "cap"),
    }

    def __init__(self, objective: Objective = "time", similarity_target: float = 0.1, adjust_interval: int = 100,
                 max_candidates: int = 256, move_horizon: int = 1, adaptive: bool = True,
                 autoscale: bool = True, grow_idle: bool = True, order: str = "srpt",
                 scale_to: str = "request", share_factor: float = 1.0, budget_s: float | None = None) -> None:
        if budget_s is not None and not budget_s > 0:
            raise ValueError(f"budget_s must be > 0 seconds or None, got {budget_s!r}")
        self.budget_s = budget_s
        self._deferred: set[str] = set()  # jobs whose re-plan a round's budget put off (re-planned next round)
        if objective not in ("time", "cost"):
            raise ValueError(f"objective must be 'time' or 'cost', got {objective!r}")
        self.objective: Objective = objective
        self.gamma = similarity_target
        self.p = adjust_interval
        self.max_candidates = max_candidates
        self.move_horizon = move_horizon
        self.adaptive = adaptive
        self.autoscale = autoscale
        self.grow_idle = grow_idle
        if order not in ("submit", "las", "srpt"):
            raise ValueError(f"order must be 'submit', 'las' or 'srpt', got {order!r}")
        self.order = order
        if scale_to not in ("request", "cap"):
            raise ValueError(f"scale_to must be 'request' or 'cap', got {scale_to!r}")
        self.scale_to = scale_to
        if not share_factor >= 1.0:
            raise ValueError(f"share_factor must be >= 1, got {share_factor!r}")
        self.share_factor = share_factor
        self._jobs: dict[str, dict[str, int]] = {}  # job -> {"gbs", "epoch", "step"} at its epoch's start
        self._sched: dict[str, Schedule] = {}  # job -> this epoch's GBS schedule (derived, not state)
        self._perf: dict[int, tuple[Application, PolluxIIDP, PolluxGradTrace, int]] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"jobs": {k: dict(v) for k, v in self._jobs.items()}, "deferred": sorted(self._deferred)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._jobs = {k: {a: int(b) for a, b in v.items()} for k, v in dict(state.get("jobs", {})).items()}
        self._deferred = set(state.get("deferred", []))
        self._sched = {}

    def models(self, app: Application) -> tuple[PolluxIIDP, PolluxGradTrace, int]:
        """The solver, gradient statistics and dataset size of an application (built once per model)."""
        hit = self._perf.get(id(app))
        if hit is None or hit[0] is not app:
            hit = self._perf[id(app)] = (app, PolluxIIDP(app), grad_trace(app), dataset_size(app))
        return hit[1], hit[2], hit[3]

    def batch_config(self, app: Application) -> AdaptiveBatchingConfig:
        return AdaptiveBatchingConfig(self.gamma, app.init_batch_size, app.max_batch_size, adjust_interval=self.p)

    # ------------------------------------------------------------------ the batch controller
    def _state(self, job: JobView, app: Application) -> dict[str, int]:
        """Controller state at the start of the job's current epoch (advanced over finished epochs)."""
        jid, cfg = job.spec.job_id, self.batch_config(app)
        st = self._jobs.get(jid)
        if st is None:
            st = {"gbs": min(max(job.spec.batch_size, cfg.lower_bound), cfg.upper_bound), "epoch": job.epoch,
                  "step": 1}
        while self.adaptive and st["epoch"] < job.epoch:
            _, _, gbs, step = self._schedule(jid, app, st)
            st = {"gbs": gbs, "epoch": st["epoch"] + 1, "step": step}
        if st["epoch"] != job.epoch:
            st = {**st, "epoch": job.epoch}
        self._jobs[jid] = st
        return st

    def _schedule(self, jid: str, app: Application, st: Mapping[str, int]) -> Schedule:
        hit = self._sched.get(jid)
        if hit is None or hit[0] != st["epoch"]:
            _, trace, ds = self.models(app)
            if self.adaptive:
                gbs, step, pts = gbs_schedule(trace, self.batch_config(app), st["gbs"], st["epoch"], ds, st["step"])
            else:
                gbs, step, pts = st["gbs"], st["step"], []
            hit = self._sched[jid] = (st["epoch"], pts, gbs, step)
        return hit

    def batch_now(self, job: JobView, app: Application) -> tuple[int, list[int], int]:
        """``(GBS now, GBS trajectory for the rest of the epoch, sync step)`` at the job's position."""
        st = self._state(job, app)
        _, pts, _, _ = self._schedule(job.spec.job_id, app, st)
        done = epoch_fraction(job, app) * self.models(app)[2]
        past = [g for s, g in pts if s <= done]
        gbs = past[-1] if past else st["gbs"]
        return gbs, [gbs] + [g for s, g in pts if s > done], st["step"] + len(past) * self.p

    # ------------------------------------------------------------------ rounds
    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        t0 = time.thread_time()
        self._jobs = {k: v for k, v in self._jobs.items() if k in snap.jobs}
        self._sched = {k: v for k, v in self._sched.items() if k in snap.jobs}
        self._deferred &= set(snap.jobs)
        ntype = snap.node_set.gpu_type
        apps = {jid: _application(job, ctx) for jid, job in snap.jobs.items()}
        share = math.ceil(self.share_factor * snap.node_set.total_gpus / max(len(snap.jobs), 1))
        cap, replan = self._replans(snap, apps, share)
        allocs: dict[str, Allocation] = {}
        reasons: dict[str, PendingReason] = {}
        planned = 0
        for jid, job in self._order(snap, apps):
            app = apps[jid]
            if app is None:
                reasons[jid] = PendingReason.NO_PROFILE
                continue
            if replan[jid] and planned and self.budget_s is not None and time.thread_time() - t0 >= self.budget_s:
                self._deferred.add(jid)  # out of budget: keeps what it holds if it still fits, re-planned later
                replan[jid] = False
                if not job.is_running or any(cap.get(n, 0) < g for n, g in job.allocation.placement):
                    reasons[jid] = PendingReason.THROTTLED
                    continue
                for n, g in job.allocation.placement:
                    cap[n] -= g
            if not replan[jid]:
                allocs[jid] = self.reconfigure(job, app, ntype) or job.allocation
                continue
            self._deferred.discard(jid)
            planned += 1
            alloc = self.plan(job, app, snap.nodes, dict(cap), ntype, min(share, self._hi(job.spec, app)),
                              None if self.budget_s is None else t0 + self.budget_s)
            if alloc is None:
                reasons[jid] = PendingReason.RESOURCES
                continue
            if job.is_running and alloc.same_gpus(job.allocation) \
                    and alloc.batch_size == job.allocation.batch_size:
                alloc = job.allocation
            for n, g in alloc.placement:
                cap[n] -= g
            allocs[jid] = alloc
        return Decision(allocs, reasons)

    def _replans(self, snap: ClusterSnapshot, apps: Mapping[str, Application | None], share: int
                 ) -> tuple[dict[str, int], dict[str, bool]]:
        """(free GPUs per node once the jobs that keep their GPUs hold them, which jobs are re-planned)."""
        cap = dict(snap.node_set.gpus)
        idle = snap.node_set.total_gpus - sum(j.allocation.gpus for j in snap.jobs.values())
        replan: dict[str, bool] = {}
        for jid, job in snap.jobs.items():
            st = self._jobs.get(jid)
            replan[jid] = (not job.is_running or st is None or apps[jid] is None or jid in self._deferred
                           or (self.autoscale and st["epoch"] != job.epoch)
                           or any(n not in cap for n in job.allocation.nodes)
                           or (self.grow_idle and self.autoscale and idle > 0
                               and job.allocation.gpus < min(job.spec.num_gpus, share)))
            if not replan[jid]:
                for n, g in job.allocation.placement:
                    cap[n] -= g
        if any(v < 0 for v in cap.values()):  # inconsistent snapshot: re-plan everything
            return dict(snap.node_set.gpus), dict.fromkeys(snap.jobs, True)
        return cap, replan

    def _order(self, snap: ClusterSnapshot, apps: Mapping[str, Application | None]) -> list[tuple[str, JobView]]:
        order = list(snap.jobs.items())
        if self.order == "las":
            order.sort(key=lambda x: (x[1].attained_service, x[1].spec.submit_time, x[0]))
        elif self.order == "srpt":
            per = {n.gpu_type: n.num_gpus for n in snap.nodes}
            order.sort(key=lambda x: (_remaining(x[1], apps[x[0]], per), x[1].spec.submit_time, x[0]))
        return order

    def _hi(self, spec: JobSpec, app: Application | None) -> int:
        """Most GPUs auto-scaling may give: the elastic cap, else the request (``scale_to="cap"``: the
        profile cap when larger)."""
        if spec.elastic:
            return spec.gpu_cap
        hi = max(spec.num_gpus, spec.gpu_cap)
        if self.scale_to == "cap" and app is not None:
            hi = max(hi, app.max_batch_size // app.min_local_bsz)
        return hi

    def reconfigure(self, job: JobView, app: Application, ntype: Mapping[str, str]) -> Allocation | None:
        """In-epoch GBS change on the same GPUs (in place in the release); None = keep the allocation."""
        if not self.adaptive:
            return None
        gbs, _, _ = self.batch_now(job, app)
        cur = job.allocation.batch_size or job.batch_size
        if gbs == self._jobs[job.spec.job_id].get("target", cur):
            return None
        self._jobs[job.spec.job_id]["target"] = gbs
        solver = self.models(app)[0]
        cfg = solver.best(servers_of(job.allocation.placement, ntype), gbs, cur, self.batch_config(app).upper_bound)
        if cfg is None or cfg.gbs == cur:
            return None
        return _alloc(job.allocation.placement, cfg)

    def plan(self, job: JobView, app: Application, nodes: Sequence[NodeView], avail: Mapping[str, int],
             ntype: Mapping[str, str], share: int, deadline: float | None = None) -> Allocation | None:
        """Auto-scaling: the best candidate allocation for the rest of this epoch, with its configuration
        (`deadline`, thread time: the best of the candidates ranked by then; at least one is ranked)."""
        solver, _, ds = self.models(app)
        spec = job.spec
        gbs, traj, step = self.batch_now(job, app)
        self._jobs[spec.job_id]["target"] = gbs
        upper = self.batch_config(app).upper_bound
        lo = spec.min_gpus if spec.elastic else 1
        hi = max(share, lo)
        types = [t for t in app.gpu_types if not spec.gpu_types or t in spec.gpu_types]
        own = dict(job.allocation.placement)
        order = _node_order(types, avail, ntype, own, nodes)  # per type, the nodes a candidate fills, in order
        free_t = {t: sum(avail[n] for n in order[t]) for t in types}
        types = [t for t in types if free_t.get(t, 0) > 0]
        cands = count_candidates({t: min(free_t[t], hi) for t in types}, lo, hi, self.max_candidates)
        horizon = max(min(self.move_horizon, app.max_epochs - job.epoch), 1)
        left = max(round((1.0 - epoch_fraction(job, app)) * ds), 1)
        best: tuple[float, float, tuple[tuple[str, int], ...], tuple[ServerSpec, ...]] | None = None
        for c in cands:
            if best is not None and deadline is not None and time.thread_time() >= deadline:
                break
            placement = _pack(c, avail, order)
            servers = servers_of(placement, ntype)
            t = epoch_time(solver, servers, traj, current_gbs=gbs, dataset=left, interval=self.p, sync_step=step,
                           upper=upper)
            if not math.isfinite(t):
                continue
            price = sum(type_price(s.gpu_type) * s.num_gpus for s in servers) / 3600.0
            if job.is_running and not same_gpus(placement, job.allocation.placement):
                t += app.restart_cost / horizon  # checkpoint-restart, amortised over `move_horizon` epochs (ours)
            key = (t, t * price) if self.objective == "time" else (t * price, t)
            if best is None or key < best[:2]:
                best = (*key, placement, servers)
        if best is None:
            return None
        cfg = solver.best(best[3], traj[0], None if traj[0] == gbs else gbs, upper)  # the winner's first point
        return None if cfg is None else _alloc(best[2], cfg)

def _remaining(job: JobView, app: Application | None, per_node: Mapping[str, int]) -> float:
    """Predicted seconds left at the request, packed, on the first profiled type present (``order="srpt"``)."""
    t = next((t for t in app.gpu_types if t in per_node), None) if app is not None else None
    if app is None or t is None:
        return math.inf
    n, bs = job.spec.num_gpus, job.spec.batch_size
    rate = app.goodput(t, packed_shape(n, per_node[t]), app.batch_config(n, bs), min(job.epoch, app.max_epochs - 1))
    return max(job.total_work - job.progress, 0.0) / max(rate, 1e-12)


def _node_order(types: Sequence[str], avail: Mapping[str, int], ntype: Mapping[str, str], own: Mapping[str, int],
                nodes: Sequence[NodeView]) -> dict[str, list[str]]:
    """Per type, the nodes with free GPUs in the order a candidate fills them: the job's own nodes first (most
    of its GPUs first), then the fullest free nodes (few nodes), then node order."""
    order: dict[str, list[NodeView]] = {t: [] for t in types}
    for n in nodes:
        lst = order.get(ntype[n.node_id])
        if lst is not None and avail.get(n.node_id, 0) > 0:
            lst.append(n)
    return {t: [n.node_id for n in sorted(lst, key=lambda n: (-own.get(n.node_id, 0), -avail[n.node_id], n.index))]
            for t, lst in order.items()}


def _pack(counts: Mapping[str, int], avail: Mapping[str, int], order: Mapping[str, list[str]]
          ) -> tuple[tuple[str, int], ...]:
    """Nodes for ``counts[type]`` GPUs, taken in `_node_order`."""
    out: list[tuple[str, int]] = []
    for t, need in counts.items():
        for n in order[t]:
            if need <= 0:
                break
            k = min(need, avail[n])
            out.append((n, k))
            need -= k
    return tuple(out)


def _alloc(placement: tuple[tuple[str, int], ...], cfg: IIDPConfig) -> Allocation:
    """Allocation with the IIDP configuration: GBS, LBS and GA steps per node (max over its GPUs)."""
    return Allocation(placement=placement, batch_size=cfg.gbs, local_batch=cfg.lbs, accumulation=cfg.accumulation())


def _application(job: JobView, ctx: PolicyContext) -> Application | None:
    """The job's own model (``JobView.model``), else ``ctx.perf``'s for its application; None = no profile."""
    if isinstance(job.model, Application):
        return job.model
    perf = ctx.perf
    name = job.spec.application
    return perf.app(name) if perf is not None and name in perf else None
