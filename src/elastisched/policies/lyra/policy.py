"""Lyra (EuroSys'23): elastic scheduling with capacity loaning (lyra.md §2, §6).

One round:

0. **Reclaim** (lyra.md §2.1): when `snap.reclaim_demand = r > 0`, choose the r loaned servers to return with
   `elastisched.policies._reclaim.choose(self.reclaim, ...)` (greedy on server preemption cost by default)
   and answer them in `Decision.reclaim`. Jobs the return preempts lose their GPUs and queue again; elastic
   jobs that only lose extra GPUs keep the rest (scale-in). The round then schedules without those servers.
1. **Phase 1, SJF** (lyra.md §2.2, §7 rows 5–7): running jobs keep their base (inelastic: all their GPUs;
   elastic: `min_gpus`); pending jobs, shortest predicted remaining time at base size first, get their base
   when it fits in the free GPUs of an allowed type, else they wait and later jobs may pass (backfill).
   `preempt` = r > 0 (default 2; ours, issue 13): a running *inelastic* job joins that SJF order with its
   predicted remaining time divided by r, so a pending job displaces it only when r times shorter (its
   checkpoint is kept; the restart is then paid). Without it, on the Pollux workloads (every job inelastic,
   no loans) long jobs hold the cluster and Lyra queued ~4× longer than Tiresias (docs/seeds.md).
2. **Phase 2, MCKP** (lyra.md §2.2, §7 row 8): per GPU type, each admitted elastic job is a group with items
   "k extra GPUs", weight k, value = the JCT reduction k extras buy (`value`, below); capacity = that type's
   free GPUs after phase 1. Solved exactly by DP (`lyra.mckp.solve_dp`) when items × capacity ≤ `exact_budget`,
   else by the hull greedy (`lyra.mckp.solve_greedy`); `solver` forces one (`lyra.extras` carries this out).
3. **Placement** (lyra.md §2.3): `elastisched.policies.lyra.placement.place` — running jobs keep their nodes, base
   GPUs best-fit on training servers, extra GPUs first beside the job's own workers (`colocate`), then
   best-fit on loaned servers.

Readings (written down as the design asks):
- Predicted remaining time `T(b+k)` = remaining work / goodput with b base GPUs packed on nodes of the type
  plus k extras where the placement puts them (see colocation below), at the job's own global batch and
  current epoch (the models' goodput; lyra.md §2.4 option (c)).
  Each job is predicted with its own model (`JobView.model`, else its application in `ctx.perf`); a job with
  neither is predicted linearly, for that job alone: remaining fraction × duration × num_gpus / n, may use
  every GPU type the job allows, has no profile cap on growth and a 30 s restart cost.
- Item value (`value`, lyra.md §7 row 8, whose "JCT reduction" is [P]). `"jct"`: the plain reduction
  `v(k) = T(b) − T_eff(k)`. `"rate"` (default): the gain in the job's completion rate,
  `v(k) = τ² (1/T_eff(k) − 1/T(b))` (τ = 3,600 s only scales values near seconds for the solver's tolerances),
  i.e. the JCT reduction weighted by `τ² / (T(b)·T_eff(k))`. Why: a round's allocation holds until the next
  event, not for the job's whole remaining time, and by Little's law the average JCT is the average number
  of jobs in the system over the arrival rate; Σ 1/T_j is the rate at which the current jobs complete, so
  maximising it each round is the greedy for the fewest jobs in the system. The plain reduction instead
  hands extras to the longest jobs (as DeepBoot's Aryl reimplementation does, whose value grows with run
  time); the measured effect of each value on DeepBoot's workload and on the Philly reproduction is in
  docs/lyra.md (`reproduce lyra-deepboot --policies lyra,lyra_jct_value`).
  `T_eff(k) = T(b+k) + rescale_penalty × restart_cost` when k differs from a running job's current extras.
- Colocation (`colocate`, default on; lyra.md §2.3 says extras go "preferably" to loaned servers, [P]):
  extras first fill free GPUs on the server that already holds most of the job's GPUs, and the prediction
  says so: a running elastic job that may grow gets `local` = its GPUs there + an equal share (among the
  growing jobs on that server) of the server's free GPUs, and `T(b+k)` is predicted with the first `local`
  GPUs on that server and the rest packed elsewhere. Pending jobs are predicted with extras on servers of
  their own. Reason: on T4 a sub-server job whose extras sit on another server is often *slower* than without
  them (cifar10 with 1 + 2 GPUs on two servers: 0.81× one GPU; 1.81× with 3 on one), so without this most
  1-GPU elastic jobs of the Philly trace never grow. Extras on a training server are never reclaimed, so the
  reclaim cost is unchanged; when new bases of the type contend for training servers, a resized job's
  kept extras are placed after them (`lyra.placement`).
- A job's base takes a GPU type that training servers have when it fits there (loaned servers of another
  type, e.g. T4 beside V100 training servers, take bases only when it does not).
- A worker is one GPU. Elastic growth stops at `max_gpus` and at `batch_size // min_local_bsz` GPUs (beyond
  that the profile cannot spread the batch; the same cap as the Optimus artifact).
- Anti-thrash rule (lyra.md §7 row 11): a running job whose placement the round did not disturb pays its
  restart cost for any change of its extra count: `T_eff(k) = T(b+k) + rescale_penalty × restart_cost` for
  k ≠ its current extras (a rescale stalls the job that long, so it lengthens its JCT by that much; with
  `"jct"` values this is `v(k) −= penalty`, with `"rate"` it enters as `1/T_eff`). Newly started
  jobs and jobs a reclaim already scaled in pay no penalty (they restart anyway).
- A job runs on one GPU type; a running job stays on its type. `elastic_scaling=False` treats every job as
  inelastic (the "loaning only" ablation). A job the workload does not mark elastic is inelastic, unless
  `scale_all` (ours, issue 13; default "off" = the paper's reading): `"request"`: elastic from 1 GPU (base)
  to its request; `"cap"`: to the profile cap above. Why: Pollux scales every job of its workloads, which
  our loader marks inelastic (min = max), so the knapsack never ran there. Extras go only where the predicted
  rate gain pays (rescale penalty included). An admin-pinned job is unmarked too: keep it off in a service.
- Global batch of a scaled job (`batch`; the paper scales "workers", no batch rule). `"fixed"` (default): the
  job's own global batch at every size. `"worker"` (ours): a worker keeps the request's local batch,
  `batch × n / request` on n GPUs (≤ the profile's largest batch), so a job at 1 GPU does not run its whole
  request batch by accumulation; the efficiency model prices larger batches. Predictions and allocations agree.
- `compare_reclaim=True` also evaluates every reclaim method on each reclaim instance (logged in
  `reclaim_log` as `preempted_<method>`; MILP only up to `milp_max_servers` loaned servers) without
  changing the decision; `check_mckp=True` logs the phase-2 greedy and exact values of every round.
- Pending reasons: INFEASIBLE when no GPU type the job may use (and its profile covers) has its base in the
  cluster left after the reclaim; RESOURCES when its base does not fit the free GPUs; PLACEMENT when the
  GPUs are free but the placement cannot put it on servers.
- `Decision.next_round_at` is +inf: decisions change on events (arrival, completion, loan, reclaim); the
  periodic tick only re-runs rounds when `periodic=True`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from elastisched.core.enums import LengthKnowledge
from elastisched.core.types import (
    Allocation,
    ClusterSnapshot,
    Decision,
    JobSpec,
    JobView,
    NodeId,
    PendingReason,
    Pool,
)
from elastisched.models.application import Application, packed_shape
from elastisched.policies._common import can_ever_fit, job_model
from elastisched.policies._reclaim import METHODS, ReclaimChoice, capacity_without, choose, holdings_from_snapshot
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.lyra.extras import Admitted, KnapsackRule, extra_gpus, local_room
from elastisched.policies.lyra.placement import Placement, Want, place

INF = math.inf
DEFAULT_DURATION = 3600.0  # linear fallback model: a job with no duration is taken to run an hour
VALUES = ("jct", "rate")
BATCH_RULES = ("fixed", "worker")  # global batch of a scaled job (docstring)
SCALE_ALL = ("off", "request", "cap")  # how jobs the workload does not mark elastic scale (docstring)
# a job waiting for phase 1's SJF order: (predicted seconds, submit time, id, view, types, surviving placement)
Queued = tuple[float, float, str, JobView, list[str], tuple[tuple[NodeId, int], ...]]


@register
class LyraPolicy(Policy):
    name = "lyra"
    knows_length = LengthKnowledge.TRUTH  # remaining work = total_work − progress (an oracle)
    description = ("Lyra: SJF for base demands, multiple-choice knapsack over elastic jobs' extra GPUs, "
                   "loan-aware best-fit placement, minimal-preemption reclaim of loaned servers.")
    interval = 60.0
    elastic = True
    needs_progress = True

    option_help: ClassVar[dict[str, str]] = {
        "reclaim": "how loaned servers are chosen for return",
        "elastic_scaling": "give elastic jobs extra GPUs (the knapsack phase)",
        "solver": "the knapsack's solver",
        "exact_budget": "table cells the exact knapsack may use before the greedy one",
        "rescale_penalty": "weight of a rescale's restart in a job's value",
        "check_mckp": "check the knapsack against the exact solution (slow; for tests)",
        "periodic": "also run rounds every interval, not only on events",
        "compare_reclaim": "log every reclaim method's choice beside the one used",
        "milp_max_servers": "loaned servers beyond which the MILP reclaim falls back to greedy",
        "value": "the knapsack's value: JCT saved or rate gained",
        "colocate": "keep a job's extra GPUs on its own servers where they fit",
        "preempt": "a waiting job preempts only jobs this many times longer",
        "scale_all": "how jobs the workload does not mark elastic scale",
        "batch": "the global batch of a scaled job: fixed, or per worker",
    }
    option_choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "reclaim": METHODS,
        "solver": ("auto", "dp", "greedy"),
        "value": VALUES,
        "scale_all": SCALE_ALL,
        "batch": BATCH_RULES,
    }

    def __init__(self, reclaim: str = "greedy", elastic_scaling: bool = True, solver: str = "auto",
                 exact_budget: int = 4_000_000, rescale_penalty: float = 1.0, check_mckp: bool = False,
                 periodic: bool = False, compare_reclaim: bool = False, milp_max_servers: int = 64,
                 value: str = "rate", colocate: bool = True, preempt: float = 2.0,
                 scale_all: str = "off", batch: str = "fixed") -> None:
        if reclaim not in METHODS:
            raise ValueError(f"reclaim={reclaim!r}: known {', '.join(METHODS)}")
        if solver not in ("auto", "dp", "greedy"):
            raise ValueError(f"solver={solver!r}: known auto, dp, greedy")
        if value not in VALUES:
            raise ValueError(f"value={value!r}: known {', '.join(VALUES)}")
        for opt, val, known in (("scale_all", scale_all, SCALE_ALL), ("batch", batch, BATCH_RULES)):
            if val not in known:
                raise ValueError(f"{opt}={val!r}: known {', '.join(known)}")
        self.scale_all, self.batch = scale_all, batch
        self.value = value
        self.preempt = preempt
        self.colocate = colocate
        self.reclaim = reclaim
        self.elastic_scaling = elastic_scaling
        self.solver = solver
        self.exact_budget = exact_budget
        self.rescale_penalty = rescale_penalty
        self.check_mckp = check_mckp
        self.periodic = periodic
        self.compare_reclaim = compare_reclaim
        self.milp_max_servers = milp_max_servers
        self.reclaim_log: list[dict[str, Any]] = []
        self.mckp_log: list[dict[str, float]] = []
        self._gp: dict[tuple[Any, ...], np.ndarray] = {}
        self._gp_apps: dict[int, Application] = {}  # keeps the models keyed by id() in `_gp` alive

    # ------------------------------------------------------------------ predictions
    def _rates(self, app: Application, job: JobView, t: str, base: int, k_max: int, per_node: int,
               local: int = 0) -> np.ndarray:
        """Goodput (progress/s) with `base` GPUs plus k = 0..`k_max` extras of type t.

        The shape is where the placement will put them: with `local` > 0 (a running job whose main server can
        hold `local` of its GPUs) the first GPUs up to `local` on that server and the rest packed on others;
        otherwise (`local` 0) the extras on nodes of their own, `packed(base) + packed(k)`.
        Cached per (model, type, batch, request, epoch, node size, base, local).
        """
        spec = job.spec
        key = (id(app), t, spec.batch_size, spec.num_gpus, job.epoch, per_node, base, local)
        r = self._gp.get(key)
        if r is None or len(r) <= k_max:
            e = min(job.epoch, app.max_epochs - 1)
            have = 0 if r is None else len(r)
            shape0 = packed_shape(base, per_node)

            def shape(k: int) -> tuple[int, ...]:
                if local <= 0:
                    return shape0 + packed_shape(k, per_node)
                first = min(base + k, local)
                return (first, *packed_shape(base + k - first, per_node))

            new = [app.goodput(t, shape(k), app.batch_config(base + k, self._gbs(spec, app, base + k)), e)
                   for k in range(have, max(k_max + 1, 2 * have))]
            r = np.maximum(np.array(new), 1e-12) if r is None else np.concatenate([r, np.maximum(new, 1e-12)])
            if len(self._gp) > 50_000:
                self._gp.clear()
                self._gp_apps.clear()
            self._gp[key] = r
            self._gp_apps[id(app)] = app
        return r

    def _times(self, ctx: PolicyContext, job: JobView, t: str, base: int, k_max: int, per_node: int,
               local: int = 0) -> np.ndarray:
        """Predicted remaining seconds with `base` + 0..k_max GPUs (`local`: see `_rates`)."""
        app = job_model(job, ctx)
        if app is None:
            spec = job.spec
            work = (spec.duration or DEFAULT_DURATION) * spec.num_gpus * job.remaining_fraction
            return work / np.arange(base, base + k_max + 1, dtype=float)
        rem = max(job.total_work - job.progress, 0.0)
        return rem / self._rates(app, job, t, base, k_max, per_node, local)[: k_max + 1]

    # ------------------------------------------------------------------ round
    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        choice = self._reclaim(snap, ctx) if snap.reclaim_demand > 0 else None
        gone = frozenset(choice.servers) if choice else frozenset()
        free, per_node = capacity_without(snap.nodes, gone)
        reasons: dict[str, PendingReason] = {}
        admitted, pending = self._keep_running(snap, ctx, choice, gone, free, per_node, reasons)
        train_types = {n.gpu_type for n in snap.nodes if n.pool is not Pool.LOANABLE}
        admitted.extend(self._admit_sjf(ctx, pending, free, train_types, reasons))
        local = local_room(snap, admitted, gone) if self.colocate else {}

        def times(j: Admitted, t: str, k_max: int) -> np.ndarray:
            return self._times(ctx, j.view, t, j.base, k_max, per_node[t], local.get(j.view.job_id, 0))

        rule = KnapsackRule(self.value, self.solver, self.exact_budget, self.rescale_penalty)
        extra = extra_gpus(snap, ctx, admitted, free, times, rule, self.mckp_log if self.check_mckp else None)
        wants = [Want(j.view.job_id, j.base + extra.get(j.view.job_id, 0), j.base, j.gpu_type, j.current)
                 for j in admitted]
        placed = place(snap.nodes, wants, gone, colocate=self.colocate)
        allocs = self._allocations(ctx, admitted, placed, reasons)
        return Decision(allocs, reasons, tuple(choice.servers) if choice else (),
                        None if self.periodic else INF)

    def _keep_running(self, snap: ClusterSnapshot, ctx: PolicyContext, choice: ReclaimChoice | None,
                      gone: frozenset[NodeId], free: dict[str, int], per_node: dict[str, int],
                      reasons: dict[str, PendingReason]) -> tuple[list[Admitted], list[Queued]]:
        """Phase 1, first half: running jobs keep their base (taken from `free`), except displaceable
        inelastic ones (`preempt`), which queue with the pending jobs; jobs that can never fit are noted."""
        node_type = snap.node_set.gpu_type
        capacity = dict(free)  # the cluster as it is after the reclaim
        admitted: list[Admitted] = []
        pending: list[Queued] = []
        for jid, job in snap.jobs.items():
            cur = job.allocation.placement
            if choice is not None and jid in choice.preempted:
                cur = ()
            surv = tuple((n, g) for n, g in cur if n not in gone)
            disturbed = len(surv) != len(cur)
            spec = job.spec
            elastic = self._elastic(spec)
            if surv:
                t = node_type[surv[0][0]]
                g = sum(x for _, x in surv)
                base = min(self._lo(spec), g) if elastic else g
                model = job_model(job, ctx) if self.preempt > 0 and not disturbed and not elastic else None
                if model is not None and t in model.gpu_types:  # displaceable only where it is predicted
                    sjf = float(self._times(ctx, job, t, base, 0, per_node[t])[0]) / self.preempt
                    pending.append((sjf, spec.submit_time, jid, job, [t], surv))
                    continue
                free[t] -= base
                admitted.append(Admitted(job, t, base, self._cap(ctx, job, elastic, base, t), surv, disturbed))
                continue
            types = self._types(ctx, job, free)
            base = self._lo(spec) if elastic else spec.num_gpus
            if not types or not can_ever_fit(capacity, tuple(types), base):
                reasons[jid] = PendingReason.INFEASIBLE
                continue
            t0 = types[0]
            sjf = float(self._times(ctx, job, t0, base, 0, per_node[t0])[0])
            pending.append((sjf, spec.submit_time, jid, job, types, ()))
        return admitted, pending

    def _admit_sjf(self, ctx: PolicyContext, pending: list[Queued], free: dict[str, int], train_types: set[str],
                   reasons: dict[str, PendingReason]) -> list[Admitted]:
        """Phase 1, second half: the queued jobs, shortest first, get their base where it fits (backfill)."""
        admitted: list[Admitted] = []
        pending.sort(key=lambda x: (x[0], x[1], x[2]))
        for _, _, jid, job, types, surv in pending:
            spec = job.spec
            elastic = self._elastic(spec)
            base = sum(g for _, g in surv) if surv else self._lo(spec) if elastic else spec.num_gpus
            fit = [t for t in types if free[t] >= base]
            if not fit:
                reasons[jid] = PendingReason.PREEMPTED if surv else PendingReason.RESOURCES
                continue
            t = max(fit, key=lambda x: (x in train_types, free[x]))  # a training-server type first
            free[t] -= base
            admitted.append(Admitted(job, t, base, self._cap(ctx, job, elastic, base, t), surv, False))
        return admitted

    def _allocations(self, ctx: PolicyContext, admitted: list[Admitted], placed: dict[str, Placement],
                     reasons: dict[str, PendingReason]) -> dict[str, Allocation]:
        """The placed jobs' allocations (global batch per `batch`); the others wait for PLACEMENT."""
        allocs: dict[str, Allocation] = {}
        for j in admitted:
            p = placed.get(j.view.job_id)
            if p:
                app = job_model(j.view, ctx) if self.batch == "worker" else None
                bs = (self._gbs(j.view.spec, app, sum(g for _, g in p)) if app is not None
                      else j.view.allocation.batch_size)
                allocs[j.view.job_id] = Allocation(p, 0, None, bs)
            else:
                reasons[j.view.job_id] = PendingReason.PLACEMENT
        return allocs

    def _gbs(self, spec: JobSpec, app: Application, n: int) -> int:
        """Global batch on n GPUs (`batch`, module docstring)."""
        top, bs = max(app.max_batch_size, spec.batch_size), spec.batch_size
        return bs if self.batch == "fixed" else max(1, min(round(bs * n / spec.num_gpus), top))

    def _elastic(self, spec: JobSpec) -> bool:
        return self.elastic_scaling and (spec.elastic or self.scale_all != "off")

    @staticmethod
    def _lo(spec: JobSpec) -> int:
        """Base (phase-1) GPUs of an elastic job: its minimum, 1 for a job scaled by `scale_all`."""
        return spec.min_gpus if spec.elastic else 1

    def _cap(self, ctx: PolicyContext, job: JobView, elastic: bool, base: int, t: str) -> int:
        """Most GPUs phase 2 may give (no growth on a type the job's profile does not cover)."""
        if not elastic:
            return base
        spec = job.spec
        cap = spec.gpu_cap if spec.elastic or self.scale_all == "request" else 1 << 30
        app = job_model(job, ctx)
        if app is not None:
            if t not in app.gpu_types:
                return base
            cap = min(cap, max(1, job.spec.batch_size // app.min_local_bsz))
        elif cap == 1 << 30:
            cap = spec.num_gpus
        return max(base, cap)

    @staticmethod
    def _types(ctx: PolicyContext, job: JobView, free: dict[str, int]) -> list[str]:
        types = [t for t in free if not job.spec.gpu_types or t in job.spec.gpu_types]
        app = job_model(job, ctx)
        if app is not None:
            types = [t for t in types if t in app.gpu_types]
        return types

    def _reclaim(self, snap: ClusterSnapshot, ctx: PolicyContext) -> ReclaimChoice:
        servers, holdings = holdings_from_snapshot(snap)
        choice = choose(self.reclaim, servers, holdings, snap.reclaim_demand, ctx.rng)
        row: dict[str, Any] = {"time": snap.now, "servers": len(choice.servers), "loaned": len(servers),
                               "preempted": len(choice.preempted), "scaled_in": len(choice.scaled_in)}
        if self.compare_reclaim:  # every method on this same instance (seeded separately: ctx.rng untouched)
            for m in METHODS:
                if m == "milp" and len(servers) > self.milp_max_servers:
                    continue
                alt = choose(m, servers, holdings, snap.reclaim_demand, np.random.default_rng(len(self.reclaim_log)))
                row[f"preempted_{m}"] = len(alt.preempted)
        self.reclaim_log.append(row)
        return choice

    def state_dict(self) -> dict[str, Any]:
        return {}

