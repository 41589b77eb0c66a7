"""Heap-based event simulator over a SimClock, driving the shared engine (DESIGN.md "Simulation semantics").

Semantics (details and the reasons for each in docs/simulator.md):
- events: arrivals, analytically computed completions, loan-capacity changes; stale completion events
  (the job's allocation changed since) are skipped by version number;
- rounds: a policy with an `interval` is consulted on the tick grid k·interval, at the first tick at or
  after anything changed (or at its `next_round_at` hint; every tick when it gives none) — the Pollux
  artifact's 60 s loop, without its idle ticks; a policy without an interval is consulted right after each
  batch of simultaneous events;
- every launch or change of a running job's allocation costs the application's restart cost (30 s by
  default), during which it holds its GPUs and makes no progress; a suspended job keeps its progress
  (checkpoint on preemption, as in the artifact). Optional `SimConfig.resize_cost`: a change that keeps
  some of the job's GPUs (an in-memory resize, as ONES's scaling agent, ones.md §4) costs that instead;
  None (default) keeps the single restart cost, so every existing result is unchanged;
- each job counts the samples it really processes (`JobView.samples_done`: current samples/s × time
  outside restarts);
- deterministic: events are ordered by (time, sequence number) and all randomness comes from the seed.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from elastisched.core.clock import SimClock
from elastisched.core.events import ActionKind
from elastisched.core.types import NO_ALLOCATION, Allocation, ClusterSnapshot, JobId, JobView, NodeView, Pool
from elastisched.engine.loop import Engine
from elastisched.models.iidp_pollux import iidp_iteration_time
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, PolicyContext
from elastisched.sim.jobstate import INF, SimJob
from elastisched.sim.metrics import SimResult, collect
from elastisched.workloads.schema import Workload

ARRIVAL, COMPLETION, LOAN = 0, 1, 2


def _keeps_gpus(old: Allocation, new: Allocation) -> bool:
    """Whether a change from `old` to `new` keeps some GPUs: a running job shares at least one node with its
    new placement (GPUs on a node are interchangeable in the model, so overlap is counted per node)."""
    if not old.placement or not new.placement:
        return False
    have = dict(old.placement)
    return any(min(have.get(n, 0), g) > 0 for n, g in new.placement)


@dataclass(frozen=True, slots=True)
class LoanTimeline:
    """Loanable inference servers over time: `(time, servers available to training)` steps."""

    steps: tuple[tuple[float, int], ...]
    gpu_type: str = "t4"
    gpus_per_server: int = 4

    @property
    def max_servers(self) -> int:
        return max((n for _, n in self.steps), default=0)


@dataclass
class SimConfig:
    seed: int = 0
    restart_cost: float | None = None  # None = each application's own (30 s default)
    # an in-place resize (a running job keeps some of its GPUs) costs this instead; None = the restart cost
    resize_cost: float | None = None
    # a change of batch / local batch / accumulation on the very same GPUs costs this (JABAS, AdaptDL: in
    # place); None = as any other change (restart or resize cost)
    reconfigure_cost: float | None = None
    check_invariants: bool = True
    max_time: float = INF
    loans: LoanTimeline | None = None
    progress: Callable[[float, int, int], None] | None = None  # (sim time, finished, total)
    options: dict[str, Any] = field(default_factory=dict)


class Simulator:
    def __init__(self, workload: Workload, policy: Policy, nodes: Sequence[NodeView], models: PerfModels,
                 config: SimConfig | None = None) -> None:
        self.cfg = config or SimConfig()
        self.workload, self.policy, self.models = workload, policy, models
        self.train_nodes = tuple(nodes)
        self.loan_nodes: tuple[NodeView, ...] = ()
        if self.cfg.loans is not None:
            ln = self.cfg.loans
            self.loan_nodes = tuple(
                NodeView(f"loan-{i}", ln.gpu_type, ln.gpus_per_server, Pool.LOANABLE, len(nodes) + i)
                for i in range(ln.max_servers))
        self.active_loans: list[NodeView] = []
        self.nodes = self.train_nodes
        self.ctx = PolicyContext(perf=models, rng=np.random.default_rng(self.cfg.seed), seed=self.cfg.seed,
                                 options=dict(self.cfg.options))
        self.engine = Engine(policy, self.ctx, self.cfg.check_invariants)
        self.clock = SimClock()
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.jobs: dict[JobId, SimJob] = {}  # active, submission order
        self.running: dict[JobId, SimJob] = {}
        self.done: list[SimJob] = []
        self.timeline: list[tuple[float, int, int, int]] = []  # (t, busy GPUs, total GPUs, loaned servers)
        self.latencies: list[float] = []
        self.reclaim_demand = 0
        self.reclaims: list[dict[str, Any]] = []
        self.events = 0
        self.stalled: list[JobId] = []
        self._total_for: tuple[NodeView, ...] | None = None
        self._total = 0
        self.busy = 0  # GPUs allocated now
        # engine-owned aggregates, maintained incrementally so a round costs O(changes)
        self.views: dict[JobId, JobView] = {}
        self.running_views: dict[JobId, JobView] = {}
        self.stale: set[JobId] = set()
        self.free: dict[str, int] = {}
        self.node_used = np.zeros(0, dtype=np.int64)
        self._used_for: tuple[NodeView, ...] | None = None
        self._pos_for: tuple[NodeView, ...] | None = None
        self._pos: dict[str, int] = {}

    @property
    def now(self) -> float:
        return self.clock.now()

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, payload))

    def _arrive(self, spec: Any) -> None:
        app = self.models.app(spec.application)
        bounds = [b * spec.work_scale for b in app.epoch_end]
        job = SimJob(spec, app, bounds, updated=self.now)
        self.jobs[spec.job_id] = job
        self.views[spec.job_id] = job.make_view(self.now)  # insertion order = submission order
        self.policy.on_submit(spec, self.now)

    def _complete(self, job: SimJob) -> None:
        job.advance(self.now, finishing=True)
        job.progress = job.total
        job.end_time = self.now
        self._account(job.allocation, -1)
        job.allocation = NO_ALLOCATION
        job.view = None
        jid = job.spec.job_id
        del self.jobs[jid]
        self.running.pop(jid, None)
        self.views.pop(jid, None)
        self.running_views.pop(jid, None)
        self.stale.discard(jid)
        self.done.append(job)
        self.policy.on_finish(jid, self.now)

    def _set_loans(self, n: int) -> None:
        """Make `n` servers available to training; a pending reclaim counts as already returned."""
        have = len(self.active_loans) - self.reclaim_demand
        if n > have:
            cancel = min(self.reclaim_demand, n - have)  # inference needs fewer back than it asked
            self.reclaim_demand -= cancel
            have += cancel
            if n > have:  # lend servers that are not on loan now (returns may have left gaps)
                active = {x.node_id for x in self.active_loans}
                self.active_loans.extend([x for x in self.loan_nodes if x.node_id not in active][: n - have])
                self.nodes = self.train_nodes + tuple(self.active_loans)
        elif n < have:
            self.reclaim_demand += have - n

    # ------------------------------------------------------------------ rounds
    def _snapshot(self) -> ClusterSnapshot:
        if self.policy.needs_progress:
            for jid, job in self.running.items():
                job.advance(self.now)
                self.stale.add(jid)
        for jid in sorted(self.stale):  # sorted: set order would depend on PYTHONHASHSEED
            job = self.jobs.get(jid)
            if job is None:
                continue
            job.view = None
            v = self.views[jid] = job.make_view(self.now)
            if job.allocation.gpus:
                self.running_views[jid] = v
            else:
                self.running_views.pop(jid, None)
        self.stale.clear()
        self._sync_node_used()
        return ClusterSnapshot(self.now, self.nodes, MappingProxyType(self.views), self.reclaim_demand,
                               MappingProxyType(self.running_views), MappingProxyType(self.free),
                               self._used_view())

    def _used_view(self) -> np.ndarray:
        used = self.node_used.copy()
        used.flags.writeable = False
        return used

    def _sync_node_used(self) -> None:
        """Rebuild per-node usage after the node set changed (loans come and go; rare)."""
        if self._used_for is self.nodes:
            return
        pos = {n.node_id: i for i, n in enumerate(self.nodes)}
        self.node_used = np.zeros(len(self.nodes), dtype=np.int64)
        self.free = {}
        for n in self.nodes:
            self.free[n.gpu_type] = self.free.get(n.gpu_type, 0) + n.num_gpus
        for job in self.running.values():
            for n, g in job.allocation.placement:
                if n in pos:
                    self.node_used[pos[n]] += g
                    self.free[self.nodes[pos[n]].gpu_type] -= g
        self._used_for = self.nodes

    def _account(self, alloc: Allocation, sign: int) -> None:
        """Add (+1) or release (-1) an allocation in the busy / free / per-node aggregates."""
        if not alloc.placement:
            return
        self.busy += sign * alloc.gpus
        if self._used_for is not self.nodes:
            return  # rebuilt from scratch at the next snapshot
        pos = self._node_pos()
        for n, g in alloc.placement:
            i = pos.get(n)
            if i is not None:
                self.node_used[i] += sign * g
                t = self.nodes[i].gpu_type
                self.free[t] -= sign * g

    def _return_nodes(self, chosen: Sequence[str], placed: Mapping[JobId, Allocation]) -> None:
        """Give reclaimed servers back. A job the decision moved off them (an elastic scale-in) is resized; a
        job still on them, or stopped, is preempted (its work is kept: checkpoint on signal)."""
        demand = self.reclaim_demand
        pick = [n for n in self.active_loans if n.node_id in set(chosen)][:demand]
        if len(pick) < demand:  # the policy did not choose (enough): return the most recently loaned
            rest = [n for n in reversed(self.active_loans) if n not in pick]
            pick += rest[: demand - len(pick)]
        gone = {n.node_id for n in pick}
        hit = [j for j in self.running.values() if any(n in gone for n in j.allocation.nodes)]
        pre = [j for j in hit if (a := placed.get(j.spec.job_id)) is None or any(n in gone for n in a.nodes)]
        self.reclaims.append({"time": self.now, "servers": sorted(gone), "preempted": len(pre),
                              "scaled_in": len(hit) - len(pre)})
        for job in pre:
            job.advance(self.now)
            job.preemptions += 1
            self._apply_allocation(job, NO_ALLOCATION)
        self.active_loans = [n for n in self.active_loans if n.node_id not in gone]
        self.nodes = self.train_nodes + tuple(self.active_loans)
        self.reclaim_demand = 0

    def _apply_allocation(self, job: SimJob, alloc: Any) -> None:
        jid = job.spec.job_id
        job.version += 1
        old = job.allocation
        self._account(job.allocation, -1)
        self.stale.add(jid)
        job.view = None
        job.rates = None
        if not alloc.placement:
            job.allocation, job.cfg, job.shape, job.samples_per_s = NO_ALLOCATION, None, (), 0.0
            self.running.pop(jid, None)
            return
        pos = self._node_pos()
        types = {self.nodes[pos[n]].gpu_type for n in alloc.nodes}
        one = job.app.batch_config(1, job.app.init_batch_size)
        # mixed-type placements run at the pace of the slowest type (synchronous data parallelism)
        job.gpu_type = min(types, key=lambda t: job.app.throughput(t, (1,), one)) if len(types) > 1 else types.pop()
        job.shape = tuple(g for _, g in alloc.placement)
        gpus = alloc.gpus
        batch = alloc.batch_size or job.spec.batch_size
        job.cfg = job.app.batch_config(gpus, batch)
        job.allocation = alloc
        restart = self.cfg.restart_cost if self.cfg.restart_cost is not None else job.app.restart_cost
        # --- JABAS (issue 10): a new batch / IIDP configuration on the very same GPUs is applied in place;
        # a policy whose jobs change their batch between steps (Pollux / AdaptDL) gets that by default, free
        reconfigure = self.cfg.reconfigure_cost
        if reconfigure is None and self.policy.batch_in_place:
            reconfigure = 0.0
        if reconfigure is not None and old.placement and sorted(old.placement) == sorted(alloc.placement):
            job.restart_until = max(job.restart_until, self.now + reconfigure)
            job.launches -= 1  # not a restart (undone by the += 1 below)
        elif self.cfg.resize_cost is not None and _keeps_gpus(old, alloc):
            # in-memory resize: survivors keep running state; a launch still in progress is not cut short
            job.restart_until = max(job.restart_until, self.now + self.cfg.resize_cost)
        else:
            job.restart_until = self.now + restart
        job.launches += 1
        self._account(alloc, +1)
        if job.start_time is None:
            job.start_time = self.now
        else:
            job.last_resize = self.now
        job.observed[gpus] = job.samples_per_s = job.app.throughput(job.gpu_type, job.shape, job.cfg)
        if alloc.local_batch and alloc.accumulation is not None and alloc.batch_size:
            # --- JABAS (issue 10): IIDP allocation (same local batch on every GPU, per-node accumulation):
            # its rate comes from the one rule in models/iidp_pollux, not the slowest-type rule above
            t_iter = iidp_iteration_time(job.app, {n: self.nodes[pos[n]].gpu_type for n in alloc.nodes},
                                         alloc.placement, alloc.local_batch, alloc.accumulation)
            job.rates = job.app.efficiency.gains(alloc.batch_size) / t_iter
            job.observed[gpus] = job.samples_per_s = alloc.batch_size / t_iter
        self.running[jid] = job
        t_end = job.finish_time()
        if t_end < INF:
            self._push(t_end, COMPLETION, (job, job.version))

    def _round(self) -> float | None:
        snap = self._snapshot()
        res = self.engine.round(snap)
        self.latencies.append(res.latency_s)
        if self.reclaim_demand:
            self._return_nodes(res.decision.reclaim, res.allocations)
        for act in res.actions:
            job = self.jobs[act.job_id]
            if act.kind is not ActionKind.LAUNCH or job.updated < self.now:
                job.advance(self.now)
            if act.kind is ActionKind.SUSPEND:
                if not job.allocation.placement:
                    continue  # already preempted by the reclaim
                job.preemptions += 1
            elif act.allocation.placement and any(n not in self._node_pos() for n in act.allocation.nodes):
                # placed on a node that was just returned: the job waits for the next round, and gives up
                # what it holds now, which the decision has handed to other jobs
                if job.allocation.placement:
                    job.preemptions += 1
                    self._apply_allocation(job, NO_ALLOCATION)
                continue
            self._apply_allocation(job, act.allocation)
        self.timeline.append((self.now, self.busy, self.engine_total_gpus(), len(self.active_loans)))
        return res.decision.next_round_at

    def _node_pos(self) -> dict[str, int]:
        if self._pos_for is not self.nodes:
            self._pos_for, self._pos = self.nodes, {n.node_id: i for i, n in enumerate(self.nodes)}
        return self._pos

    def engine_total_gpus(self) -> int:
        if self._total_for is not self.nodes:
            self._total_for, self._total = self.nodes, sum(n.num_gpus for n in self.nodes)
        return self._total

    # ------------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        specs = self.workload.jobs
        for s in specs:
            self._push(s.submit_time, ARRIVAL, s)
        if self.cfg.loans is not None:
            for t, n in self.cfg.loans.steps:
                self._push(t, LOAN, n)
        interval = self.policy.interval
        pending_round = INF
        total = len(specs)
        last_report = 0.0
        while self.heap or pending_round < INF:
            t_ev = self.heap[0][0] if self.heap else INF
            if t_ev <= pending_round:
                if t_ev > self.cfg.max_time:
                    break
                t, _, kind, payload = heapq.heappop(self.heap)
                if kind == COMPLETION and (payload[0].version != payload[1] or payload[0].end_time is not None):
                    continue  # stale: the job's allocation changed since this completion was predicted
                self.events += 1
                self.clock.advance_to(t)
                if kind == ARRIVAL:
                    self._arrive(payload)
                elif kind == COMPLETION:
                    self._complete(payload[0])
                else:
                    self._set_loans(payload)
                    if self.reclaim_demand:  # inference is never delayed: decide now, on or off the tick grid
                        pending_round = t
                        continue
                # next tick; an event within float noise after a tick is handled at its own time
                nxt = t if interval is None else max(t, math.ceil(t / interval - 1e-9) * interval)
                pending_round = min(pending_round, nxt)
                continue
            if pending_round > self.cfg.max_time:
                break
            self.clock.advance_to(pending_round)
            hint = self._round()
            pending_round = INF
            if not self.running and not self.heap and self.jobs:
                self.stalled = sorted(self.jobs)  # nothing runs and nothing will happen: jobs can never fit
                break
            if interval is not None and self.jobs:
                nxt = (math.floor(self.now / interval + 1e-9) + 1) * interval  # back on the grid after off-grid rounds
                if hint is not None:
                    nxt = max(nxt, hint, math.ceil(hint / interval - 1e-9) * interval) if hint < INF else INF
                pending_round = nxt
            if self.cfg.progress is not None and time.perf_counter() - last_report > 0.2:
                last_report = time.perf_counter()
                self.cfg.progress(self.now, len(self.done), total)
        for job in list(self.running.values()):
            job.advance(self.now)
        return collect(self, time.perf_counter() - wall0)
