"""Gavel (OSDI'20, Narayanan et al.): heterogeneity-aware allocation as an LP over time fractions, realised
by a round-based mechanism.

Read, not copied: msr-fiddle/gavel `scheduler/policies/max_min_fairness.py` (LAS with performance),
`max_sum_throughput.py`, `scheduler/scheduler.py` (priorities and rounds), and the Gavel port inside Sia's
artifact (`sia-simulator/gavel.py`, `policies/`), which produced Sia's Gavel baseline.

- **Throughput** of job j on type t: optimizer steps per second at its requested size and batch, the
  replicas packed on whole nodes of t (Sia port `predict_throughput`), divided by the job's `work_scale`
  (a per-job constant the Sia port applies as its calibration factor). A type too small for the job: 0.
- **Allocation LP** (`scipy.optimize.linprog`, HiGHS) over time fractions `x[j,t] ≥ 0`, `Σ_t x[j,t] ≤ 1`,
  `Σ_j scale_j · x[j,t] ≤ GPUs of t`, with objective
  - `"las"` (default, Gavel §4.1 "LAS" = max-min fairness with performance): maximise
    `min_j Σ_t x[j,t] · tput[j,t] · scale_j / tput_prop_j`, where `tput_prop_j` is the throughput of an
    equal (proportional) share of every type;
  - `"max_sum_throughput"`: maximise `Σ_{j,t} tput[j,t] · x[j,t]` — the objective Sia's artifact actually
    runs for "its Gavel" (`simulator_config.gavel_default_policy = "max_sum_throughput_perf"`).
  Among optimal allocations HiGHS returns a vertex, the artifact's ECOS an interior point, which spreads time
  over all equally good allocations — and who runs when depends on it. We take the analytic centre of the
  optimal face (thickened by 1e-6 of the optimum): a phase-I LP for an interior point, then damped Newton on
  the log barrier (`center=True`, default; `False` keeps the vertex).
- **Rounds** (default 360 s, Sia's comparison): each job accrues `round/2` seconds on every type when it
  arrives (and the type's total too); priority = `x[j,t] / (time j received on t / time t handed out)`;
  entries (job, type) are visited by priority (then fraction), each job placed once, on a type with
  enough free GPUs; the job's and the type's time then grow by one round. A job keeps its nodes when it
  stays on the same type (the placer keeps a job's nodes when its GPU count and type are unchanged).
- Jobs are rigid: their requested GPUs and batch size (`elastic = False`).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobId, JobView, PendingReason
from elastisched.models.application import Application, packed_shape
from elastisched.policies._common import node_types
from elastisched.policies.base import Policy, PolicyContext, register

Objective = Literal["las", "max_sum_throughput"]


def step_rate(app: Application, gpu_type: str, gpus: int, per_node: int, batch: int) -> float:
    """Optimizer steps per second of a rigid job packed on whole nodes."""
    cfg = app.batch_config(gpus, batch)
    return 1.0 / app.iteration_time(gpu_type, packed_shape(gpus, per_node), cfg)


def solve_allocation(tput: np.ndarray, scale: np.ndarray, capacity: np.ndarray, objective: Objective = "las",
                     center: bool = True) -> np.ndarray:
    """Time fractions x[j, t] (jobs × types) of Gavel's LP; `tput` 0 marks a type the job cannot use."""
    from scipy.optimize import linprog  # here: scipy costs ~0.3 s to import
    from scipy.sparse import csr_matrix, hstack, vstack

    m, n = tput.shape
    if m == 0:
        return np.zeros((0, n))
    nv = m * n
    rows_job = csr_matrix((np.ones(nv), (np.repeat(np.arange(m), n), np.arange(nv))), shape=(m, nv))
    rows_cap = csr_matrix((np.repeat(scale, n).astype(float), (np.tile(np.arange(n), m), np.arange(nv))),
                          shape=(n, nv))
    ub_x = np.where(tput.reshape(-1) > 0, 1.0, 0.0)
    if objective == "las":
        prop_share = capacity / max(capacity.sum(), 1e-12)  # the proportional policy's x, rows sum to 1
        prop = tput @ prop_share
        w = np.where(prop[:, None] > 0, tput * scale[:, None] / np.where(prop[:, None] > 0, prop[:, None], 1), 0)
        # variables: x (nv), z; maximise z s.t. z − Σ_t w x ≤ 0 for each job that can run anywhere
        ok = w.sum(axis=1) > 0
        if not ok.any():
            return np.zeros((m, n))
        rows_w = csr_matrix((-w.reshape(-1), (np.repeat(np.arange(m), n), np.arange(nv))), shape=(m, nv))[ok]
        a_ub = vstack([hstack([rows_job, csr_matrix((m, 1))]), hstack([rows_cap, csr_matrix((n, 1))]),
                       hstack([rows_w, csr_matrix(np.ones((int(ok.sum()), 1)))])]).tocsr()
        b_ub = np.concatenate([np.ones(m), capacity, np.zeros(int(ok.sum()))])
        c = np.zeros(nv + 1)
        c[-1] = -1.0
        bounds = [(0.0, u) for u in ub_x] + [(0.0, None)]
    else:
        a_ub = vstack([rows_job, rows_cap]).tocsr()
        b_ub = np.concatenate([np.ones(m), capacity])
        c = -tput.reshape(-1).astype(float)
        bounds = [(0.0, u) for u in ub_x]
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if res.x is None:
        raise RuntimeError(f"gavel: LP failed ({res.message})")
    x = res.x
    if center:
        centre = _center(c, a_ub, b_ub, bounds, float(c @ res.x))
        x = centre if centre is not None else x
    return np.clip(np.round(x[:nv], 5), 0.0, 1.0).reshape(m, n)


def _center(c: np.ndarray, a_ub: Any, b_ub: np.ndarray, bounds: list[tuple[float, float | None]], opt: float,
            rel_tol: float = 1e-6) -> np.ndarray | None:
    """Analytic centre of the (slightly thickened) optimal face: the solution an interior-point solver such as
    ECOS converges to, which spreads time over all equally good allocations. None if it cannot be found."""
    from scipy.optimize import linprog

    lo = np.array([b[0] for b in bounds], dtype=float)
    hi = np.array([np.inf if b[1] is None else b[1] for b in bounds], dtype=float)
    act = hi > lo
    a = np.asarray(a_ub.todense() if hasattr(a_ub, "todense") else a_ub, dtype=float)
    rows = np.vstack([a[:, act], c[act][None, :]])
    rhs = np.concatenate([b_ub - a[:, ~act] @ lo[~act], [opt + rel_tol * max(1.0, abs(opt)) - c[~act] @ lo[~act]]])
    keep = np.abs(rows).sum(axis=1) > 0
    rows, rhs = rows[keep], rhs[keep]
    lo_a, hi_a = lo[act], hi[act]
    fin = np.isfinite(hi_a)
    k = act.sum()
    # phase I: a strictly interior point (largest uniform slack, capped at 1)
    g1 = np.vstack([np.hstack([rows, np.ones((len(rows), 1))]),
                    np.hstack([-np.eye(k), np.ones((k, 1))]),
                    np.hstack([np.eye(k)[fin], np.ones((int(fin.sum()), 1))])])
    h1 = np.concatenate([rhs, -lo_a, hi_a[fin]])
    c1 = np.zeros(k + 1)
    c1[-1] = -1.0
    r1 = linprog(c1, A_ub=g1, b_ub=h1, bounds=[(None, None)] * k + [(None, 1.0)], method="highs")
    if r1.x is None or r1.x[-1] <= 0:
        return None
    v = r1.x[:k]

    def slacks(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return rhs - rows @ v, v - lo_a, (hi_a - v)[fin]

    def phi(v: np.ndarray) -> float:
        sr, sl, sh = slacks(v)
        if min(sr.min(initial=1.0), sl.min(initial=1.0), sh.min(initial=1.0)) <= 0:
            return np.inf
        return float(-np.log(sr).sum() - np.log(sl).sum() - np.log(sh).sum())

    for _ in range(200):  # damped Newton on the log barrier (self-concordant: converges from any interior point)
        sr, sl, sh = slacks(v)
        up = np.zeros(k)
        up[fin] = 1.0 / sh
        grad = rows.T @ (1.0 / sr) - 1.0 / sl + up
        dh = np.zeros(k)
        dh[fin] = 1.0 / sh**2
        hess = (rows.T * (1.0 / sr**2)) @ rows + np.diag(1.0 / sl**2 + dh)
        step = -np.linalg.solve(hess + 1e-12 * np.eye(k), grad)
        dec = float(-grad @ step)
        if dec < 1e-12:
            break
        t, f0 = 1.0, phi(v)
        while phi(v + t * step) > f0 - 0.25 * t * dec and t > 1e-12:
            t *= 0.5
        v = v + t * step
    out = lo.copy()
    out[act] = v
    return out


@register
class GavelPolicy(Policy):
    name = "gavel"
    description = ("Gavel (OSDI'20): heterogeneity-aware max-min fairness (LAS) as an LP over time fractions "
                   "of GPU types, realised by priority rounds (360 s).")
    interval = 360.0
    elastic = False
    needs_perf_models = True

    option_help: ClassVar[dict[str, str]] = {
        "interval": "seconds between rounds (Sia's artifact runs Gavel at 360)",
        "objective": "las: least attained service; max_sum_throughput: the artifact's default policy",
        "center": "take the analytic centre of the optimal face (as the artifact's interior-point solver); false "
            "keeps HiGHS's vertex",
    }

    def __init__(self, interval: float = 360.0, objective: Objective = "las", center: bool = True) -> None:
        if objective not in ("las", "max_sum_throughput"):
            raise ValueError(f"gavel: objective={objective!r}; known: las, max_sum_throughput")
        if interval <= 0:
            raise ValueError(f"gavel: interval={interval!r} must be > 0")
        self.interval = float(interval)  # type: ignore[misc]
        self.objective: Objective = objective
        self.center = center
        self.job_time: dict[JobId, dict[str, float]] = {}
        self.type_time: dict[str, float] = {}

    def on_finish(self, job_id: JobId, now: float) -> None:
        self.job_time.pop(job_id, None)  # its time stays in the type totals, as in the artifact

    def state_dict(self) -> dict[str, Any]:
        return {"job_time": {j: dict(v) for j, v in self.job_time.items()}, "type_time": dict(self.type_time)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.job_time = {j: dict(v) for j, v in state.get("job_time", {}).items()}
        self.type_time = dict(state.get("type_time", {}))

    def _tput(self, job: JobView, app: Application, types: tuple[str, ...], per_node: dict[str, int],
              cap: dict[str, int]) -> np.ndarray:
        out = np.zeros(len(types))
        for k, t in enumerate(types):
            if t in app.gpu_types and cap[t] >= job.spec.num_gpus and (
                    not job.spec.gpu_types or t in job.spec.gpu_types):
                out[k] = step_rate(app, t, job.spec.num_gpus, per_node[t], job.spec.batch_size) / max(
                    job.spec.work_scale, 1e-12)
        return out

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        assert ctx.perf is not None or all(j.model is not None for j in snap.jobs.values()), \
            "gavel needs performance models"
        types, per_node = _types_in_order(snap)
        cap = snap.capacity_by_type()
        jids = list(snap.jobs)
        self._credit_arrivals(jids, types)
        tput = np.zeros((len(jids), len(types)))
        for i, jid in enumerate(jids):
            job = snap.jobs[jid]
            app = job.model if job.model is not None else ctx.perf.app(job.spec.application)  # type: ignore[union-attr]
            tput[i] = self._tput(job, app, tuple(types), per_node, cap)
        scale = np.array([snap.jobs[j].spec.num_gpus for j in jids], dtype=float)
        capv = np.array([cap[t] for t in types], dtype=float)
        x = solve_allocation(tput, scale, capv, self.objective, self.center)
        placed = _place_by_priority(self._priorities(x, jids, types), types, cap, tput, scale)
        return self._decide(snap, jids, placed, tput, x)

    def _credit_arrivals(self, jids: list[JobId], types: list[str]) -> None:
        """A new job starts with half a round on every type (and so does the type's total), as in Gavel."""
        for t in types:
            self.type_time.setdefault(t, 0.0)
        for jid in jids:
            if jid not in self.job_time:
                self.job_time[jid] = {t: self.interval / 2 for t in types}
                for t in types:
                    self.type_time[t] += self.interval / 2

    def _priorities(self, x: np.ndarray, jids: list[JobId], types: list[str]) -> list[tuple[float, float, int, int]]:
        """(priority, fraction x, type index, job index), best first: x over the share of time received."""
        entries: list[tuple[float, float, int, int]] = []
        for k, t in enumerate(types):
            for i, jid in enumerate(jids):
                if x[i, k] <= 0.0:
                    prio = 0.0
                else:
                    frac = self.job_time[jid].get(t, 0.0) / self.type_time[t] if self.type_time[t] else 0.0
                    prio = x[i, k] / frac if frac > 0 else x[i, k] * 1e9
                entries.append((prio, x[i, k], k, i))
        entries.sort(key=lambda e: (e[0], e[1]), reverse=True)  # stable: type order, then job order
        return entries

    def _decide(self, snap: ClusterSnapshot, jids: list[JobId], placed: dict[int, str], tput: np.ndarray,
                x: np.ndarray) -> Decision:
        """Charge this round to the placed jobs, keep those staying on their type, and explain the rest."""
        ntypes = node_types(snap)
        keep: dict[JobId, Allocation] = {}
        new: list[tuple[int, JobId, Allocation]] = []
        reasons: dict[JobId, PendingReason] = {}
        for i, jid in enumerate(jids):
            job = snap.jobs[jid]
            t_or_none = placed.get(i)
            if t_or_none is None:
                reasons[jid] = (PendingReason.INFEASIBLE if not tput[i].any() else
                                PendingReason.RESOURCES if x[i].sum() > 0 else PendingReason.PRIORITY)
                continue
            t = t_or_none
            self.job_time[jid][t] = self.job_time[jid].get(t, 0.0) + self.interval
            self.type_time[t] += self.interval
            cur_t = ntypes.get(job.allocation.placement[0][0]) if job.allocation.placement else None
            if cur_t == t and job.gpus == job.spec.num_gpus:
                keep[jid] = job.allocation
            else:
                new.append((job.spec.num_gpus, jid, Allocation(num_gpus=job.spec.num_gpus, gpu_type=t)))
        allocs: dict[JobId, Allocation] = dict(keep)
        for _, jid, a in sorted(new, key=lambda e: -e[0]):
            allocs[jid] = a
        return Decision(allocs, reasons, next_round_at=None if snap.jobs else math.inf)


def _types_in_order(snap: ClusterSnapshot) -> tuple[list[str], dict[str, int]]:
    """GPU types in node order, and the largest node of each (a job's replicas pack on whole nodes)."""
    types: list[str] = []
    per_node: dict[str, int] = {}
    for nd in snap.nodes:
        if nd.gpu_type not in per_node:
            types.append(nd.gpu_type)
        per_node[nd.gpu_type] = max(per_node.get(nd.gpu_type, 0), nd.num_gpus)
    return types, per_node


def _place_by_priority(entries: list[tuple[float, float, int, int]], types: list[str], cap: dict[str, int],
                       tput: np.ndarray, scale: np.ndarray) -> dict[int, str]:
    """Job index -> type: each job placed once, at its best-priority entry whose type still has room."""
    left = dict(cap)
    placed: dict[int, str] = {}
    for _prio, _, k, i in entries:
        t = types[k]
        if i in placed or left[t] == 0 or tput[i, k] <= 0 or scale[i] > left[t]:
            continue
        left[t] -= int(scale[i])
        placed[i] = t
    return placed
