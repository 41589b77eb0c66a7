"""The live body: the shared engine loop on a wall clock, driving a backend, with all state in the store.

One thread runs `step()`: poll the backend → settle cancels, admin resizes and reclaims → build a frozen
`ClusterSnapshot` from the store → `Engine.round` with a registered policy (the very objects the simulator
uses) → persist the decision and actions → `backend.apply`. API threads only write requests to the store
and wake the loop, so a slow checkpoint never blocks a request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from elastisched.backends.base import Backend, BackendEvent, GenerationEnded, JobHints, JobStarted, NodesChanged
from elastisched.core.clock import Clock, WallClock
from elastisched.core.events import Action, ActionKind, JobFailed, JobFinished
from elastisched.core.types import (
    NO_ALLOCATION,
    Allocation,
    ClusterSnapshot,
    JobPhase,
    JobSpec,
    JobView,
    NodeView,
    PendingReason,
    Pool,
)
from elastisched.engine.loop import Engine, RoundResult
from elastisched.engine.overrides import admin_resize
from elastisched.models.application import Application
from elastisched.policies.base import Policy, PolicyContext
from elastisched.service.launches import Launches, in_place
from elastisched.service.live_jobs import LiveJobs
from elastisched.service.store import TERMINAL, Store
from elastisched.service.submission import job_spec, placement, policy_named, stored_reason

log = logging.getLogger("elastisched.service")


class Service:
    """Engine + store + backend. `start()` recovers from the store and runs the loop in a thread."""

    def __init__(self, store: Store, nodes: tuple[NodeView, ...], backend: Backend, policy: str | Policy = "fifo",
                 *, tick_s: float = 0.5, seed: int = 0, profiles_dir: str | None = None,
                 clock: Clock | None = None, models: Any = None, max_retries: int = 2,
                 policy_interval: float | None = None) -> None:
        self.store = store
        self.launches = Launches(store, max_retries)  # generations: planned before, recorded after the backend
        self.base_nodes = nodes
        self.backend = backend
        self.policy = policy_named(policy) if isinstance(policy, str) else policy
        self.policy_name = self.policy.name
        if policy_interval is not None:  # `serve --policy-interval`: the period of a periodic policy's rounds
            self.policy.interval = policy_interval  # type: ignore[misc]
        self.engine = Engine(self.policy, PolicyContext(perf=None, rng=np.random.default_rng(seed), seed=seed))
        self.tick_s = tick_s
        epoch = store.get_meta("epoch")
        if epoch is None:
            epoch = time.time()
            store.set_meta("epoch", epoch)
        self.epoch = float(epoch)
        self.clock: Clock = clock or WallClock(offset=time.time() - self.epoch)
        state = store.get_meta(f"policy_state:{self.policy_name}")
        if state:
            try:
                self.policy.load_state_dict(state)
            except Exception as e:  # a policy may change its state format between versions
                log.warning("policy state not restored: %s", e)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._specs: dict[str, tuple[int | None, JobSpec]] = {}  # immutable but for an admin size (resize_to)
        self.min_round_gap_s = min(0.25, tick_s)  # a burst of submissions costs one round, not one each
        self._reasons: dict[str, str | None] = {}
        self._requests: list[dict[str, Any]] = []
        self._perf: Any = models
        self.profiles_dir = profiles_dir
        self.jobs = LiveJobs(self._model_of)  # the engine's bookkeeping (JobState) per active job
        self._nodes: tuple[tuple[tuple[str, str, int], ...], tuple[NodeView, ...]] | None = None
        self._apps: set[str] | None = None
        self._dirty = True
        self._last_round = -float("inf")
        self.rounds = 0
        self.round_latency_s = 0.0  # policy + engine time of the last round
        self.last_error: str | None = None
        self.on_round: Any = None  # observer of (snapshot, RoundResult), as `SimConfig.on_round`

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        try:  # a broken job or record must never keep the service from starting
            self._handle(self.backend.recover(self.launches.records()) + self.launches.unsettled())
        except Exception as e:
            self.last_error = f"recovery: {type(e).__name__}: {e}"
            log.exception("recovery failed")
        self._thread = threading.Thread(target=self._run, name="elastisched-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._save_policy_state()
        self.backend.close()

    def wake(self) -> None:
        """Something changed (submission, cancel, loan...): run a round soon."""
        self._dirty = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
                self.last_error = None
            except Exception as e:  # keep serving; the error is visible in /healthz and the log
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("engine step failed")
            self._wake.wait(self.tick_s)
            self._wake.clear()
            if self._dirty:  # coalesce a burst of wake-ups into the next round
                time.sleep(max(0.0, self.min_round_gap_s - (self.clock.now() - self._last_round)))

    # ------------------------------------------------------------------ one step
    def nodes(self) -> tuple[NodeView, ...]:
        """Training nodes plus servers on loan, in loan order; the same tuple while loans do not change (the
        engine's placer and capacity caches are keyed by the tuple's identity)."""
        key = tuple((r["node_id"], r["gpu_type"], int(r["num_gpus"])) for r in self.store.list_loans(("LOANED",)))
        if self._nodes is None or self._nodes[0] != key:
            loaned = [NodeView(n, t, g, Pool.LOANABLE, 0) for n, t, g in key]
            self._nodes = (key, tuple(NodeView(n.node_id, n.gpu_type, n.num_gpus, n.pool, i)
                                      for i, n in enumerate((*self.base_nodes, *loaned))))
        return self._nodes[1]

    def step(self) -> None:
        events = self.backend.poll()
        if events:
            self._handle(events)
            if any(not isinstance(e, JobHints) for e in events):  # hints refine progress, no round of their own
                self._dirty = True
        self._requests = self.store.requests()
        if self._requests:
            self._cancels()
            self._holds()
            self._resizes()
        pending_reclaims = self.store.list_reclaims(("PENDING",))
        interval = self.policy.interval
        now = self.clock.now()
        due = interval is not None and now - self._last_round >= interval
        gap_ok = now - self._last_round >= self.min_round_gap_s
        if (self._dirty and gap_ok) or due or pending_reclaims:
            self._dirty = False
            self._last_round = now
            self._round(pending_reclaims)

    def snapshot(self, nodes: tuple[NodeView, ...], reclaim_demand: int = 0) -> ClusterSnapshot:
        """The policy's view, from the store's rows and the engine's `JobState` of each job (as the
        simulator's: running jobs are brought up to now when the policy reads progress)."""
        jobs: dict[str, JobView] = {}
        rows = self.store.active_light()
        missing = [r["id"] for r in rows if self._specs.get(r["id"], (0,))[0] != r["resize_to"]]
        if missing:
            raw = self.store.specs(missing)
            for r in rows:
                if r["id"] in raw:
                    self._specs[r["id"]] = (r["resize_to"], job_spec(r["id"], r["name"], r["submit_time"] - self.epoch,
                                                                     raw[r["id"]], r["resize_to"]))
        now = self.clock.now()
        types = {n.node_id: n.gpu_type for n in nodes}
        fresh = self.policy.needs_progress
        for row in rows:
            if row["cancel_requested"] or row["held"]:
                continue
            jid = row["id"]
            place = placement(row["placement"]) if row["placement"] else ()
            st = self.jobs.sync(self._specs[jid][1], place, row["batch_size"], now, types, int(row["restarts"]))
            if fresh and place:
                st.advance(now)
            jobs[jid] = st.make_view(now)
        return ClusterSnapshot(now, nodes, jobs, reclaim_demand)

    def _model_of(self, spec: JobSpec) -> Application | None:
        """The job's own performance model, None when its application has no profile (the policy's model-free
        fallback then applies to this job alone); the models are loaded on the first profiled job."""
        if spec.application not in self.known_apps():
            return None
        perf = self.models()
        self.engine.ctx.perf = perf
        return perf.app(spec.application) if spec.application in perf else None

    def _round(self, reclaims: list[dict[str, Any]]) -> None:
        nodes = self.nodes()
        loaned = [n for n in nodes if n.pool is Pool.LOANABLE]
        demand = min(sum(int(r["count"]) for r in reclaims), len(loaned))
        snap = self.snapshot(nodes, demand)
        res = self.engine.round(snap)
        self.rounds += 1
        self.round_latency_s = res.latency_s
        if self.on_round is not None:
            self.on_round(snap, res)
        actions = self.launches.prepare(list(res.actions), {j: v.grad_stats for j, v in snap.jobs.items()})
        returned = list(res.reclaim.servers) if res.reclaim is not None else []
        why = res.decision.reasons
        reasons = {jid: stored_reason(why.get(jid)) for jid, j in snap.jobs.items() if not j.is_running}
        self._persist(snap, res, actions, returned, reasons)
        for a in actions:
            if a.kind is ActionKind.SUSPEND:
                self.store.update_job(a.job_id, state="SUSPENDED", placement=[], reason=PendingReason.PREEMPTED.value)
        self._apply(actions, snap.now)
        types = {n.node_id: n.gpu_type for n in nodes}
        push = getattr(self.backend, "set_batch", None)  # the channel to running workers (local backend)
        for a in res.actions:
            if in_place(a):  # batch-only change: the workers switch at a step boundary; no relaunch, no restart
                self.jobs.applied(a, snap.now, types)
                if push is not None and a.allocation.batch_size:
                    push(a.job_id, a.allocation.batch_size)
        if reclaims:
            with self.store.tx() as c:
                t = time.time()
                for n in returned:
                    self.store.update_loan(n, conn=c, state="RETURNED", returned_at=t)
                for r in reclaims:
                    self.store.update_reclaim(int(r["id"]), conn=c, state="DONE", nodes=returned, done_at=t)
                self.store.add_event(None, "nodes_returned", {"nodes": returned}, conn=c)
            self._dirty = True
        if actions:
            self._save_policy_state()

    def _persist(self, snap: ClusterSnapshot, res: RoundResult, actions: list[Action], returned: list[str],
                 reasons: dict[str, str]) -> None:
        """Write the decision, its actions and the pending reasons before anything acts on them."""
        with self.store.tx() as c:
            if actions or returned:
                self.store.add_event(None, "decision", {
                    "time": snap.now, "policy": self.policy_name, "latency_s": res.latency_s,
                    "allocations": {j: [list(p) for p in a.placement] for j, a in res.allocations.items()},
                    "reasons": {j: str(r) for j, r in res.decision.reasons.items()}, "reclaim": returned}, conn=c)
            for a in actions:
                self.store.add_event(a.job_id, "action", {
                    "kind": a.kind.value, "placement": [list(p) for p in a.allocation.placement],
                    "previous": [list(p) for p in a.previous.placement], "batch_size": a.allocation.batch_size},
                    conn=c)
            changed = {jid: why for jid, why in reasons.items() if self._reasons.get(jid) != why}
            if changed:  # one executemany: a burst of submissions queues hundreds at once
                self.store.set_reasons(changed, conn=c)
                self._reasons.update(changed)

    # ------------------------------------------------------------------ requests
    def _cancels(self) -> None:
        for row in self._requests:
            if row["cancel_requested"]:
                if row["placement"]:
                    self.launches.stopping(row["id"])
                    self.backend.cancel(row["id"])
                    self._handle(self.backend.poll())
                self.store.update_job(row["id"], state="CANCELLED", placement=[], end_time=time.time(),
                                      reason=None)
                self._forget(row["id"])
                self._dirty = True

    def _holds(self) -> None:
        """User suspensions (`POST /v1/jobs/{id}:suspend`): a running job is checkpointed and stopped; a held
        job stays out of every snapshot (no policy sees it) until `:resume` queues it again."""
        stop = [r for r in self._requests if r["held"] and not r["cancel_requested"]
                and (r["placement"] or r["state"] != "SUSPENDED")]
        for row in stop:
            place = placement(row["placement"])
            if place:
                prev = Allocation(placement=place, batch_size=row["batch_size"])
                self.store.add_event(row["id"], "action", {"kind": "suspend", "placement": [],
                                                           "previous": [list(p) for p in place], "user": True})
                self.launches.stopping(row["id"])
                self._apply([Action(ActionKind.SUSPEND, row["id"], NO_ALLOCATION, prev)])
            self.store.update_job(row["id"], state="SUSPENDED", placement=[], reason=PendingReason.HELD.value)
            self._reasons.pop(row["id"], None)
            self.jobs.stop(row["id"], self.clock.now())  # the held time is not service
            self._dirty = True

    def _resizes(self) -> None:
        """Admin resizes (`POST /v1/jobs/{id}:resize`) of running jobs, through the engine (`engine.reclaim.
        admin_resize`: its placer on the GPU type the job runs on, then the invariant check); the job then
        stays pinned at that size. One that does not fit now waits with reason ResizePending."""
        rows = [r for r in self._requests if r["resize_to"] and r["placement"] and not r["cancel_requested"]
                and not r["held"] and sum(int(k) for _, k in r["placement"]) != int(r["resize_to"])]
        if not rows:
            return
        nodes = self.nodes()
        for row in rows:
            snap = self.snapshot(nodes)
            act = admin_resize(snap, row["id"], int(row["resize_to"]))
            act = self.launches.plan(act) if act is not None else None
            if act is None:
                self.store.update_job(row["id"], reason=PendingReason.RESIZE_PENDING.value,
                                      message=f"resize to {row['resize_to']} GPUs does not fit now")
                continue
            self.store.add_event(row["id"], "action", {
                "kind": "resize", "placement": [list(p) for p in act.allocation.placement],
                "previous": [list(p) for p in act.previous.placement], "admin": True})
            self._apply([act], snap.now)
            self._dirty = True

    # ------------------------------------------------------------------ events
    def _apply(self, actions: Sequence[Action], now: float | None = None) -> None:
        """Hand actions to the backend, apply them to the engine's bookkeeping (as the simulator does when
        it applies them), then record at once what the backend reports (PIDs, generations stopped)."""
        self.backend.apply(actions)
        now = self.clock.now() if now is None else now
        types = {n.node_id: n.gpu_type for n in self.nodes()}
        for a in actions:
            self.jobs.applied(a, now, types)
        self._handle(self.backend.poll())

    def _handle(self, events: Sequence[BackendEvent]) -> None:
        for e in events:
            try:
                self._event(e)
            except Exception as exc:  # one job's bad event must not stop the others (nor startup)
                self.last_error = f"event {type(e).__name__} of {e.job_id}: {type(exc).__name__}: {exc}"
                log.exception("handling %s failed", e)

    def _event(self, e: BackendEvent) -> None:
        if isinstance(e, NodesChanged):  # a Ray node joined or left: new inventory; jobs on a lost one requeue
            self.base_nodes, self._nodes, self._dirty = e.nodes, None, True
            self.store.add_event(None, "nodes_changed", {"nodes": [n.node_id for n in e.nodes], "lost": list(e.lost)})
            self._apply(self.launches.nodes_lost(set(e.lost)))
            return
        row = self.store.get_job(e.job_id)
        if isinstance(e, JobStarted):
            self.launches.started(e)
        elif isinstance(e, GenerationEnded) and row is not None:
            out = self.launches.ended(e, row)
            if out.note:
                self.store.add_event(e.job_id, out.note, {"generation": e.generation, "reason": out.message})
            if out.relaunch is not None:
                self._apply([out.relaunch])
            if out.job_state is not None and row["state"] not in TERMINAL:
                self._end(e.job_id, out.job_state, out.message)
            return
        if row is None or row["state"] in TERMINAL:
            return
        if isinstance(e, JobHints):
            self.jobs.hinted(e, e.time - self.epoch, row)
        elif isinstance(e, JobStarted):
            self.jobs.generation_started(e.job_id, min(self.clock.now(), e.time - self.epoch), e.adopted)
            self.store.update_job(e.job_id, state=JobPhase.RUNNING.value, reason=None,
                                  start_time=row["start_time"] or time.time())
        elif isinstance(e, JobFinished):
            self._end(e.job_id, JobPhase.SUCCEEDED.value, None)
        elif isinstance(e, JobFailed):
            self._end(e.job_id, JobPhase.FAILED.value, e.reason)

    def _end(self, job_id: str, state: str, message: str | None) -> None:
        with self.store.tx() as c:
            self.store.update_job(job_id, conn=c, state=state, placement=[], end_time=time.time(),
                                  **({"message": message} if message else {}))
            self.store.add_event(job_id, "finished" if state == JobPhase.SUCCEEDED else "failed",
                                 {"reason": message} if message else {}, conn=c)
        self._forget(job_id)
        self._dirty = True

    def models(self) -> Any:
        """The bundled profiles plus `--profiles` (built on first use: a fit per application)."""
        if self._perf is None:
            from elastisched.service.profiles import load_models

            self._perf = load_models(self.profiles_dir)
        return self._perf

    def known_apps(self) -> set[str]:
        if self._apps is None:
            if self._perf is not None:
                self._apps = set(self._perf.apps)
            else:
                from elastisched.service.profiles import app_names

                self._apps = app_names(self.profiles_dir)
        return self._apps

    def _forget(self, job_id: str) -> None:
        self.jobs.forget(job_id)
        self._specs.pop(job_id, None)
        self._reasons.pop(job_id, None)

    def _save_policy_state(self) -> None:
        try:
            state = self.policy.state_dict()
            if state:
                self.store.set_meta(f"policy_state:{self.policy_name}", state)
        except Exception as e:  # non-JSON state: the policy restarts cold, which is allowed
            log.debug("policy state not saved: %s", e)
