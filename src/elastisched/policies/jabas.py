"""JABAS (EuroSys '25) as a cluster policy: adaptive global batch + heterogeneity-aware IIDP configuration +
epoch-level auto-scaling, for several jobs sharing a heterogeneous cluster (``docs/jabas.md`` "Cluster policy").

The paper scales **one** job over the servers it owns (digest §2(c)).  Cluster-level reading (ours):

* **Offer.**  Jobs are served in submission order.  A job is *offered* the GPUs that no earlier job keeps,
  capped at its fair share ``⌈total GPUs / active jobs⌉`` (and at ``spec.min_gpus..gpu_cap`` for elastic
  jobs); GPU types are those its application is profiled on and its spec allows.
* **Auto-scaling.**  A job is re-planned when it has none, or at an epoch boundary (``JobView.epoch``
  changed), as the release does at epoch ends.  Candidates are GPU counts per type over the offer (0, powers
  of two, all) — a server-type reading of the release's unit subsets; the next-epoch time of each candidate
  is estimated as in ``models/jabas_autoscale.estimate_epoch_time`` (digest §2(c)) and the fastest
  (``objective="time"``, the release) or cheapest (``"cost"``, our addition) wins.  A running job moves only
  when the predicted saving over ``move_horizon`` epochs (default 1) exceeds its restart cost (ours).
* **Adaptive batch.**  The SimiGrad ±10 % rule every ``p`` steps (``models/similarity.adaptive_step``) runs on
  the expected cosine similarity derived from the application's measured gradient statistics (digest §2(a),
  ``docs/jabas.md`` "Gradient similarity"); the policy advances it over the finished epoch and forecasts the
  next epoch's GBS trajectory by running the same rule on the last statistics (our stand-in for the GP+SES
  forecaster, which needs the in-job trace).  The batch is applied at re-plans only (a batch change is a
  reconfiguration for the engine); the live job adapts in place between them.
* **Configuration.**  IIDP on Pollux/Sia throughput profiles (:class:`PolluxIIDP`): one local batch everywhere,
  each GPU runs ``w`` decoupled workers (gradient accumulation ``a = w − 1``; VSW multi-streaming is not
  profiled there, so ``m = 1``), exact min-bottleneck split (digest §2(b)).  Units are single GPUs (1-GPU
  nodes exist), so the parity halves may differ by one worker — a relaxation of the release's 2-GPU unit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobView, NodeView
from elastisched.models.application import Application
from elastisched.models.jabas_autoscale import gpu_price_per_hour
from elastisched.models.similarity import (
    AdaptiveBatchingConfig,
    AdaptiveBatchingState,
    PolluxGradTrace,
    expected_cosine_similarity,
    simulate_adjustments,
)
from elastisched.policies.base import Policy, PolicyContext, register

__all__ = [
    "GPU_TFLOPS",
    "HeteroConfig",
    "JabasPolicy",
    "PolluxIIDP",
    "advance_gbs",
    "count_candidates",
    "dataset_size",
    "estimate_epoch",
    "grad_trace",
    "type_price",
]

Objective = Literal["time", "cost"]
#: FP32 peak TFLOPS per Pollux/Sia GPU type (vendor spec sheets; V100 = the release's 14.13 anchor).
#: Used only for the release's price model ($3.06/h × TFLOPS/14.13) — our assumption for these types.
GPU_TFLOPS: dict[str, float] = {"t4": 8.14, "v100": 14.13, "a100": 19.5, "rtx": 13.45, "rtx6000": 16.3}


def type_price(gpu_type: str) -> float:
    """USD per GPU-hour of a Pollux/Sia GPU type (unknown types priced as a V100)."""
    return gpu_price_per_hour(GPU_TFLOPS.get(gpu_type, 14.13))


def grad_trace(app: Application) -> PolluxGradTrace:
    """Per-epoch gradient statistics of an application (its ``validation-*.csv``), Pollux convention."""
    v = app.profile.validation
    sqr = {b: tuple(float(x) for x in df["grad_sqr"]) for b, df in v.items()}
    var = {b: tuple(float(x) for x in df["grad_var"]) for b, df in v.items()}
    return PolluxGradTrace(app.name, tuple(sorted(v)), sqr, var, float(min(v)))


def dataset_size(app: Application) -> int:
    """Samples per epoch: optimizer steps of one epoch × batch in the smallest-batch validation file."""
    b = min(app.profile.validation)
    it = app.profile.validation[b]["iteration"].to_numpy(float)
    steps = it[0] if len(it) < 2 else it[1] - it[0]
    return max(round(steps * b), b)


def advance_gbs(
    trace: PolluxGradTrace, cfg: AdaptiveBatchingConfig, gbs: int, epoch: int, samples: float,
    quantum: int = 1, sim_step: int = 1,
) -> tuple[int, int, list[tuple[int, int]]]:
    """Run the SimiGrad rule over ``samples`` of epoch ``epoch`` starting at ``gbs``.

    The re-solve rounds the target to a multiple of ``quantum`` in the direction of the move.
    Returns ``(gbs, sim_step, trajectory points)``.
    """
    ep = min(max(epoch, 0), trace.num_epochs - 1)

    def sim(b: int) -> float:
        return expected_cosine_similarity(trace.stats(b, ep), b)

    def resolve(target: float, cur: int) -> tuple[int, int] | None:
        q = quantum
        new = math.ceil(target / q) * q if target > cur else math.floor(target / q) * q
        new = min(max(new, q), cfg.upper_bound)
        return None if new == cur else (q, new)

    st = AdaptiveBatchingState(gbs=gbs, lbs=quantum, sim_step=sim_step)
    done, pts = 0.0, []
    while done < samples:
        k = (-st.sim_step) % cfg.adjust_interval + 1  # steps to the next adjustment (inclusive)
        k = min(k, max(1, math.ceil((samples - done) / st.gbs)))
        done += k * st.gbs
        st = simulate_adjustments(st, cfg, sim, resolve, k)
        pts.extend(st.trajectory)
        st = AdaptiveBatchingState(st.gbs, st.lbs, st.sim_step)
    return st.gbs, st.sim_step, pts


@dataclass(frozen=True, slots=True)
class HeteroConfig:
    """IIDP configuration on GPU groups: ``workers[t] = (gpus, w_hi, n_hi)`` (n_hi GPUs at w_hi, rest w_hi−1)."""

    lbs: int
    num_workers: int
    iter_time: float
    workers: Mapping[str, tuple[int, int, int]]

    @property
    def gbs(self) -> int:
        return self.lbs * self.num_workers

    @property
    def throughput(self) -> float:
        return self.gbs / self.iter_time


Groups = Mapping[str, tuple[int, ...]]  # GPU type -> GPUs per server of that type in the job


class PolluxIIDP:
    """IIDP on Pollux/Sia profiles: per-type ``t(w) = step + (step − sync)(w − 1)`` at the job's whole shape.

    ``step, sync`` come from ``Application.model(type).step_sync(placement, lbs)`` with the placement of the
    whole job (all its servers), so communication grows with the job; a GPU of type t doing ``w`` micro-batches
    of ``lbs`` takes ``t(w)``; cluster time = slowest GPU (digest §2(d), Pollux iteration rule).
    """

    def __init__(self, app: Application, lbs_ratio: float = 1.5, tolerance: float = 0.1) -> None:
        self.app = app
        self.tolerance = tolerance
        # the grid starts at 1 sample: the baselines' GBS/N split goes that low too, and both read the same
        # (below the profiled range: extrapolated) throughput model
        lo, hi = 1, app.max_local_bsz
        n_lbs = math.ceil(math.log(hi / lo) / math.log(lbs_ratio)) + 1 if hi > lo else 1
        grid = np.unique(np.round(np.geomspace(lo, hi, n_lbs)).astype(int))
        self.lbs_grid: tuple[int, ...] = tuple(int(b) for b in grid)
        self._coef: dict[tuple, dict[str, tuple[float, float]]] = {}
        self._best: dict[tuple, HeteroConfig | None] = {}

    def coeffs(self, groups: Groups, lbs: float) -> dict[str, tuple[float, float]]:
        """Per type: (time of one micro-batch incl. sync, time of each extra micro-batch)."""
        key = (tuple(sorted(groups.items())), float(lbs))
        hit = self._coef.get(key)
        if hit is None:
            shape = tuple(sorted((g for gs in groups.values() for g in gs), reverse=True))
            hit = {}
            for t in groups:
                step, sync = self.app.model(t).step_sync(shape, float(lbs))
                hit[t] = (step, max(step - sync, 1e-9))
            self._coef[key] = hit
        return hit

    def solve(self, groups: Groups, lbs: int, num_workers: int) -> HeteroConfig | None:
        """Exact min-bottleneck split of ``num_workers`` workers (≥ 1 per GPU); None if too few workers."""
        n = {t: sum(gs) for t, gs in groups.items() if sum(gs) > 0}
        if not n or num_workers < sum(n.values()):
            return None
        co = self.coeffs(groups, lbs)

        def caps(t_max: float) -> dict[str, int]:
            return {t: math.floor((t_max - co[t][0]) / co[t][1] + 1e-9) + 1 for t in n}

        # T* = least breakpoint s_t + k·c_t with Σ n_t·cap_t(T) ≥ W; the continuous relaxation bounds it
        # below (T_lb) and T_lb + max c_t is always feasible, so only breakpoints in that window are tried
        smax, cmax = max(co[t][0] for t in n), max(co[t][1] for t in n)
        t_lb = (num_workers - sum(n.values()) + sum(n[t] * co[t][0] / co[t][1] for t in n)) / sum(
            n[t] / co[t][1] for t in n)
        t0 = max(t_lb, smax)
        points = {smax}
        for t in n:
            s_t, c_t = co[t]
            k0, k1 = max(math.ceil((t0 - s_t) / c_t - 1e-9), 0), math.floor((t0 + cmax - s_t) / c_t + 1e-9)
            points.update(s_t + k * c_t for k in range(k0, k1 + 1))
        lo = t0 + cmax
        for cand in sorted(p for p in points if p >= smax):
            if sum(n[t] * c for t, c in caps(cand).items()) >= num_workers:
                lo = cand
                break
        cap = caps(lo)
        excess = sum(n[t] * cap[t] for t in n) - num_workers
        out: dict[str, tuple[int, int, int]] = {}
        for t in sorted(n, key=lambda t: -(co[t][0] + co[t][1] * (cap[t] - 1))):  # trim slowest first
            total = n[t] * cap[t]
            r = min(excess, total - n[t])
            excess -= r
            q, extra = divmod(total - r, n[t])
            out[t] = (n[t], q + 1, extra) if extra else (n[t], q, n[t])
        it = max(co[t][0] + co[t][1] * (w - 1) for t, (_, w, _) in out.items())
        return HeteroConfig(lbs, num_workers, it, out)

    def best(self, groups: Groups, target: float, current: int | None = None,
             upper: int | None = None) -> HeteroConfig | None:
        """Highest-throughput configuration for a GBS near ``target`` over the LBS grid (``current`` given:
        rounded toward the move, as ``solve_placement``; else nearest); GBS at most ``upper``."""
        key = (tuple(sorted(groups.items())), target, current if current != target else None, upper)
        if key in self._best:
            return self._best[key]
        ngpu = sum(sum(gs) for gs in groups.values())
        found: list[tuple[bool, float, float, HeteroConfig]] = []
        for b in self.lbs_grid:
            w = round(target / b)  # as solve_placement / directional_workers with 1-GPU units
            if current is not None and target != current and (b * w <= current if target > current
                                                              else b * w >= current):
                continue  # must move strictly toward the target
            if w < max(ngpu, 1) or (upper is not None and b * w > upper):
                continue
            cfg = self.solve(groups, b, w)
            if cfg is not None:
                dev = abs(cfg.gbs - target) / target
                found.append((dev > self.tolerance, dev if dev > self.tolerance else 0.0, -cfg.throughput, cfg))
        # highest throughput among GBS within ±tolerance of the target (our guard for a coarse LBS grid: the
        # release's grid is fine relative to its GBS), else the nearest GBS
        best = min(found, key=lambda f: f[:3])[3] if found else None
        if len(self._best) > 100_000:
            self._best.clear()
        self._best[key] = best
        return best

    def uniform_time(self, groups: Groups, gbs: float) -> float:
        """Baseline: one worker per GPU, ``gbs/N`` each (GA beyond the largest local batch); slowest type."""
        ngpu = sum(sum(gs) for gs in groups.values())
        local = gbs / ngpu
        a = max(math.ceil(local / self.app.max_local_bsz - 1e-9) - 1, 0)
        micro = max(local / (a + 1), 1.0)
        co = self.coeffs(groups, micro)
        return max(s + c * a for s, c in co.values())


def estimate_epoch(
    perf: PolluxIIDP, groups: Groups, trajectory: Sequence[int], *, current_gbs: int, dataset: int,
    interval: int = 100, sync_step: int = 0, upper: int | None = None,
) -> tuple[float, list[HeteroConfig]]:
    """Next-epoch time on ``groups`` for a GBS ``trajectory`` (``jabas_autoscale.estimate_epoch_time``
    rules: ``p`` steps per point, the first the rest of the interval, the last finishes the epoch); inf if
    some point has no configuration."""
    rem, total, used = dataset, 0.0, []
    for k, g in enumerate(trajectory):
        if rem <= 0:
            break
        steps = interval - (sync_step % interval) if k == 0 else interval
        cfg = perf.best(groups, g, None if g == current_gbs else current_gbs, upper)
        if cfg is None:
            return math.inf, used
        if k == len(trajectory) - 1 or rem < cfg.gbs * steps:
            steps = math.ceil(rem / cfg.gbs)
        rem -= cfg.gbs * steps
        total += cfg.iter_time * steps
        used.append(cfg)
    return total, used


def count_candidates(free: Mapping[str, int], lo: int = 1, hi: int | None = None,
                     limit: int | None = None) -> list[dict[str, int]]:
    """Candidate allocations as GPUs per type: 0, powers of two and all of each type's free GPUs, with a
    total in ``lo..hi``; fewest GPUs first (the server-type reading of the release's unit subsets)."""
    opts = []
    for f in free.values():
        o = {0, f} | {2**i for i in range(int(math.log2(f)) + 1)} if f > 0 else {0}
        opts.append(sorted(o))
    out = [dict(zip(free, c, strict=True)) for c in itertools.product(*opts)
           if lo <= sum(c) <= (hi if hi is not None else sum(c)) and sum(c) > 0]
    out.sort(key=lambda d: (sum(d.values()), tuple(d.values())))
    return out[:limit] if limit is not None else out


@register
class JabasPolicy(Policy):
    name = "jabas"
    needs_perf_models = True
    description = "JABAS: adaptive batch (gradient similarity) + IIDP on heterogeneous GPUs + epoch auto-scaling."
    interval = 60.0
    elastic = True
    needs_progress = True

    def __init__(self, objective: Objective = "time", similarity_target: float = 0.1, adjust_interval: int = 100,
                 max_candidates: int = 256, move_horizon: int = 1) -> None:
        if objective not in ("time", "cost"):
            raise ValueError(f"objective must be 'time' or 'cost', got {objective!r}")
        self.objective: Objective = objective
        self.gamma = similarity_target
        self.p = adjust_interval
        self.max_candidates = max_candidates
        self.move_horizon = move_horizon
        self._jobs: dict[str, dict[str, int]] = {}  # job -> {"gbs", "epoch", "step"}
        self._perf: dict[int, tuple[Application, PolluxIIDP, PolluxGradTrace, int]] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"jobs": {k: dict(v) for k, v in self._jobs.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._jobs = {k: {a: int(b) for a, b in v.items()} for k, v in dict(state.get("jobs", {})).items()}

    def _models(self, app: Application) -> tuple[PolluxIIDP, PolluxGradTrace, int]:
        hit = self._perf.get(id(app))
        if hit is None or hit[0] is not app:
            hit = self._perf[id(app)] = (app, PolluxIIDP(app), grad_trace(app), dataset_size(app))
        return hit[1], hit[2], hit[3]

    def _cfg(self, app: Application) -> AdaptiveBatchingConfig:
        return AdaptiveBatchingConfig(self.gamma, app.init_batch_size, app.max_batch_size,
                                      adjust_interval=self.p)

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        assert ctx.perf is not None, "jabas needs performance models"
        perf_all = ctx.perf
        self._jobs = {k: v for k, v in self._jobs.items() if k in snap.jobs}
        cap = {n.node_id: n.num_gpus for n in snap.nodes}
        ntype = {n.node_id: n.gpu_type for n in snap.nodes}
        replan: dict[str, bool] = {}
        for jid, job in snap.jobs.items():
            st = self._jobs.get(jid)
            replan[jid] = (not job.is_running or st is None or st["epoch"] != job.epoch
                           or any(n not in cap for n in job.allocation.nodes))
            if not replan[jid]:
                for n, g in job.allocation.placement:
                    cap[n] -= g
        if any(v < 0 for v in cap.values()):  # inconsistent snapshot: re-plan everything
            cap = {n.node_id: n.num_gpus for n in snap.nodes}
            replan = dict.fromkeys(snap.jobs, True)
        share = math.ceil(sum(n.num_gpus for n in snap.nodes) / max(len(snap.jobs), 1))
        allocs: dict[str, Allocation] = {}
        reasons: dict[str, str] = {}
        for jid, job in snap.jobs.items():
            if not replan[jid]:
                allocs[jid] = job.allocation
                continue
            avail = dict(cap)  # re-planned jobs' own GPUs were never subtracted
            app = _application(perf_all, job.spec.application)
            if app is None:
                reasons[jid] = f"no profile for application {job.spec.application!r}"
                continue
            got = self._plan(job, app, snap.nodes, avail, ntype, share)
            if got is None:
                reasons[jid] = "no feasible allocation in the GPUs offered"
                continue
            alloc, st = got
            if job.is_running and sorted(alloc.placement) == sorted(job.allocation.placement) \
                    and alloc.batch_size == job.allocation.batch_size:
                alloc = job.allocation
            self._jobs[jid] = st
            for n, g in alloc.placement:
                cap[n] -= g
            allocs[jid] = alloc
        return Decision(allocs, reasons)

    def _plan(self, job: JobView, app: Application, nodes: Sequence[NodeView], avail: Mapping[str, int],
              ntype: Mapping[str, str], share: int) -> tuple[Allocation, dict[str, int]] | None:
        perf, trace, ds = self._models(app)
        spec = job.spec
        cfg = self._cfg(app)
        st = self._jobs.get(spec.job_id)
        gbs = min(max(spec.batch_size, cfg.lower_bound), cfg.upper_bound) if st is None else st["gbs"]
        step = 1 if st is None else st["step"]
        if st is not None and st["epoch"] < job.epoch:  # advance the controller over the finished epochs
            for e in range(st["epoch"], job.epoch):
                gbs, step, _ = advance_gbs(trace, cfg, gbs, e, ds, sim_step=step)
        _, _, pts = advance_gbs(trace, cfg, gbs, job.epoch, ds, sim_step=step)  # forecast of this epoch
        traj = [gbs] + [g for _, g in pts]
        lo = spec.min_gpus if spec.elastic else 1
        hi = min(spec.gpu_cap if spec.elastic else max(spec.num_gpus, spec.gpu_cap), max(share, lo))
        types = [t for t in app.gpu_types if not spec.gpu_types or t in spec.gpu_types]
        free_t = {t: sum(v for n, v in avail.items() if ntype[n] == t and v > 0) for t in types}
        types = [t for t in types if free_t.get(t, 0) > 0]
        cands = count_candidates({t: min(free_t[t], hi) for t in types}, lo, hi, self.max_candidates)
        horizon = max(min(self.move_horizon, app.max_epochs - job.epoch), 1)
        own = dict(job.allocation.placement)
        best: tuple[float, float, Allocation, HeteroConfig] | None = None
        for c in cands:
            placement = _pack(c, avail, ntype, own, nodes)
            groups: dict[str, tuple[int, ...]] = {}
            for n, g in placement:
                groups[ntype[n]] = (*groups.get(ntype[n], ()), g)
            t, used = estimate_epoch(perf, groups, traj, current_gbs=gbs, dataset=ds, interval=self.p,
                                     sync_step=step, upper=cfg.upper_bound)
            if not math.isfinite(t) or not used:
                continue
            price = sum(type_price(ty) * sum(gs) for ty, gs in groups.items()) / 3600.0
            if job.is_running and sorted(placement) != sorted(job.allocation.placement):
                t += app.restart_cost / horizon  # checkpoint-restart, amortised over `move_horizon` epochs (ours)
            key = (t, t * price) if self.objective == "time" else (t * price, t)
            if best is None or key < best[:2]:
                best = (*key, _alloc(placement, used[0], ntype), used[0])
        if best is None:
            return None
        return best[2], {"gbs": best[3].gbs, "epoch": job.epoch, "step": step}


def _pack(counts: Mapping[str, int], avail: Mapping[str, int], ntype: Mapping[str, str],
          own: Mapping[str, int], nodes: Sequence[NodeView]) -> tuple[tuple[str, int], ...]:
    """Nodes for ``counts[type]`` GPUs: the job's own nodes first, then the fullest free nodes (few nodes)."""
    out: list[tuple[str, int]] = []
    for t, need in counts.items():
        order = sorted((n for n in nodes if ntype[n.node_id] == t and avail.get(n.node_id, 0) > 0),
                       key=lambda n: (-own.get(n.node_id, 0), -avail[n.node_id], n.index))
        for n in order:
            if need <= 0:
                break
            k = min(need, avail[n.node_id])
            out.append((n.node_id, k))
            need -= k
    return tuple(out)


def _alloc(placement: tuple[tuple[str, int], ...], cfg: HeteroConfig, ntype: Mapping[str, str]) -> Allocation:
    """Allocation with the IIDP configuration: GBS, LBS and GA steps per node (max over its GPUs)."""
    acc = {n: cfg.workers[ntype[n]][1] - 1 for n, _ in placement if ntype[n] in cfg.workers}
    return Allocation(placement=placement, batch_size=cfg.gbs, local_batch=cfg.lbs, accumulation=acc)


def _application(perf: object, name: str) -> Application | None:
    """The application's models from ``ctx.perf`` (a ``PerfModels``), or None when it has no profile."""
    apps = getattr(perf, "apps", None)
    return apps.get(name) if isinstance(apps, Mapping) else None
