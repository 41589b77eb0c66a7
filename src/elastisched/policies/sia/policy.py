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
"""

from __future__ import annotations

import math
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
    sia_configs,
)

#: seconds lost per restart in the restart factor (artifact `sia.py::get_restart_penalty`, measured)
RESTART_PENALTY: dict[str, float] = {"deepspeech2": 25.0, "imagenet": 250.0, "cifar10": 30.0, "bert": 120.0,
                                     "yolov3": 45.0}
ZERO_ALLOC_GAIN = 1e-4
GOODPUT_CLIP = 3000.0
NCF_BATCH = 32768


@dataclass(frozen=True, slots=True)
class _Layout:
    types: tuple[str, ...]  # cluster order (first appearance among nodes)
    per_node: dict[str, int]
    capacity: dict[str, int]
    configs: tuple[tuple[str, int, int], ...]  # (type, nodes, GPUs)


def _layout(snap: ClusterSnapshot, max_gpus: int) -> _Layout:
    types: list[str] = []
    per_node: dict[str, int] = {}
    count: dict[str, int] = {}
    for n in snap.nodes:
        if n.gpu_type not in per_node:
            types.append(n.gpu_type)
        per_node[n.gpu_type] = max(per_node.get(n.gpu_type, 0), n.num_gpus)
        count[n.gpu_type] = count.get(n.gpu_type, 0) + 1
    cap = snap.capacity_by_type()
    configs = tuple((t, k, g) for t in types for k, g in sia_configs(per_node[t], count[t], max_gpus))
    return _Layout(tuple(types), per_node, cap, configs)


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
    }

    def __init__(self, p: float = -0.5, lambda_a: float = 0.01, lambda_n: float = 1.1, max_gpus: int = 64,
                 mip_rel_gap: float = 1e-4, retune_batch: bool = False) -> None:
        if p == 0:
            raise ValueError("sia: p must be non-zero")
        self.p, self.lambda_a, self.lambda_n = p, lambda_a, lambda_n
        self.max_gpus, self.mip_rel_gap = max_gpus, mip_rel_gap
        self.retune_batch = retune_batch
        self.models: dict[JobId, SiaJobModel] = {}
        self.prev: dict[JobId, tuple[str, int]] = {}  # (type, GPUs) chosen last round
        self._layout_for: object = None
        self._layout: _Layout | None = None
        self._ratio_cache: dict[tuple[int, str, str], float] = {}

    def on_finish(self, job_id: JobId, now: float) -> None:
        self.models.pop(job_id, None)
        self.prev.pop(job_id, None)

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

    def _row(self, job: JobView, app: Application, model: SiaJobModel, lay: _Layout,
             allowed: tuple[str, ...]) -> np.ndarray:
        """Normalised goodput of `job` for every configuration (≤ ZERO_ALLOC_GAIN = invalid)."""
        row = np.full(len(lay.configs), ZERO_ALLOC_GAIN)
        tp = app.profile.throughput
        max_batch = NCF_BATCH if app.name == "ncf" else job.spec.batch_size
        max_batch = max(max_batch, app.init_batch_size)
        maxrep = max(min(max(2 * model.max_profiled_replicas(t), 1), self.max_gpus,
                         app.max_batch_size // micro_batch_range(tp[t])[0]) for t in allowed)
        if app.name == "ncf":
            maxrep = 1
        minrep = 1
        if job.spec.elastic:  # a job that declares bounds stays within them
            minrep, maxrep = job.spec.min_gpus, max(job.spec.min_gpus, min(maxrep, job.spec.gpu_cap))
        seen = [t for t in lay.types if t in model.types_seen and t in tp]
        unknown: list[str] = []
        known_min = math.inf
        for t in allowed:
            idx = [i for i, (ct, _, g) in enumerate(lay.configs) if ct == t and minrep <= g <= maxrep]
            src = t if model.params(t) is not None else (seen[0] if seen and model.grad is not None else None)
            if src is None or model.grad is None or not idx:
                unknown.append(t)
                continue
            params = model.params(src)
            assert params is not None
            gpus = np.array([lay.configs[i][2] for i in idx], dtype=float)
            nodes = np.ceil(gpus / lay.per_node[src]) if src != t else np.array([lay.configs[i][1] for i in idx],
                                                                                 dtype=float)
            key = (t, src, minrep, maxrep, max_batch)
            good = model.cache.get(key)
            if good is None:
                good, _, _ = optimize_batch(params, model.grad, app.init_batch_size, nodes, gpus, max_batch,
                                            micro_batch_range(tp[src]))
                if src != t:
                    good = good * self._ratio(app, t, src)
                model.cache[key] = good
            row[idx] = np.maximum(good, ZERO_ALLOC_GAIN)
            ok = good > ZERO_ALLOC_GAIN
            if ok.any():
                known_min = min(known_min, float(good[ok].min()))
        row = row * (1.0 / known_min if known_min < math.inf else 1.0)
        for t in unknown:  # never ran anywhere: worth 1 on its smallest valid size of each type
            i_min = next((i for i, (ct, _, g) in enumerate(lay.configs) if ct == t and minrep <= g <= maxrep), None)
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
               gpus: int, lay: _Layout) -> int:
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
            self._layout_for, self._layout = snap.nodes, _layout(snap, self.max_gpus)
        lay = self._layout
        ntypes = node_types(snap)
        rows: list[np.ndarray] = []
        jids: list[JobId] = []
        apps: list[Application | None] = []
        forced: dict[int, int] = {}
        reasons: dict[JobId, PendingReason] = {}
        extra_cols: list[tuple[int, str, int, float]] = []  # rigid jobs: (job row, type, GPUs, value)
        for jid, job in snap.jobs.items():
            app = job_model(job, ctx)
            allowed = tuple(t for t in lay.types if (not job.spec.gpu_types or t in job.spec.gpu_types)
                            and (app is None or t in app.gpu_types)
                            and lay.capacity.get(t, 0) >= (1 if app else job.spec.num_gpus))
            if not allowed:
                reasons[jid] = PendingReason.GPU_TYPE if job.spec.gpu_types else PendingReason.INFEASIBLE
                continue
            r = len(jids)
            jids.append(jid)
            apps.append(app)
            cur_t = ntypes.get(job.allocation.placement[0][0]) if job.allocation.placement else None
            if app is None or job.spec.category == "rigid":
                row = np.full(len(lay.configs), ZERO_ALLOC_GAIN)
                for t in allowed:
                    extra_cols.append((r, t, job.spec.num_gpus, float(job.spec.num_gpus)))
                rows.append(row)
                continue
            model = self.models.setdefault(jid, SiaJobModel())
            self._observe(snap, job, app, model)
            row = self._row(job, app, model, lay, allowed)
            prev = self.prev.get(jid)
            prev_i = None
            if prev is not None and cur_t == prev[0] and job.gpus == prev[1]:
                prev_i = next((i for i, c in enumerate(lay.configs) if c[0] == prev[0] and c[2] == prev[1]), None)
            if prev_i is not None:
                keep = row[prev_i]
                row = row * self._restart_factor(job, snap)
                row[prev_i] = keep
                if job.phase is JobPhase.RESTARTING:
                    forced[r] = prev_i
            rows.append(row)
        chosen = self._solve(rows, extra_cols, forced, lay)
        return self._decide(snap, lay, jids, apps, chosen, reasons)

    def _solve(self, rows: list[np.ndarray], extra: list[tuple[int, str, int, float]], forced: dict[int, int],
               lay: _Layout) -> dict[int, tuple[str, int]]:
        """The MILP; returns job row → (type, GPUs)."""
        from scipy.optimize import Bounds, LinearConstraint, milp  # here: scipy costs ~0.3 s to import
        from scipy.sparse import csr_matrix

        cols: list[tuple[int, str, int, float, bool]] = []  # (job row, type, GPUs, cost, forced)
        for r, row in enumerate(rows):
            with np.errstate(divide="ignore"):  # a restart factor of 0 gives 0^p = inf: clipped, as there
                s = np.minimum(np.round(np.power(row, self.p), 2), GOODPUT_CLIP) if self.p < 0 else row**self.p
            best: dict[str, float] = {}
            for i, (t, _, g) in enumerate(lay.configs):  # configs of a type come in increasing GPU count
                is_forced = forced.get(r) == i
                cost = float(s[i]) - self.lambda_n if self.p < 0 else -(float(s[i]) - self.lambda_n)
                # a configuration no cheaper than a smaller one of the same type is never needed (dominated)
                if (row[i] > ZERO_ALLOC_GAIN and cost < min(0.0, best.get(t, 0.0))) or is_forced:
                    cols.append((r, t, g, cost, is_forced))
                    if row[i] > ZERO_ALLOC_GAIN:
                        best[t] = min(best.get(t, 0.0), cost)
        for r, t, g, v in extra:
            s = round(v**self.p, 2) if self.p < 0 else v**self.p
            cost = s - self.lambda_n if self.p < 0 else -(s - self.lambda_n)
            if cost < 0:
                cols.append((r, t, g, cost, False))
        if not cols:
            return {}
        n = len(cols)
        c = np.array([x[3] for x in cols])
        tix = {t: k for k, t in enumerate(lay.types)}
        a_job = csr_matrix((np.ones(n), ([x[0] for x in cols], np.arange(n))), shape=(len(rows), n))
        a_gpu = csr_matrix(([float(x[2]) for x in cols], ([tix[x[1]] for x in cols], np.arange(n))),
                           shape=(len(lay.types), n))
        cap = np.array([lay.capacity[t] for t in lay.types], dtype=float)
        lb = np.array([1.0 if x[4] else 0.0 for x in cols])
        res = milp(c, integrality=np.ones(n), bounds=Bounds(lb, np.ones(n)),
                   constraints=[LinearConstraint(a_job, 0, 1), LinearConstraint(a_gpu, 0, cap)],
                   options={"mip_rel_gap": self.mip_rel_gap})
        if res.x is None:
            raise RuntimeError(f"sia: MILP failed ({res.message})")
        return {cols[k][0]: (cols[k][1], cols[k][2]) for k in np.flatnonzero(res.x > 0.5)}

    def _decide(self, snap: ClusterSnapshot, lay: _Layout, jids: list[JobId], apps: list[Application | None],
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
