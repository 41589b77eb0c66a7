"""Sia (SOSP'23, Jayaram Subramanya et al.): heterogeneity-aware, goodput-optimised elastic scheduling.

Faithful to the artifact (siasosp23/artifacts `sia-simulator/sia.py::SiaPolicy.optimize_mip` and
`__solve_mip_rescaled`, `cluster.py::get_sia_multi_job_info`, run as in `run_experiment.sh`:
`--policy_p_val=-0.5 --mip_lambda_a=0.01 --mip_lambda_n=1.1 --interval=60 --project_throughputs
--share_max_replicas`), read, not copied. Every 60 s:

1. **Goodput matrix.** For every job and every (GPU type, nodes, GPUs) configuration (`sia_configs`), the
   job's best goodput there (`policies/sia/goodput.py`: its own fitted per-type model, or — on a type it has
   never run on — the goodput of the first type it has run on × the 1-GPU throughput ratio of the two types;
   a job that has never run anywhere is worth 1 on one GPU of each type and nothing else). The batch search
   is capped at the job's requested batch (ncf: 32,768) as the artifact's speedup function is. Only
   configurations up to `max_replicas` GPUs are valid: min(max(2 × largest size observed, 1), 64, max batch
   / min micro-batch), the largest over types (`share_max_replicas`); ncf jobs get 1 GPU. Each job's row
   is normalised by its smallest valid entry (so ≥ 1).
2. **Restart factor.** Every configuration but the one a job held last round is multiplied by
   `r = max(age − restarts · penalty, 0) / (age + penalty)` (1 while age < penalty; penalties per
   application: `RESTART_PENALTY`).
3. **MILP** (`scipy.optimize.milp`, HiGHS, relative gap 1e-4 as the artifact's CBC): binary `X[j,k]`,
   minimise `Σ X·round(S^p, 2) + λ_n · (#jobs − Σ X)` with p = −0.5 (entries clipped at 3,000), at most one
   configuration per job, GPUs per type within capacity; a job still paying its restart keeps its
   configuration (`preserve_ckpt_allocs`).

Readings of ambiguities (docs/peers.md lists them all):
- `lambda_a` is accepted but, as in the artifact, unused by the objective (the restart factor does its job).
- Observations: each round a running job (past its restart) "measures" its step/sync time, read from its
  own performance model at its current placement and micro-batch — exactly the number the artifact's
  simulated job feeds to `update_params`.
- Batch size: the artifact re-optimises a job's batch every step without restarting it. The batch is chosen
  when the configuration changes (by the goodput model, after recording the first step the job would run at
  its initial batch there); with `retune_batch=True` it is also re-optimised every round for a job that keeps
  its configuration — a batch-only change, which costs a restart unless the body applies it in place (the
  `sia` experiment's simulator does, as AdaptDL does).
- Configurations ≥ 0 cost are never chosen and are dropped from the MILP; ties between equal-cost solutions
  are broken by HiGHS, not CBC. Placement is left to the engine's placer (whole nodes first, like the
  artifact's `alloc_to_placement_fast`); a job keeping its (type, GPU count) keeps its nodes.
- Jobs without a performance model (and `category == "rigid"` jobs) are scheduled rigidly at their
  requested size on any type, worth their GPU count, as the artifact's rigid jobs.

At cluster scale (issue 22): what a job reports is taken in only when its allocation, phase, batch or epoch
changed; its goodput row is kept until its model changes, and the round's new rows are priced in one
vectorised call (`goodput.optimize_batch_many`); the MILP is solved by HiGHS only when needed (`sia.milp`).
None of this changes a decision. `budget_s` (ours, default None = unbounded) bounds a round's CPU time: fits
take at most half of it (a row that needs a fit not yet made is priced with the fit before its latest
observation, and made again with its fit in a later round), and HiGHS gets the rest as its time limit (at least
`MIN_SOLVE_S`), returning the best solution found by then. A budget that binds makes a run depend on the
machine's speed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobId, JobPhase, JobView, PendingReason
from elastisched.models.application import Application, packed_shape
from elastisched.policies._common import job_model, node_types
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.sia.goodput import (
    SiaJobModel,
    micro_batch_range,
    one_gpu_throughput,
    optimize_batch,
    optimize_batch_many,
)
from elastisched.policies.sia.milp import ZERO_ALLOC_GAIN, Layout, columns, layout, solve

#: seconds lost per restart in the restart factor (artifact `sia.py::get_restart_penalty`, measured)
RESTART_PENALTY: dict[str, float] = {"deepspeech2": 25.0, "imagenet": 250.0, "cifar10": 30.0, "bert": 120.0,
                                     "yolov3": 45.0}
NCF_BATCH = 32768
FIT_SHARE = 0.5  # with a budget: the share of it a round may spend fitting step-time models
MIN_SOLVE_S = 0.05  # with a budget: the least time the MILP is given


@dataclass
class _RowPlan:
    minrep: int
    maxrep: int
    parts: list[tuple[str, str, list[int], tuple[Any, ...], float]]  # (type, priced by, configs, key, max batch)
    unknown: list[str]  # allowed types it has no goodput for
    stale: bool = False  # some part is priced with a stand-in fit (out of budget)
    fit: bool = True  # whether fits not yet made may be made

    @staticmethod
    def nodes_gpus(idx: list[int], t: str, src: str, lay: Layout | None) -> tuple[np.ndarray, np.ndarray]:
        """(nodes, GPUs) of configurations `idx` as priced on `src` (another type's nodes: packed on its node size)."""
        assert lay is not None
        gpus = np.array([lay.configs[i][2] for i in idx], dtype=float)
        if src != t:
            return np.ceil(gpus / lay.per_node[src]), gpus
        return np.array([lay.configs[i][1] for i in idx], dtype=float), gpus


@register
class SiaPolicy(Policy):
    name = "sia"
    description = ("Sia (SOSP'23): per-GPU-type goodput models bootstrapped from 1-GPU profiles, "
                   "configurations × GPU types chosen by a MILP (p-norm, p = -0.5) every 60 s.")
    interval = 60.0
    elastic = True

    option_help: ClassVar[dict[str, str]] = {
        "p": "p of the p-norm of speed-ups the MILP maximises (non-zero)",
        "lambda_a": "accepted and, as in the artifact, unused by the objective",
        "lambda_n": "λ_n: the MILP's price of each job left without GPUs",
        "max_gpus": "most GPUs one job may get",
        "mip_rel_gap": "relative gap at which the MILP stops",
        "retune_batch": "re-choose a running job's batch every round without a restart",
        "budget_s": "CPU seconds a round may spend before it returns the best found so far (none: unbounded)",
    }

    def __init__(self, p: float = -0.5, lambda_a: float = 0.01, lambda_n: float = 1.1, max_gpus: int = 64,
                 mip_rel_gap: float = 1e-4, retune_batch: bool = False, budget_s: float | None = None) -> None:
        if p == 0:
            raise ValueError("sia: p must be non-zero")
        if budget_s is not None and not budget_s > 0:
            raise ValueError(f"sia: budget_s must be > 0 seconds or None, got {budget_s!r}")
        self.budget_s = budget_s
        self._solved: dict[bytes, tuple[int, ...]] = {}  # MILP inputs → chosen columns (recent rounds)
        self._seen: dict[JobId, tuple[Any, ...]] = {}  # what each job was last observed at
        self.p, self.lambda_a, self.lambda_n = p, lambda_a, lambda_n
        self.max_gpus, self.mip_rel_gap = max_gpus, mip_rel_gap
        self.retune_batch = retune_batch
        self.models: dict[JobId, SiaJobModel] = {}
        self.prev: dict[JobId, tuple[str, int]] = {}  # (type, GPUs) chosen last round
        self._layout_for: object = None
        self._layout: Layout | None = None
        self._ratio_cache: dict[tuple[int, str, str], float] = {}

    def on_finish(self, job_id: JobId, now: float) -> None:
        self.models.pop(job_id, None)
        self.prev.pop(job_id, None)
        self._seen.pop(job_id, None)

    def state_dict(self) -> dict[str, Any]:
        """What Sia has learnt (observed step times, gradient statistics) and last round's configurations."""
        return {"prev": {j: list(v) for j, v in self.prev.items()},
                "jobs": {j: {"grad": list(m.grad) if m.grad else None,
                             "observed": {t: [[*k, *v] for k, v in prof.items()] for t, prof in m.observed.items()}}
                         for j, m in self.models.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prev = {j: (str(v[0]), int(v[1])) for j, v in state.get("prev", {}).items()}
        self.models = {}
        for j, d in state.get("jobs", {}).items():
            m = self.models[j] = SiaJobModel()
            m.grad = (float(d["grad"][0]), float(d["grad"][1])) if d.get("grad") else None
            for t, pts in d.get("observed", {}).items():
                m.observed[t] = {(int(n), int(r), int(b)): (float(st), float(sy)) for n, r, b, st, sy in pts}

    # ------------------------------------------------------------------ helpers
    def _ratio(self, app: Application, src: str, dst: str) -> float:
        key = (id(app), src, dst)
        r = self._ratio_cache.get(key)
        if r is None:
            tp = app.profile.throughput
            r = self._ratio_cache[key] = one_gpu_throughput(tp[src]) / one_gpu_throughput(tp[dst])
        return r

    def _observe(self, snap: ClusterSnapshot, job: JobView, app: Application, model: SiaJobModel) -> None:
        """A running job past its restart reports its step time at its current configuration."""
        if job.phase is not JobPhase.RUNNING or not job.allocation.placement:
            return
        t = node_types(snap)[job.allocation.placement[0][0]]
        if t not in app.gpu_types:
            return
        shape = tuple(g for _, g in job.allocation.placement)
        cfg = app.batch_config(job.gpus, job.batch_size or job.spec.batch_size)
        step, sync = app.model(t).step_sync(shape, float(cfg.micro_batch))
        model.observe(t, len(shape), job.gpus, cfg.micro_batch, step, sync,
                      app.efficiency.grad_stats(cfg.global_batch, job.epoch))

    def _row(self, job: JobView, app: Application, model: SiaJobModel, lay: Layout, allowed: tuple[str, ...],
             plan: _RowPlan | None = None) -> np.ndarray:
        """Normalised goodput of `job` for every configuration (≤ ZERO_ALLOC_GAIN = invalid); kept (read-only)
        until the job's model changes. A row priced with a stand-in fit (`plan.stale`) is kept apart and made
        again, with its fit, in a later round."""
        key = ("row", lay.sig, allowed)
        hit = model.cache.get(key)
        if hit is None:
            if plan is None:
                plan = self._row_plan(job, app, model, lay, allowed)
                self._fill([(app, model, plan)])
            hit = self._assemble(plan, model, lay)
            hit.setflags(write=False)
            model.cache[(*key, "stale") if plan.stale else key] = hit
        return hit

    def _row_plan(self, job: JobView, app: Application, model: SiaJobModel, lay: Layout,
                  allowed: tuple[str, ...], fit: bool = True) -> _RowPlan:
        """Which goodputs a job's row is made of: per allowed type, its valid configurations, the type whose fit
        prices them (its own, else the first it ran on) and their cache key; the types it never ran on.
        `fit=False`: fits not yet made are not made (`SiaJobModel.params`)."""
        tp = app.profile.throughput
        max_batch = max(NCF_BATCH if app.name == "ncf" else job.spec.batch_size, app.init_batch_size)
        maxrep = max(min(max(2 * model.max_profiled_replicas(t), 1), self.max_gpus,
                         app.max_batch_size // micro_batch_range(tp[t])[0]) for t in allowed)
        if app.name == "ncf":
            maxrep = 1
        minrep = 1
        if job.spec.elastic:  # a job that declares bounds stays within them
            minrep, maxrep = job.spec.min_gpus, max(job.spec.min_gpus, min(maxrep, job.spec.gpu_cap))
        seen = [t for t in lay.types if t in model.types_seen and t in tp]
        parts: list[tuple[str, str, list[int], tuple[Any, ...], float]] = []
        unknown: list[str] = []
        stale = False
        for t in allowed:
            idx = [i for i, (ct, _, g) in enumerate(lay.configs) if ct == t and minrep <= g <= maxrep]
            src = t if model.params(t, fit) is not None else (seen[0] if seen and model.grad is not None else None)
            if src is None or model.grad is None or not idx or model.params(src, fit) is None:
                unknown.append(t)
                continue
            old = not fit and model.stale(src)
            stale |= old
            parts.append((t, src, idx, (t, src, minrep, maxrep, max_batch, *(("stale",) if old else ())),
                          float(max_batch)))
        return _RowPlan(minrep, maxrep, parts, unknown, stale, fit)

    def _fill(self, plans: list[tuple[Application, SiaJobModel, _RowPlan]]) -> None:
        """Compute the per-type goodputs the planned rows need and no cache holds, in one vectorised call."""
        queries: list[tuple[Any, ...]] = []
        where: list[tuple[SiaJobModel, tuple[Any, ...], float]] = []
        for app, model, plan in plans:
            for t, src, idx, key, max_batch in plan.parts:
                if key in model.cache:
                    continue
                lay_nodes, gpus = plan.nodes_gpus(idx, t, src, self._layout)
                queries.append((model.params(src, plan.fit), model.grad, app.init_batch_size, lay_nodes, gpus,
                                max_batch, micro_batch_range(app.profile.throughput[src])))
                where.append((model, key, self._ratio(app, t, src) if src != t else 1.0))
                model.cache[key] = None  # claimed: one query per key
        for (model, key, ratio), good in zip(where, optimize_batch_many(queries), strict=True):  # type: ignore[arg-type]
            model.cache[key] = good * ratio if ratio != 1.0 else good

    @staticmethod
    def _assemble(plan: _RowPlan, model: SiaJobModel, lay: Layout) -> np.ndarray:
        row = np.full(len(lay.configs), ZERO_ALLOC_GAIN)
        known_min = math.inf
        for _, _, idx, key, _ in plan.parts:
            good = model.cache[key]
            row[idx] = np.maximum(good, ZERO_ALLOC_GAIN)
            ok = good > ZERO_ALLOC_GAIN
            if ok.any():
                known_min = min(known_min, float(good[ok].min()))
        row = row * (1.0 / known_min if known_min < math.inf else 1.0)
        for t in plan.unknown:  # never ran anywhere: worth 1 on its smallest valid size of each type
            i_min = next((i for i, (ct, _, g) in enumerate(lay.configs)
                          if ct == t and plan.minrep <= g <= plan.maxrep), None)
            if i_min is not None:
                row[i_min] = 1.0
        row[row <= ZERO_ALLOC_GAIN] = ZERO_ALLOC_GAIN
        return row

    def _restart_factor(self, job: JobView, snap: ClusterSnapshot) -> float:
        penalty = RESTART_PENALTY.get(job.spec.application, 30.0)
        age = snap.now - job.spec.submit_time
        if age < penalty:
            return 1.0
        return max(age - job.num_restarts * penalty, 0.0) / (age + penalty)

    def _batch(self, snap: ClusterSnapshot, job: JobView, app: Application, model: SiaJobModel, t: str,
               gpus: int, lay: Layout) -> int:
        """Goodput-optimal global batch for a new configuration (artifact `Job.update_local_bsz`)."""
        lo, hi = micro_batch_range(app.profile.throughput[t])
        shape = packed_shape(gpus, lay.per_node[t])
        if model.params(t) is None:  # the first step there runs at the initial batch and is measured
            b0 = max(app.init_batch_size, lo * gpus)
            cfg = app.batch_config(gpus, b0)
            step, sync = app.model(t).step_sync(shape, float(cfg.micro_batch))
            model.observe(t, len(shape), gpus, cfg.micro_batch, step, sync,
                          app.efficiency.grad_stats(cfg.global_batch, job.epoch))
        params = model.params(t)
        assert params is not None and model.grad is not None
        _, micro, accum = optimize_batch(params, model.grad, app.init_batch_size, np.array([len(shape)]),
                                         np.array([gpus]), app.max_batch_size, (lo, hi))
        return int(max(gpus * int(micro[0]) * (int(accum[0]) + 1), app.init_batch_size))

    # ------------------------------------------------------------------ round
    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        if self._layout_for is not snap.nodes or self._layout is None:
            self._layout_for, self._layout = snap.nodes, layout(snap, self.max_gpus)
        lay = self._layout
        t0 = time.thread_time()
        reasons: dict[JobId, PendingReason] = {}
        entries = self._entries(snap, ctx, lay, reasons)
        fit_until = None if self.budget_s is None else t0 + FIT_SHARE * self.budget_s
        plans = {jid: (app, model, self._row_plan(job, app, model, lay, allowed,
                                                  fit_until is None or time.thread_time() < fit_until))
                 for jid, job, app, allowed, model in entries
                 if model is not None and app is not None and ("row", lay.sig, allowed) not in model.cache}
        self._fill(list(plans.values()))  # the round's new goodputs at once
        ntypes = node_types(snap)
        rows: list[np.ndarray] = []
        forced: dict[int, int] = {}
        extra_cols: list[tuple[int, str, int, float]] = []  # rigid jobs: (job row, type, GPUs, value)
        for r, (jid, job, app, allowed, model) in enumerate(entries):
            if app is None or model is None:
                for t in allowed:
                    extra_cols.append((r, t, job.spec.num_gpus, float(job.spec.num_gpus)))
                rows.append(np.full(len(lay.configs), ZERO_ALLOC_GAIN))
                continue
            row = self._row(job, app, model, lay, allowed, plans[jid][2] if jid in plans else None)
            cur_t = ntypes.get(job.allocation.placement[0][0]) if job.allocation.placement else None
            prev = self.prev.get(jid)
            prev_i = lay.first.get(prev) if prev is not None and cur_t == prev[0] and job.gpus == prev[1] else None
            if prev_i is not None:
                keep = row[prev_i]
                row = row * self._restart_factor(job, snap)
                row[prev_i] = keep
                if job.phase is JobPhase.RESTARTING:
                    forced[r] = prev_i
            rows.append(row)
        left = None if self.budget_s is None else max(self.budget_s - (time.thread_time() - t0), MIN_SOLVE_S)
        chosen = self._solve(rows, extra_cols, forced, lay, left)
        return self._decide(snap, lay, [e[0] for e in entries], [e[2] for e in entries], chosen, reasons)

    def _entries(self, snap: ClusterSnapshot, ctx: PolicyContext, lay: Layout, reasons: dict[JobId, PendingReason]
                 ) -> list[tuple[JobId, JobView, Application | None, tuple[str, ...], SiaJobModel | None]]:
        """The jobs the MILP considers, each with its model, allowed types and (goodput jobs) its Sia model, fed
        with what it ran since it was last observed; the others get their reason."""
        out: list[tuple[JobId, JobView, Application | None, tuple[str, ...], SiaJobModel | None]] = []
        for jid, job in snap.jobs.items():
            app = job_model(job, ctx)
            allowed = tuple(t for t in lay.types if (not job.spec.gpu_types or t in job.spec.gpu_types)
                            and (app is None or t in app.gpu_types)
                            and lay.capacity.get(t, 0) >= (1 if app else job.spec.num_gpus))
            if not allowed:
                reasons[jid] = PendingReason.GPU_TYPE if job.spec.gpu_types else PendingReason.INFEASIBLE
                continue
            model = None
            if app is not None and job.spec.category != "rigid":
                model = self.models.setdefault(jid, SiaJobModel())
                sig = (job.allocation, job.phase, job.batch_size, job.epoch)
                seen = self._seen.get(jid)
                if seen is None or any(a is not b and a != b for a, b in zip(sig, seen, strict=True)):
                    self._observe(snap, job, app, model)  # inputs unchanged since last time: nothing new to see
                    self._seen[jid] = sig
            out.append((jid, job, app, allowed, model))
        return out

    def _solve(self, rows: list[np.ndarray], extra: list[tuple[int, str, int, float]], forced: dict[int, int],
               lay: Layout, time_limit: float | None = None) -> dict[int, tuple[str, int]]:
        """The MILP (`sia.milp`); returns job row → (type, GPUs)."""
        return solve(columns(rows, extra, forced, lay, self.p, self.lambda_n), lay, len(rows), self.mip_rel_gap,
                     time_limit, self._solved)

    def _decide(self, snap: ClusterSnapshot, lay: Layout, jids: list[JobId], apps: list[Application | None],
                chosen: dict[int, tuple[str, int]], reasons: dict[JobId, PendingReason]) -> Decision:
        ntypes = node_types(snap)
        keep: dict[JobId, Allocation] = {}
        new: list[tuple[int, JobId, Allocation]] = []
        for r, jid in enumerate(jids):
            job = snap.jobs[jid]
            if r not in chosen:
                self.prev.pop(jid, None)
                reasons[jid] = PendingReason.NOT_SELECTED
                continue
            t, g = chosen[r]
            self.prev[jid] = (t, g)
            cur_t = ntypes.get(job.allocation.placement[0][0]) if job.allocation.placement else None
            app = apps[r]
            if cur_t == t and job.gpus == g:
                keep[jid] = job.allocation
                if self.retune_batch and app is not None and job.spec.category != "rigid" and jid in self.models:
                    b = self._batch(snap, job, app, self.models[jid], t, g, lay)
                    if b != job.batch_size:
                        a = job.allocation
                        keep[jid] = Allocation(a.placement, 0, a.gpu_type, b)
                continue
            if app is None or job.spec.category == "rigid":
                batch = None
            else:
                batch = self._batch(snap, job, app, self.models[jid], t, g, lay)
            new.append((g, jid, Allocation(num_gpus=g, gpu_type=t, batch_size=batch)))
        allocs: dict[JobId, Allocation] = dict(keep)
        for _, jid, a in sorted(new, key=lambda x: -x[0]):
            allocs[jid] = a
        return Decision(allocs, reasons)

