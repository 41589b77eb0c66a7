"""Pollux (Qiao et al., OSDI'21): goodput-adaptive co-scheduling of GPUs and batch sizes.

Every 60 s the whole cluster is re-planned (§4.2): each job's *speedup* — its best goodput on r GPUs over its
goodput at a fair share — comes from a step-time model fitted to what the job has run so far and its current
gradient statistics (`policies/pollux/goodput.py`), and a genetic search over job × node matrices
(`policies/pollux/ga.py`) maximises the p = −1 power mean of the speedups, with a restart penalty,
interference avoidance and node limits. A job that moves gets the batch size (and accumulation) that
maximises its predicted goodput on its new GPUs.

Faithful to the artifact (petuum/adaptdl `osdi21-artifact`, `simulator/pollux.py`, `simulator.py`
`get_pollux_job_info` / `Job.update_params` / `Job.update_local_bsz`; read, not copied):
- Jobs are ordered by attained service, then submission time (earlier jobs win node capacity in repair).
- A job learns online: after it has run at a configuration, the (nodes, replicas, atomic batch) → (accum,
  step) time measured there joins its observations and the model is refitted; the gradient statistics are
  those measured at its current batch size and epoch. Measurements are read from the job's own model
  (`JobView.model`, fallback `ctx.perf.app(name)`) at the configuration it ran — what a live job reports as
  hints; a job that reports its own gradient statistics (`JobView.grad_stats`, the live service: the training
  library's hints) is judged by those instead. A job that has not run yet scales linearly (speedup r / fair
  share), as in the artifact.
- A job may hold at most min(2 × the most replicas it has run on (≥ 1), 64, max batch / min local batch)
  GPUs — it grows by at most doubling per round; ncf jobs hold one GPU at global batch 32,768 (artifact).
- Restart factor of a job that would change: max(age − restarts · 30 s, 0) / (age + 30 s).
- Fair share for the speedup base: ⌈GPUs / jobs⌉ replicas on ⌈nodes / GPUs⌉ node(s) (dominant share).
- A job that has not run yet starts at batch max(M₀, b_min · r).
- A job whose placement is unchanged re-optimises its batch size every round, in place (`batch_in_place`:
  no restart), as the artifact's job does after every step; a moved job gets the best batch for its new GPUs.
Differences: the artifact re-optimises after every epoch boundary inside a 60 s step too; we do it once per
round. Heterogeneity: a job may use any node of a type it allows and its profile
covers; the step time it measures on a mixed placement is the slowest type's (what the simulator runs).

`unaware=True` is Pollux as Sia's artifact runs it on a heterogeneous cluster (siasosp23/artifacts
`sia-simulator/multi_simulator_unaware.py`, `cluster_unaware.py`, `job.py` with `h_unaware`; read, not copied):
every node is cut into virtual nodes of the smallest node's GPU count (Sia's cluster: 16 × 4), the search
runs over them blind to GPU types, and a job given GPUs of several types keeps only those of its majority
type (ties: A100, then RTX, then T4, the artifact's `fix_allocations_by_dropping` order); the others stay
idle for the round. A job may hold at most as many GPUs as the smallest type has (artifact
`clusterwide_max_replicas`). Its observations from every type go into one fit, keyed by (nodes, replicas,
atomic batch) with the first measurement kept (artifact: one merged profile). Readings: real nodes, not
virtual ones, count as a job's nodes in its observations and batch choice (the artifact's placement is
built from real node ids); the batch range is the job's own (the artifact takes the T4 application's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobView, PendingReason
from elastisched.models.application import Application
from elastisched.models.throughput import PolluxParams
from elastisched.policies._common import job_model
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.pollux.ga import AllocationProblem, search
from elastisched.policies.pollux.goodput import GoodputFunction, fit_perf_params, speedup_table

RESTART_DELAY = 30.0  # seconds the restart factor charges per restart (artifact `delay = 30`)
MAX_REPLICAS = 64  # artifact: "simulator can't handle more"
#: unaware mode: which type a job spread over several keeps when two types tie (artifact priority order)
TIE_ORDER = ("a100", "rtx", "t4")
NCF_BATCH = 32768  # artifact: ncf jobs under Pollux train at this fixed global batch, on one GPU
#: a round's search stops once its best fitness has not improved for this many generations (None: always
#: `generations`, as the artifact); the search is warm-started, so it converges early in most rounds
PATIENCE = 10
Obs = dict[tuple[int, int, int], tuple[float, float]]


@register
class PolluxPolicy(Policy):
    name = "pollux"
    description = ("Pollux (OSDI'21): goodput-adaptive; genetic search over GPU allocations maximising the "
                   "p-norm of speedups, batch size chosen per allocation.")
    interval = 60.0
    elastic = True
    batch_in_place = True

    option_help: ClassVar[dict[str, str]] = {
        "pop_size": "individuals of the genetic search",
        "generations": "generations per round",
        "max_nodes": "servers one job may span",
        "patience": "stop a round's search after this many generations without improvement (none: always all "
            "generations)",
        "unaware": "heterogeneity-unaware, as Sia's artifact runs Pollux",
    }

    def __init__(self, pop_size: int = 100, generations: int = 100, max_nodes: int = 16,
                 patience: int | None = PATIENCE, unaware: bool = False) -> None:
        self.unaware = unaware
        self._vrows: dict[str, dict[str, int]] = {}  # unaware: job → its GPUs per virtual node last round
        self.pop_size = pop_size
        self.generations = generations
        self.patience = patience
        self.max_nodes = max_nodes
        self._obs: dict[str, Obs] = {}  # job → observed configurations
        self._grad: dict[str, tuple[float, float]] = {}  # job → (grad_sqr, grad_var) last measured
        self._fits: dict[tuple[Any, ...], PolluxParams] = {}  # memo: (app, observations) → fitted params
        self._prev: tuple[np.ndarray, list[str], list[str]] | None = None  # last front, its jobs, nodes
        self._tables: dict[str, tuple[tuple[Any, ...], np.ndarray]] = {}  # job → (inputs, speedup table)

    # ------------------------------------------------------------------ learning from what jobs ran
    def _observe(self, snap: ClusterSnapshot, job: JobView, app: Application, types: Mapping[str, str]) -> None:
        """Record the configuration a running job has run at since its last (re)start (artifact `update_params`)."""
        a = job.allocation
        started = job.last_resize_time if job.last_resize_time is not None else job.start_time
        if not a.placement or job.batch_size <= 0 or started is None or snap.now < started + app.restart_cost:
            return
        shape = tuple(g for _, g in a.placement)
        cfg = app.batch_config(a.gpus, job.batch_size)
        steps = [app.model(t).step_sync(shape, float(cfg.micro_batch))
                 for t in {types[n] for n in a.nodes if n in types}]
        step, sync = max(steps)
        key = (len(shape), a.gpus, cfg.micro_batch)
        self._obs.setdefault(job.job_id, {}).setdefault(key, (step - sync, step))
        self._grad[job.job_id] = self.grad_stats(job, app)

    @staticmethod
    def grad_stats(job: JobView, app: Application) -> tuple[float, float]:
        """(grad_sqr, grad_var at the reference batch M₀) of a job now: the ones it measured itself when it
        reports them (live: its hints, `JobView.grad_stats` = (|E g|², tr(Σ) per sample)), else its model's at
        its batch and epoch (the simulator: the profile's per-epoch statistics stand in for the measurement)."""
        if job.grad_stats is not None:
            sqr, trace = job.grad_stats
            return float(sqr), float(trace) / app.init_batch_size
        return app.efficiency.grad_stats(job.batch_size, job.epoch)  # type: ignore[no-any-return]

    def _perf(self, app: Application, obs: Obs) -> PolluxParams:
        key = (app.name, tuple(sorted(obs.items())))
        p = self._fits.get(key)
        if p is None:
            if len(self._fits) > 20000:
                self._fits.clear()
            k = sorted(obs)
            v = [obs[x] for x in k]
            p = self._fits[key] = fit_perf_params([x[0] for x in k], [x[1] for x in k], [x[2] for x in k],
                                                  [x[0] for x in v], [x[1] for x in v])
        return p

    def goodput_fn(self, job: JobView, app: Application) -> GoodputFunction | None:
        """The job's believed goodput, or None before it has run (no measurements yet)."""
        obs = self._obs.get(job.job_id)
        grad = self._grad.get(job.job_id)
        if not obs or grad is None:
            return None
        return GoodputFunction(self._perf(app, obs), grad[0], grad[1], app.init_batch_size)

    # ------------------------------------------------------------------ the round
    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        types = snap.node_set.gpu_type
        self._forget_finished(snap)
        if not snap.jobs or not snap.nodes:
            return Decision({}, {jid: PendingReason.RESOURCES for jid in snap.jobs})
        apps = {jid: job_model(j, ctx) for jid, j in snap.jobs.items()}
        for jid, job in snap.jobs.items():
            app = apps[jid]
            if app is not None and job.allocation.placement:
                self._observe(snap, job, app, types)
        jobs = sorted(snap.jobs.values(), key=lambda j: (j.attained(snap.now), j.spec.submit_time))
        ids = [j.job_id for j in jobs]
        node_ids, owner, caps, ntype, limit = self._search_nodes(snap, types)
        total = int(caps.sum())
        fair_reps = math.ceil(total / len(jobs))
        fair_nodes = math.ceil(len(node_ids) / total)
        fns = {job.job_id: self.goodput_fn(job, app) if (app := apps[job.job_id]) is not None else None
               for job in jobs}
        maxr = np.array([self._max_replicas(job, apps[job.job_id], limit) for job in jobs], dtype=np.int64)
        minr = np.array([job.spec.min_gpus if job.spec.elastic else 0 for job in jobs], dtype=np.int64)
        cap = _allowed_gpus(jobs, apps, node_ids, caps, ntype, set(types.values()))
        table = self._speedups(jobs, apps, fns, maxr, fair_nodes, fair_reps)
        real_ids = [n.node_id for n in snap.nodes]
        real_base = _current_rows(jobs, real_ids)
        base_state = self._virtual_base(jobs, node_ids, owner, caps) if self.unaware else real_base
        age = np.array([max(snap.now - j.spec.submit_time, 0.0) for j in jobs])
        restarts = np.array([j.num_restarts for j in jobs], dtype=float)
        factor = np.maximum(age - restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)
        problem = AllocationProblem(table, base_state, caps, cap, maxr, minr, factor, len(node_ids) / total,
                                    self.max_nodes)
        states, values = search(problem, self._initial(base_state, ids, node_ids), ctx.rng, self.pop_size,
                                self.generations, patience=self.patience)
        self._prev = (states, ids, node_ids)
        best = states[int(np.argmin(values[:, 0]))]
        if self.unaware:
            best = self._devirtualise(best, ids, node_ids, owner, ntype, real_ids)
        return self._decision(snap, jobs, best, real_base, real_ids, apps, fns)

    def _forget_finished(self, snap: ClusterSnapshot) -> None:
        """Drop the speedup tables, observations and gradient statistics of jobs no longer in the cluster."""
        live = set(snap.jobs)
        for jid in [j for j in self._tables if j not in live]:
            self._tables.pop(jid, None)
        for jid in [j for j in self._obs if j not in live]:
            self._obs.pop(jid, None)
            self._grad.pop(jid, None)

    def _search_nodes(self, snap: ClusterSnapshot, types: Mapping[str, str]
                      ) -> tuple[list[str], dict[str, str], np.ndarray, dict[str, str], int]:
        """The nodes the search runs over (real ones, or virtual ones when `unaware`): (ids, real node of each
        virtual one, GPUs, GPU type, most GPUs a job may hold)."""
        if not self.unaware:
            caps = np.array([n.num_gpus for n in snap.nodes], dtype=np.int64)
            return [n.node_id for n in snap.nodes], {}, caps, types, int(caps.sum())
        vnodes = self._virtual_nodes(snap)
        node_ids, owner = [v[0] for v in vnodes], {v[0]: v[1] for v in vnodes}
        caps = np.array([v[2] for v in vnodes], dtype=np.int64)
        per_type: dict[str, int] = {}
        for n in snap.nodes:
            per_type[n.gpu_type] = per_type.get(n.gpu_type, 0) + n.num_gpus
        return node_ids, owner, caps, {v: types[owner[v]] for v in node_ids}, min(per_type.values())

    def _speedups(self, jobs: list[JobView], apps: dict[str, Application | None],
                  fns: dict[str, GoodputFunction | None], maxr: np.ndarray, fair_nodes: int, fair_reps: int
                  ) -> np.ndarray:
        """Speedup of each job on 0..max replicas (jobs × {1 node, more} × replicas), kept per job while its
        goodput inputs stay the same; a job without a goodput model scales linearly."""
        rmax = int(maxr.max())
        table = np.zeros((len(jobs), 2, rmax + 1))
        for i, job in enumerate(jobs):
            fn, app = fns[job.job_id], apps[job.job_id]
            if fn is None or app is None:
                table[i, :, :] = np.arange(rmax + 1) / fair_reps
                continue
            key = (fn.perf, fn.grad_sqr, fn.grad_var, fair_nodes, fair_reps, int(maxr[i]))
            hit = self._tables.get(job.job_id)
            if hit is None or hit[0] != key:
                rng_b = (app.min_local_bsz, app.max_local_bsz)
                base = float(fn.optimize(fair_nodes, fair_reps, app.max_batch_size, rng_b)[0][0])
                hit = self._tables[job.job_id] = (key, speedup_table(fn, int(maxr[i]), app.max_batch_size, rng_b,
                                                                     base))
            table[i, :, : maxr[i] + 1] = hit[1]
        return table

    # ------------------------------------------------------------------ heterogeneity-unaware (Sia's artifact)
    @staticmethod
    def _virtual_nodes(snap: ClusterSnapshot) -> list[tuple[str, str, int]]:
        """(virtual node, its real node, GPUs): every node cut into pieces of the smallest node's GPU count."""
        g = min(n.num_gpus for n in snap.nodes)
        out = []
        for n in snap.nodes:
            sizes = [g] * (n.num_gpus // g) + ([n.num_gpus % g] if n.num_gpus % g else [])
            out += [(f"{n.node_id}#{k}", n.node_id, size) for k, size in enumerate(sizes)]
        return out

    def _virtual_base(self, jobs: list[JobView], vids: list[str], owner: dict[str, str],
                      caps: np.ndarray) -> np.ndarray:
        """Each job's current GPUs on virtual nodes: last round's split where it still matches the job's
        placement, otherwise filled into the node's freest virtual nodes."""
        base = np.zeros((len(jobs), len(vids)), dtype=np.int64)
        free = caps.copy()
        vpos = {v: k for k, v in enumerate(vids)}
        later: list[tuple[int, str, int]] = []
        for i, job in enumerate(jobs):
            prev = self._vrows.get(job.job_id, {})
            for n, g in job.allocation.placement:
                mine = {v: c for v, c in prev.items() if v in vpos and owner[v] == n}
                if sum(mine.values()) == g and all(free[vpos[v]] >= c for v, c in mine.items()):
                    for v, c in mine.items():
                        base[i, vpos[v]] += c
                        free[vpos[v]] -= c
                else:
                    later.append((i, n, g))
        for i, n, g in later:
            for k in sorted((vpos[v] for v in vids if owner[v] == n), key=lambda k: -free[k]):
                c = int(min(g, free[k]))
                base[i, k] += c
                free[k] -= c
                g -= c
        return base

    def _devirtualise(self, best: np.ndarray, ids: list[str], vids: list[str], owner: dict[str, str],
                      ntype: dict[str, str], real_ids: list[str]) -> np.ndarray:
        """Virtual rows → real rows; a job spread over several GPU types keeps its majority type's GPUs only."""
        rpos = {n: k for k, n in enumerate(real_ids)}
        out = np.zeros((len(ids), len(real_ids)), dtype=np.int64)
        self._vrows = {}
        for i, jid in enumerate(ids):
            ks = np.flatnonzero(best[i])
            if not len(ks):
                continue
            count: dict[str, int] = {}
            for k in ks:
                count[ntype[vids[k]]] = count.get(ntype[vids[k]], 0) + int(best[i, k])
            keep = max(count, key=lambda t: (count[t], -(TIE_ORDER.index(t) if t in TIE_ORDER else len(TIE_ORDER))))
            row = {vids[k]: int(best[i, k]) for k in ks if ntype[vids[k]] == keep}
            self._vrows[jid] = row
            for v, c in row.items():
                out[i, rpos[owner[v]]] += c
        return out

    def _max_replicas(self, job: JobView, app: Application | None, total: int) -> int:
        """At most `total` GPUs (the cluster; unaware: the smallest type's GPUs)."""
        if app is None:
            cap = job.spec.num_gpus
        elif app.name == "ncf":
            cap = 1
        else:
            seen = max((k[1] for k in self._obs.get(job.job_id, {})), default=0)
            cap = min(max(2 * seen, 1), MAX_REPLICAS, app.max_batch_size // app.min_local_bsz)
        if job.spec.elastic:
            cap = min(cap, job.spec.gpu_cap)
        return max(1, min(cap, total))

    def _initial(self, base: np.ndarray, ids: list[str], node_ids: list[str]) -> np.ndarray:
        """The previous round's non-dominated states mapped onto today's jobs and nodes (artifact
        `_adapt_prev_states`), or the current allocation alone."""
        if self._prev is None:
            return base[None]
        prev, pjobs, pnodes = self._prev
        out = np.zeros((len(prev), len(ids), len(node_ids)), dtype=np.int64)
        jpos = {j: k for k, j in enumerate(pjobs)}
        npos = {n: k for k, n in enumerate(pnodes)}
        src_j = [jpos[j] for j in ids if j in jpos]
        dst_j = [k for k, j in enumerate(ids) if j in jpos]
        for k, n in enumerate(node_ids):
            if n in npos and src_j:
                out[:, dst_j, k] = prev[:, src_j, npos[n]]
        return out

    def _decision(self, snap: ClusterSnapshot, jobs: list[JobView], best: np.ndarray, base: np.ndarray,
                  node_ids: list[str], apps: dict[str, Application | None],
                  fns: dict[str, GoodputFunction | None]) -> Decision:
        chosen: dict[str, Allocation] = {}
        reasons: dict[str, PendingReason] = {}
        for i, job in enumerate(jobs):
            row = best[i]
            if not row.any():
                reasons[job.job_id] = PendingReason.NOT_SELECTED
                continue
            cur = job.allocation
            if cur.placement and np.array_equal(row, base[i]):
                # unchanged placement: the job re-optimises its batch in place (artifact: every step)
                batch = self.batch_size(apps[job.job_id], fns[job.job_id], len(cur.placement), cur.gpus)
                same = batch is None or batch == cur.batch_size or fns[job.job_id] is None
                chosen[job.job_id] = cur if same else Allocation(placement=cur.placement, batch_size=batch)
                continue
            placement = tuple((node_ids[k], int(row[k])) for k in np.flatnonzero(row))
            batch = self.batch_size(apps[job.job_id], fns[job.job_id], len(placement), int(row.sum()))
            chosen[job.job_id] = Allocation(placement=placement, batch_size=batch)
        allocs = {jid: chosen[jid] for jid in snap.jobs if jid in chosen}  # submission order
        return Decision(allocs, reasons)

    @staticmethod
    def batch_size(app: Application | None, fn: GoodputFunction | None, nodes: int, replicas: int) -> int | None:
        """Global batch for a new allocation (artifact `Job.update_local_bsz`); None = the job's own."""
        if app is None:
            return None
        if app.name == "ncf":
            return NCF_BATCH
        if fn is None:
            return int(max(app.init_batch_size, app.min_local_bsz * replicas))
        _, atomic, accum = fn.optimize(nodes, replicas, app.max_batch_size, (app.min_local_bsz, app.max_local_bsz))
        steps = replicas * (int(accum[0]) + 1)
        atomic_b = min(int(atomic[0]), int(app.max_batch_size / steps))
        return max(1, atomic_b * steps)

    # ------------------------------------------------------------------ state
    def on_finish(self, job_id: str, now: float) -> None:
        self._vrows.pop(job_id, None)
        self._obs.pop(job_id, None)
        self._grad.pop(job_id, None)

    def state_dict(self) -> dict[str, Any]:
        prev = None
        if self._prev is not None:
            prev = {"states": self._prev[0].tolist(), "jobs": self._prev[1], "nodes": self._prev[2]}
        return {"obs": {j: [[*k, *v] for k, v in o.items()] for j, o in self._obs.items()},
                "grad": {j: list(g) for j, g in self._grad.items()}, "prev": prev}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._obs = {j: {(int(r[0]), int(r[1]), int(r[2])): (float(r[3]), float(r[4])) for r in rows}
                     for j, rows in state.get("obs", {}).items()}
        self._grad = {j: (float(g[0]), float(g[1])) for j, g in state.get("grad", {}).items()}
        prev = state.get("prev")
        self._prev = None if prev is None else (np.array(prev["states"], dtype=np.int64), list(prev["jobs"]),
                                                list(prev["nodes"]))


def _allowed_gpus(jobs: list[JobView], apps: dict[str, Application | None], node_ids: list[str], caps: np.ndarray,
                  ntype: dict[str, str], all_types: set[str]) -> np.ndarray:
    """GPUs each job may use on each search node: nodes of a type it allows and its profile covers."""
    cap = np.zeros((len(jobs), len(node_ids)), dtype=np.int64)
    for i, job in enumerate(jobs):
        allowed = set(job.spec.gpu_types or all_types)
        app = apps[job.job_id]
        if app is not None:
            allowed &= set(app.gpu_types)
        cap[i] = np.where([ntype[n] in allowed for n in node_ids], caps, 0)
    return cap


def _current_rows(jobs: list[JobView], real_ids: list[str]) -> np.ndarray:
    """Each job's GPUs now on each real node (jobs × nodes)."""
    rows = np.zeros((len(jobs), len(real_ids)), dtype=np.int64)
    rpos = {n: k for k, n in enumerate(real_ids)}
    for i, job in enumerate(jobs):
        for n, g in job.allocation.placement:
            if n in rpos:
                rows[i, rpos[n]] += g
    return rows
