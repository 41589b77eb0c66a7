"""Heap-based event simulator over a SimClock, driving the shared engine (DESIGN.md "Simulation semantics").

Semantics (details and the reasons for each in docs/simulator.md):
- events: arrivals (read from the workload in time order, first among the events of their instant),
  analytically computed completions, loan-capacity changes; stale completion events (the job's allocation
  changed since) are skipped by version number;
- rounds: a policy with an `interval` is consulted on the tick grid k·interval, at the first tick at or
  after anything changed (or at its `next_round_at` hint; every tick when it gives none) — the Pollux
  artifact's 60 s loop, without its idle ticks; a policy without an interval is consulted right after each
  batch of simultaneous events;
- every launch or change of a running job's allocation costs the application's restart cost (30 s by
  default), during which it holds its GPUs and makes no progress; a suspended job keeps its progress
  (checkpoint on preemption, as in the artifact). Optional `SimConfig.resize_cost`: a change that keeps
  some of the job's GPUs (an in-memory resize, as ONES's scaling agent, ones.md §4) costs that instead;
  None (default) keeps the single restart cost; a change of batch size or accumulation on the very same GPUs
  is applied in place (`SimConfig.reconfigure_cost`, 0 s by default; no restart counted), the one rule of
  `engine.jobstate.change_kind` that the live service follows too;
- each job counts the samples it really processes (`JobView.samples_done`: current samples/s × time
  outside restarts);
- deterministic: events are ordered by (time, sequence number) and all randomness comes from the seed;
- memory grows with the active jobs: a job's row of jobs.csv is made when it ends, and its state goes.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from elastisched.core.clock import SimClock
from elastisched.core.events import ActionKind
from elastisched.core.nodes import node_set
from elastisched.core.types import NO_ALLOCATION, ClusterSnapshot, JobId, JobView, NodeView, Pool
from elastisched.engine.epochs import Bounds
from elastisched.engine.jobstate import INF, JobState, new_state
from elastisched.engine.loop import Engine, RoundResult
from elastisched.engine.overrides import admin_resize, pin
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, PolicyContext
from elastisched.sim.config import SimConfig
from elastisched.sim.idle import idle_round, left_blocked
from elastisched.sim.metrics import JobRows, SimResult, collect, servers_per_type, timeline_table
from elastisched.sim.timing import ARRIVAL, EventQueue, in_submission_order, next_round
from elastisched.sim.usage import ClusterUsage
from elastisched.workloads.schema import Workload

COMPLETION, LOAN, FAILURE, RESIZE = 1, 2, 3, 4  # event kinds (`timing.ARRIVAL`: 0)
SimJob = JobState  # the simulator keeps the engine's bookkeeping object per job


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
        self._set_nodes(self.train_nodes)
        self.ctx = PolicyContext(perf=models, rng=np.random.default_rng(self.cfg.seed), seed=self.cfg.seed,
                                 options=dict(self.cfg.options))
        self.engine = Engine(policy, self.ctx, self.cfg.check_invariants)
        self.clock = SimClock()
        self.queue = EventQueue()  # every event but the arrivals (`_push_inputs`)
        self.jobs: dict[JobId, SimJob] = {}  # active, submission order
        self.running: dict[JobId, SimJob] = {}
        self.done: list[SimJob] = []  # finished jobs' states, with `SimConfig.keep_finished` only
        self.finished = 0
        self.per_type_servers = servers_per_type(self.train_nodes)
        self.rows = JobRows(self.per_type_servers)  # each finished job's row of jobs.csv, appended as it ends
        self.job_rows = self.rows.table
        self.timeline = timeline_table()  # (t, busy GPUs, total GPUs, loaned servers) after each round
        self.latencies = array("d")  # the policy's decision time per round it was consulted in
        self.rounds_skipped = 0  # rounds it was not consulted in, having promised they decide nothing
        self._blocked = False  # only arrivals since a round that left a job blocked (`Policy.idle_while_blocked`)
        self.reclaim_demand = 0
        self.reclaims: list[dict[str, Any]] = []
        self.events = 0
        self.stalled: list[JobId] = []
        self.usage = ClusterUsage()  # engine-owned aggregates, maintained incrementally: O(changes) a round
        self.views: dict[JobId, JobView] = {}
        self.running_views: dict[JobId, JobView] = {}
        self.pending_views: dict[JobId, JobView] = {}  # the others, in submission order once `_pending` sorts
        self._pending_sorted = True
        self._pending_proxy: Mapping[JobId, JobView] = MappingProxyType(self.pending_views)
        self.stale: set[JobId] = set()
        self._arrived: list[JobId] = []  # jobs that arrived since the last snapshot (its `changed`, with the stale)
        self._serial = 0  # snapshots made
        self._bounds: dict[tuple[str, float], Bounds] = {}  # epoch bounds per (application, scale), shared
        # read-only views of the dicts above, made once: (jobs, running, the free-GPU dict they show, its view)
        self._proxies = (MappingProxyType(self.views), MappingProxyType(self.running_views), None,
                         MappingProxyType({}))

    @property
    def now(self) -> float:
        return self.clock.now()

    @property
    def busy(self) -> int:
        """GPUs allocated now."""
        return self.usage.busy

    def _set_nodes(self, nodes: tuple[NodeView, ...]) -> None:
        """The cluster's nodes now (training nodes, then the servers on loan) and their one `NodeSet`."""
        self.nodes = nodes
        self.node_set = node_set(nodes)
        self._blocked = False

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, payload: Any) -> None:
        self.queue.push(t, kind, payload)

    def _arrive(self, spec: Any) -> None:
        job = new_state(spec, self.models.app(spec.application), now := self.now, self._bounds)
        if not self.cfg.length_estimate.is_exact:
            job.declared = self.cfg.length_estimate.declared(job.total, spec.job_id, self.cfg.seed)
        self.jobs[spec.job_id] = job
        v = self.views[spec.job_id] = job.make_view(now)  # insertion order = submission order
        self.pending_views[spec.job_id] = v
        self._arrived.append(spec.job_id)
        self.engine.submitted(spec, now)

    def _complete(self, job: SimJob, failed: bool = False) -> None:
        self._blocked = False
        job.advance(now := self.now, finishing=not failed)
        if not failed:
            job.progress = job.total
        job.end_time, job.failed = now, failed
        self.usage.account(self.node_set, job.allocation, -1)
        job.allocation = NO_ALLOCATION
        job.view = None
        jid = job.spec.job_id
        del self.jobs[jid]
        self.running.pop(jid, None)
        self.views.pop(jid, None)
        self.running_views.pop(jid, None)
        self.pending_views.pop(jid, None)
        self.stale.discard(jid)
        self.rows.add(job)  # its state is final: its row, then it may go
        self.finished += 1
        if self.cfg.keep_finished:
            self.done.append(job)
        self.engine.ended(jid, now)

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
                self._set_nodes(self.train_nodes + tuple(self.active_loans))
        elif n < have:
            self.reclaim_demand += have - n

    # ------------------------------------------------------------------ rounds
    def _snapshot(self) -> ClusterSnapshot:
        now, jobs = self.clock.now(), self.jobs
        if self.policy.needs_progress:
            for jid, job in self.running.items():
                job.advance(now)
                self.stale.add(jid)
        arrived, stale = self._arrived, self.stale
        changed = [jid for jid in arrived if jid in jobs] if arrived else []  # (a failure may end a job before)
        views, running, pending = self.views, self.running_views, self.pending_views
        for jid in sorted(stale) if len(stale) > 1 else stale:  # sorted: set order would depend on PYTHONHASHSEED
            job = jobs.get(jid)
            if job is None:
                continue
            changed.append(jid)
            job.view = None
            v = views[jid] = job.make_view(now)
            if job.allocation.gpus:
                running[jid] = v
                pending.pop(jid, None)
            else:
                running.pop(jid, None)
                if jid not in pending:
                    self._pending_sorted = False  # stopped: back in the queue, at its submission position
                pending[jid] = v
        self.stale.clear()
        if not self.usage.is_for(self.node_set):  # the node set changed (a loan came or went): rebuild the usage
            self.usage.sync(self.node_set, (job.allocation for job in self.running.values()))
        free = self.usage.free
        if self._proxies[2] is not free:  # (a new free-GPU dict when the node set changed)
            self._proxies = (self._proxies[0], self._proxies[1], free, MappingProxyType(free))
        self._arrived = []
        self._serial += 1
        return ClusterSnapshot(now, self.nodes, self._proxies[0], self.reclaim_demand, self._proxies[1],
                               self._proxies[3], self.usage.snapshot_copy(), self._pending,
                               tuple(dict.fromkeys(changed)) if len(changed) > 1 else tuple(changed), self._serial)

    def _pending(self) -> Mapping[JobId, JobView]:
        """Active jobs without GPUs in submission order (`ClusterSnapshot.pending`): put back in order only
        when a policy asks after a job stopped, so a preemptive policy that never asks pays nothing."""
        if not self._pending_sorted:
            pend = self.pending_views
            self.pending_views = {jid: v for jid, v in self.views.items() if jid in pend}
            self._pending_proxy = MappingProxyType(self.pending_views)
            self._pending_sorted = True
        return self._pending_proxy

    def _return_nodes(self, res: RoundResult) -> None:
        """Give back the servers the engine chose (vacating is in the round's actions already)."""
        rec = res.reclaim
        gone = set(rec.servers) if rec is not None else set()
        acts = {a.job_id: a for a in res.actions} if rec else {}
        self.reclaims.append({"time": self.now, "servers": sorted(gone),
                              "preempted": len(rec.preempted) if rec else 0,
                              "scaled_in": len(rec.scaled_in) if rec else 0,
                              # each touched job's GPUs before and after (the loan metrics of experiments/)
                              "gpus": {j: (acts[j].previous.gpus, acts[j].allocation.gpus)
                                       for j in (*rec.preempted, *rec.scaled_in) if j in acts} if rec else {}})
        self.active_loans = [n for n in self.active_loans if n.node_id not in gone]
        self._set_nodes(self.train_nodes + tuple(self.active_loans))
        self.reclaim_demand = 0

    def _apply_allocation(self, job: SimJob, alloc: Any) -> None:
        jid = job.spec.job_id
        if job.allocation.placement:
            self.usage.account(self.node_set, job.allocation, -1)
        self.stale.add(jid)
        if not alloc.placement:
            job.apply(NO_ALLOCATION, self.now, {}, 0.0)
            self.running.pop(jid, None)
            return
        types = self.node_set.gpu_type
        restart = self.cfg.restart_cost if self.cfg.restart_cost is not None else job.app.restart_cost
        # a policy whose jobs change their batch between steps (Pollux / AdaptDL) reconfigures in place, free
        reconfigure = self.cfg.reconfigure_cost
        if reconfigure is None and self.policy.batch_in_place:
            reconfigure = 0.0
        pl = alloc.placement
        job.apply(alloc, self.now, {pl[0][0]: types[pl[0][0]]} if len(pl) == 1 else {n: types[n] for n, _ in pl},
                  restart, self.cfg.resize_cost, reconfigure)
        self.usage.account(self.node_set, alloc, +1)
        self.running[jid] = job
        t_end = job.finish_time()
        if t_end < INF:
            self.queue.push(t_end, COMPLETION, (job, job.version))

    def _admin_resize(self, jid: JobId, gpus: int) -> None:
        """Pin the job to `gpus` and, if it runs, move it there now through the engine (engine.reclaim)."""
        job = self.jobs.get(jid)
        if job is None:
            return
        self._blocked = False
        job.spec = pin(job.spec, gpus)
        job.view = None
        self.stale.add(jid)
        act = admin_resize(self._snapshot(), jid, gpus)
        if act is not None:
            job.advance(self.now)
            self._apply_allocation(job, act.allocation)

    def _round(self) -> float | None:
        if idle_round(self.policy, self.cfg, self.reclaim_demand, self._blocked, self._arrived, self.jobs,
                      (self.pending_views, self.stale)):
            self.rounds_skipped += 1
            self.timeline.append((self.now, self.busy, self.node_set.total_gpus, len(self.active_loans)))
            return None
        snap = self._snapshot()
        res = self.engine.round(snap)
        self.latencies.append(res.latency_s)
        if self.cfg.on_round is not None:
            self.cfg.on_round(snap, res)
        for jid, why in res.decision.reasons.items():
            job = self.jobs.get(jid)
            if job is not None:
                job.reason = why
        returned = self.reclaim_demand > 0
        if returned:
            self._return_nodes(res)
        now, pos = self.now, self.node_set.position  # (the node set changes only in `_return_nodes`, above)
        for act in res.actions:
            job = self.jobs[act.job_id]
            if act.kind is not ActionKind.LAUNCH or job.updated < now:
                job.advance(now)
            if act.kind is ActionKind.SUSPEND:
                if not job.allocation.placement:
                    continue  # already preempted by the reclaim
                job.preemptions += 1
            elif returned and act.allocation.placement and any(n not in pos for n, _ in act.allocation.placement):
                # placed on a node that was just returned: the job waits for the next round, and gives up
                # what it holds now, which the decision has handed to other jobs
                if job.allocation.placement:
                    job.preemptions += 1
                    self._apply_allocation(job, NO_ALLOCATION)
                continue
            self._apply_allocation(job, act.allocation)
        self._blocked = not returned and left_blocked(self.policy, self.cfg, res)
        self.timeline.append((now, self.busy, self.node_set.total_gpus, len(self.active_loans)))
        return res.decision.next_round_at

    # ------------------------------------------------------------------ inputs and the main loop
    def _push_inputs(self) -> None:
        """Every event known before the run but the arrivals: loan changes, failures and admin resizes. The
        arrivals are read from the workload in time order as the clock reaches them (`in_submission_order`), not
        pushed: a million-job heap would cost memory and a log-factor per event. They come first among events at
        one instant, as when they were pushed first."""
        if self.cfg.loans is not None:
            for t, n in self.cfg.loans.steps:
                self._push(t, LOAN, n)
        for t, jid in self.cfg.failures:
            self._push(t, FAILURE, jid)
        for t, jid, g in self.cfg.admin_resizes:
            self._push(t, RESIZE, (jid, g))

    def _handle(self, kind: int, payload: Any) -> bool:
        """Apply one event; True when it needs a round right now (a reclaim: inference is never delayed)."""
        if kind == ARRIVAL:
            self._arrive(payload)
        elif kind == COMPLETION:
            self._complete(payload[0])
        elif kind == FAILURE:
            if payload in self.jobs:
                self._complete(self.jobs[payload], failed=True)
        elif kind == RESIZE:
            self._admin_resize(*payload)
        else:
            self._set_loans(payload)
            return self.reclaim_demand > 0
        return False

    # ------------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        self._push_inputs()
        arrivals, queue = in_submission_order(self.workload.jobs), self.queue
        times = queue.times  # (read here, written by the queue alone)
        k, n_arrivals = 0, len(arrivals)
        t_arrival = arrivals[0].submit_time if n_arrivals else INF
        interval, max_time = self.policy.interval, self.cfg.max_time
        advance, arrive, complete, progress = self.clock.advance_to, self._arrive, self._complete, self.cfg.progress
        pending_round = INF
        last_report = 0.0
        while k < n_arrivals or times or pending_round < INF:
            t = times[0] if times else INF
            if t_arrival <= t:
                t = t_arrival
            if t <= pending_round:
                if t > max_time:
                    break
                if t == t_arrival:  # an arrival before any other event at its instant
                    spec = arrivals[k]
                    k += 1
                    t_arrival = arrivals[k].submit_time if k < n_arrivals else INF
                    self.events += 1
                    advance(t)
                    arrive(spec)
                else:
                    t, kind, payload = queue.pop()
                    if kind == COMPLETION and (payload[0].version != payload[1] or payload[0].end_time is not None):
                        continue  # stale: the job's allocation changed since this completion was predicted
                    self.events += 1
                    advance(t)
                    if kind == COMPLETION:  # (the common event, without `_handle`)
                        complete(payload[0])
                    elif self._handle(kind, payload):
                        pending_round = t  # decide now, on or off the tick grid
                        continue
                # next tick; an event within float noise after a tick is handled at its own time
                nxt = t if interval is None else max(t, math.ceil(t / interval - 1e-9) * interval)
                if nxt < pending_round:
                    pending_round = nxt
                continue
            if pending_round > max_time:
                break
            advance(pending_round)
            hint = self._round()
            if not self.running and not times and k >= n_arrivals and self.jobs:
                self.stalled = sorted(self.jobs)  # nothing runs and nothing will happen: jobs can never fit
                break
            pending_round = INF if interval is None else next_round(pending_round, interval if self.jobs else None,
                                                                    hint)
            if progress is not None and time.perf_counter() - last_report > 0.2:
                last_report = time.perf_counter()
                progress(self.now, self.finished, len(self.workload.jobs))
        for job in list(self.running.values()):
            job.advance(self.now)
        self.rows.flush()
        return collect(self, time.perf_counter() - wall0)
