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

At cluster scale (issue 22): the search runs on sparse states (`policies/pollux/population.py`), seeded with
the previous round's front; what the policy learns per job is kept across rounds and recomputed only for
jobs that changed, tables and batch sizes for all of them at once (`policies/pollux/beliefs.py`); and
`budget_s` (ours, default None = unbounded) bounds a round's CPU time: fits take at most half of it (a job
left unfitted keeps its previous fit for the round), the search stops at the budget with the best state
found so far (`policies/pollux/nsga.py`). A budget that binds makes a run depend on the machine's speed.
`quiet_s` (ours, default None = off) lets a round skip the search when nothing structural changed since the
last one decided (no job arrived or left, every job on the GPUs it was given; everything measured and fitted)
for up to `quiet_s` seconds; such a round only re-optimises running jobs' batches in place. Reading: a batch
changed in place is not a change, and a job restarted on the same GPUs is none either (its restart factor is
read at the next search, at most `quiet_s` later). Both are for traces too long to
search every minute (docs/scale.md); the reproductions run without them. On clusters of more than
`narrow_above` nodes (default 64) the search leaves out identical empty nodes no state can use
(`policies/pollux/search_space.py`: the same optimum, other random draws).

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
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobView, PendingReason
from elastisched.models.application import Application
from elastisched.policies._common import job_model
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.pollux.arrays import (
    allowed_types,
    by_attained_service,
    current_cells,
    job_inputs,
    job_structure,
    restart_factors,
    rows_of,
    same_signature,
)
from elastisched.policies.pollux.beliefs import PolluxBeliefs
from elastisched.policies.pollux.ga import AllocationProblem
from elastisched.policies.pollux.goodput import GoodputFunction
from elastisched.policies.pollux.nsga import search
from elastisched.policies.pollux.population import Population, from_dense, take, to_dense
from elastisched.policies.pollux.search_space import Front, initial_states, kept_nodes, onto_kept
from elastisched.policies.pollux.unaware import VRows, devirtualise, virtual_base, virtual_nodes

MAX_REPLICAS = 64  # artifact: "simulator can't handle more"
NCF_BATCH = 32768  # artifact: ncf jobs under Pollux train at this fixed global batch, on one GPU
#: a round's search stops once its best fitness has not improved for this many generations (None: always
#: `generations`, as the artifact); the search is warm-started, so it converges early in most rounds
PATIENCE = 10
#: above this many nodes the search leaves out identical empty nodes no state can use (`search_space`); the
#: artifacts' clusters (Pollux: 16 nodes, Sia: 16 × 4 GPUs virtual) and every reproduction stay below it
NARROW_ABOVE = 64
FIT_SHARE = 0.5  # with a budget: the share of it a round may spend fitting step-time models
SEARCH_SHARE = 0.9  # ... and the share by which the search stops (the rest: batch sizes and the decision)


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
        "budget_s": "CPU seconds a round may spend before it returns the best found so far (none: unbounded)",
        "quiet_s": "skip the search for up to this long while nothing structural changed (none: never skip)",
        "narrow_above": "on clusters of more nodes, search only as many identical empty nodes as the jobs can span",
    }

    def __init__(self, pop_size: int = 100, generations: int = 100, max_nodes: int = 16,
                 patience: int | None = PATIENCE, unaware: bool = False, budget_s: float | None = None,
                 quiet_s: float | None = None, narrow_above: int = NARROW_ABOVE) -> None:
        for opt, v in (("budget_s", budget_s), ("quiet_s", quiet_s)):
            if v is not None and not v > 0:
                raise ValueError(f"pollux: {opt} must be > 0 seconds or None, got {v!r}")
        if not narrow_above >= 0:
            raise ValueError(f"pollux: narrow_above must be >= 0 nodes, got {narrow_above!r}")
        self.budget_s, self.quiet_s, self.narrow_above = budget_s, quiet_s, narrow_above
        self._last: tuple[float, Any, dict[str, tuple[Any, ...]]] | None = None  # last search: time, nodes, jobs
        self._node_class: tuple[Any, list[str], np.ndarray] | None = None  # (nodes, GPU types, type per node)
        self._search_stats: dict[str, float | str] = {}  # the last search's (carries the CPU a child costs)
        self.unaware = unaware
        self._vrows: VRows = {}
        self.pop_size = pop_size
        self.generations = generations
        self.patience = patience
        self.max_nodes = max_nodes
        self.beliefs = PolluxBeliefs()
        self._prev: Front | None = None  # last front, its jobs, nodes

    # ------------------------------------------------------------------ learning from what jobs ran
    def _observe(self, snap: ClusterSnapshot, job: JobView, app: Application, types: Mapping[str, str]) -> bool:
        """Record the configuration a running job has run at since its last (re)start (artifact `update_params`);
        False while it is still paying its restart."""
        a = job.allocation
        started = job.last_resize_time if job.last_resize_time is not None else job.start_time
        if not a.placement or job.batch_size <= 0 or started is None or snap.now < started + app.restart_cost:
            return False
        shape = tuple(g for _, g in a.placement)
        cfg = app.batch_config(a.gpus, job.batch_size)
        steps = [app.model(t).step_sync(shape, float(cfg.micro_batch))
                 for t in {types[n] for n in a.nodes if n in types}]
        step, sync = max(steps)
        key = (len(shape), a.gpus, cfg.micro_batch)
        self.beliefs.obs.setdefault(job.job_id, {}).setdefault(key, (step - sync, step))
        self.beliefs.grad[job.job_id] = self.grad_stats(job, app)
        return True

    @staticmethod
    def grad_stats(job: JobView, app: Application) -> tuple[float, float]:
        """(grad_sqr, grad_var at the reference batch M₀) of a job now: the ones it measured itself when it
        reports them (live: its hints, `JobView.grad_stats` = (|E g|², tr(Σ) per sample)), else its model's at
        its batch and epoch (the simulator: the profile's per-epoch statistics stand in for the measurement)."""
        if job.grad_stats is not None:
            sqr, trace = job.grad_stats
            return float(sqr), float(trace) / app.init_batch_size
        return app.efficiency.grad_stats(job.batch_size, job.epoch)  # type: ignore[no-any-return]

    def goodput_fn(self, job: JobView, app: Application) -> GoodputFunction | None:
        """The job's believed goodput (fitted to all it has reported), or None before it has run."""
        self.beliefs.belief(job.job_id)
        self.beliefs.refit([job], {job.job_id: app}, None)
        return self.beliefs.goodput_fn(job.job_id, app)

    def _learn(self, snap: ClusterSnapshot, ctx: PolicyContext) -> dict[str, Application | None]:
        """Observe the jobs whose inputs changed or are not yet measured (`job_inputs`: a job refreshed only in its
        progress has nothing new to report); returns each job's performance model."""
        types = snap.node_set.gpu_type
        apps: dict[str, Application | None] = {}
        for jid, job in snap.jobs.items():
            b = self.beliefs.belief(jid)
            sig = job_inputs(job)
            if b.view is None or not same_signature(sig, b.sig):
                b.view, b.sig, b.observed, b.app = job, sig, False, job_model(job, ctx)
            app = apps[jid] = b.app
            if not b.observed and app is not None and job.allocation.placement:
                b.observed = self._observe(snap, job, app, types)
        return apps

    def _quiet(self, snap: ClusterSnapshot) -> bool:
        """With `quiet_s`: whether this round may skip the search — nothing structural changed since the last
        search decided (the same nodes and jobs, each on the GPUs that search gave it, with the same spec;
        everything measured and fitted), and that search is younger than `quiet_s`. Epochs still move gradient
        statistics: a quiet round re-optimises batches in place (`_in_place`), which is not a change."""
        last = self._last
        if self.quiet_s is None or last is None or snap.now - last[0] >= self.quiet_s or snap.nodes is not last[1] \
                or len(snap.jobs) != len(last[2]) or self.beliefs.deferred:
            return False
        jobs = self.beliefs.jobs
        for jid, job in snap.jobs.items():
            b, had = jobs.get(jid), last[2].get(jid)
            if b is None or had is None:
                return False
            measured = b.observed or b.app is None or not job.allocation.placement
            fitted = self.beliefs.sync_obs(jid, b.app).want_key is b.fit_key  # a new observation wants a fit
            if not measured or not fitted or not same_signature(job_structure(job), had):
                return False
        return True

    def _in_place(self, snap: ClusterSnapshot, apps: dict[str, Application | None]) -> Decision:
        """A quiet round: every job keeps its GPUs; a running one's batch follows its goodput (artifact: every
        step)."""
        plan = {jid: (j, [], True) for jid, j in snap.jobs.items() if j.allocation.placement}
        fns = {jid: self.beliefs.goodput_fn(jid, app) if (app := apps[jid]) is not None else None for jid in plan}
        batch = self._batches(plan, apps, fns)  # type: ignore[arg-type]
        allocs: dict[str, Allocation] = {}
        for jid, (job, _, _) in plan.items():
            cur, b = job.allocation, batch[jid]
            same = b is None or b == cur.batch_size or fns[jid] is None
            allocs[jid] = cur if same else Allocation(placement=cur.placement, batch_size=b)
        return Decision(allocs, {jid: PendingReason.NOT_SELECTED for jid in snap.jobs if jid not in allocs})

    # ------------------------------------------------------------------ the round
    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        t0 = time.thread_time()
        if not snap.jobs or not snap.nodes:
            self.beliefs.forget(live=set(snap.jobs))
            return Decision({}, {jid: PendingReason.RESOURCES for jid in snap.jobs})
        self.beliefs.forget(live=set(snap.jobs))
        apps = self._learn(snap, ctx)
        if self._quiet(snap):
            return self._in_place(snap, apps)
        jobs = by_attained_service(snap)
        ids = [j.job_id for j in jobs]
        self.beliefs.refit(jobs, apps, None if self.budget_s is None else t0 + FIT_SHARE * self.budget_s)
        fns = {job.job_id: self.beliefs.goodput_fn(job.job_id, app) if (app := apps[job.job_id]) is not None
               else None for job in jobs}
        node_ids, owner, caps, ntype, limit = self._search_nodes(snap)
        total = int(caps.sum())
        fair_reps, fair_nodes = math.ceil(total / len(jobs)), math.ceil(len(node_ids) / total)
        maxr = np.array([self._max_replicas(job, apps[job.job_id], limit) for job in jobs], dtype=np.int64)
        minr = np.array([job.spec.min_gpus if job.spec.elastic else 0 for job in jobs], dtype=np.int64)
        classes, node_class = self._classes(snap, node_ids, ntype)
        table = self.beliefs.speedups(jobs, apps, fns, maxr, fair_nodes, fair_reps)
        real_ids = [n.node_id for n in snap.nodes]
        real_base = current_cells(jobs, real_ids)
        allowed, scale = allowed_types(jobs, apps, classes), len(node_ids) / total
        base = (from_dense(virtual_base(self._vrows, jobs, node_ids, owner, caps)[None]) if self.unaware
                else real_base)
        init, kept = initial_states(self._prev, base, ids, node_ids), None
        if not self.unaware and len(node_ids) > self.narrow_above:  # identical empty nodes: as many as jobs span
            kept = kept_nodes(real_base, caps, node_class, allowed, maxr, self.max_nodes)
            kept = None if kept.everything else kept  # every node needed: the search is the artifact's
            if kept is not None:
                node_ids, caps, node_class = [node_ids[k] for k in kept.keep.tolist()], caps[kept.keep], \
                    node_class[kept.keep]
                base, init = onto_kept(real_base, kept, len(ids)), onto_kept(init, kept, len(ids))
        problem = AllocationProblem(table, base, caps, node_class, allowed, maxr, minr,
                                    restart_factors(jobs, snap.now), scale, self.max_nodes)
        left = None if self.budget_s is None else max(SEARCH_SHARE * self.budget_s - (time.thread_time() - t0), 0.0)
        stats = self._search_stats
        states, values = search(problem, init, ctx.rng, self.pop_size, self.generations, patience=self.patience,
                                budget_s=left, stats=stats)
        self._prev = (states, ids, node_ids)
        best = take(states, np.array([int(np.argmin(values[:, 0]))]))
        if kept is not None:
            best.node = kept.keep[best.node]  # back onto the real nodes
        if self.unaware:
            real, self._vrows = devirtualise(to_dense(best, len(ids), len(node_ids))[0], ids, node_ids, owner, ntype,
                                             real_ids)
            best = from_dense(real[None])
        decision = self._decision(snap, jobs, best, real_base, real_ids, apps, fns)
        given = {jid: a.placement for jid, a in decision.allocations.items()}  # what a quiet round compares with
        self._last = (snap.now, snap.nodes, {j.job_id: job_structure(j, given.get(j.job_id, ())) for j in jobs})
        return decision

    def _search_nodes(self, snap: ClusterSnapshot) -> tuple[list[str], dict[str, str], np.ndarray, dict[str, str], int]:
        """The nodes the search runs over (real ones, or virtual ones when `unaware`): (ids, real node of each
        virtual one, GPUs, GPU type, most GPUs a job may hold)."""
        types = snap.node_set.gpu_type
        if not self.unaware:
            caps = np.array([n.num_gpus for n in snap.nodes], dtype=np.int64)
            return [n.node_id for n in snap.nodes], {}, caps, dict(types), int(caps.sum())
        vnodes = virtual_nodes(snap)
        node_ids, owner = [v[0] for v in vnodes], {v[0]: v[1] for v in vnodes}
        caps = np.array([v[2] for v in vnodes], dtype=np.int64)
        per_type: dict[str, int] = {}
        for n in snap.nodes:
            per_type[n.gpu_type] = per_type.get(n.gpu_type, 0) + n.num_gpus
        return node_ids, owner, caps, {v: types[owner[v]] for v in node_ids}, min(per_type.values())

    def _classes(self, snap: ClusterSnapshot, node_ids: list[str], ntype: dict[str, str]
                 ) -> tuple[list[str], np.ndarray]:
        """The GPU types and the type index of each search node (kept while the nodes are the same)."""
        hit = self._node_class
        if hit is None or hit[0] is not snap.nodes:
            classes = sorted(set(ntype.values()))
            cls_of = {t: k for k, t in enumerate(classes)}
            hit = (snap.nodes, classes, np.array([cls_of[ntype[n]] for n in node_ids], dtype=np.intp))
            self._node_class = hit
        return hit[1], hit[2]

    def _max_replicas(self, job: JobView, app: Application | None, total: int) -> int:
        """At most `total` GPUs (the cluster; unaware: the smallest type's GPUs)."""
        if app is None:
            cap = job.spec.num_gpus
        elif app.name == "ncf":
            cap = 1
        else:
            seen = self.beliefs.sync_obs(job.job_id, app).seen
            cap = min(max(2 * seen, 1), MAX_REPLICAS, app.max_batch_size // app.min_local_bsz)
        if job.spec.elastic:
            cap = min(cap, job.spec.gpu_cap)
        return max(1, min(cap, total))

    def _decision(self, snap: ClusterSnapshot, jobs: list[JobView], best: Population, base: Population,
                  node_ids: list[str], apps: dict[str, Application | None],
                  fns: dict[str, GoodputFunction | None]) -> Decision:
        reasons: dict[str, PendingReason] = {}
        rows, base_rows = rows_of(best), rows_of(base)
        plan: dict[str, tuple[JobView, list[tuple[int, int]], bool]] = {}  # job → (view, row, unchanged)
        for i, job in enumerate(jobs):
            row = rows.get(i)
            if row is None:
                reasons[job.job_id] = PendingReason.NOT_SELECTED
            else:
                plan[job.job_id] = (job, row, bool(job.allocation.placement) and row == base_rows.get(i))
        batch = self._batches(plan, apps, fns)
        chosen: dict[str, Allocation] = {}
        for jid, (job, row, unchanged) in plan.items():
            cur = job.allocation
            if unchanged:  # the job re-optimises its batch in place (artifact: every step)
                b = batch[jid]
                same = b is None or b == cur.batch_size or fns[jid] is None
                chosen[jid] = cur if same else Allocation(placement=cur.placement, batch_size=b)
            else:
                chosen[jid] = Allocation(placement=tuple((node_ids[k], g) for k, g in row), batch_size=batch[jid])
        allocs = {jid: chosen[jid] for jid in snap.jobs if jid in chosen}  # submission order
        return Decision(allocs, reasons)

    def _batches(self, plan: dict[str, tuple[JobView, list[tuple[int, int]], bool]],
                 apps: dict[str, Application | None], fns: dict[str, GoodputFunction | None]) -> dict[str, int | None]:
        """`batch_size` of every planned job; the goodput-optimal ones computed together (memoised per job)."""
        out: dict[str, int | None] = {}
        wants: list[tuple[str, Application, GoodputFunction, int, int]] = []
        for jid, (job, row, unchanged) in plan.items():
            nodes, reps = (len(job.allocation.placement), job.allocation.gpus) if unchanged else (
                len(row), sum(g for _, g in row))
            app, fn = apps[jid], fns[jid]
            if app is None or app.name == "ncf" or fn is None:
                out[jid] = self.batch_size(app, fn, nodes, reps)
            else:
                wants.append((jid, app, fn, nodes, reps))
        out.update(self.beliefs.batches(wants))
        return out

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
        self.beliefs.forget(job_id=job_id)

    def state_dict(self) -> dict[str, Any]:
        """What it learnt (observations, gradient statistics) and the last front; the quiet-round record is
        not kept (a restored policy searches at its first round)."""
        prev = None
        if self._prev is not None:
            p = self._prev[0]
            prev = {"ptr": p.ptr.tolist(), "job": p.job.tolist(), "node": p.node.tolist(), "count": p.count.tolist(),
                    "jobs": self._prev[1], "nodes": self._prev[2]}
        return {"obs": {j: [[*k, *v] for k, v in o.items()] for j, o in self.beliefs.obs.items()},
                "grad": {j: list(g) for j, g in self.beliefs.grad.items()}, "prev": prev}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.beliefs, self._last = PolluxBeliefs(), None
        self.beliefs.obs = {j: {(int(r[0]), int(r[1]), int(r[2])): (float(r[3]), float(r[4])) for r in rows}
                            for j, rows in state.get("obs", {}).items()}
        self.beliefs.grad = {j: (float(g[0]), float(g[1])) for j, g in state.get("grad", {}).items()}
        prev = state.get("prev")
        self._prev = None if prev is None else (
            Population(np.array(prev["ptr"], dtype=np.int64), np.array(prev["job"], dtype=np.intp),
                       np.array(prev["node"], dtype=np.intp), np.array(prev["count"], dtype=np.int64)),
            list(prev["jobs"]), list(prev["nodes"]))

