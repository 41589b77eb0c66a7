"""The live body: the shared engine loop on a wall clock, driving a backend, with all state in the store.

One thread runs `step()`: poll the backend → apply loan offers, cancels, holds, admin resizes → build a frozen
`ClusterSnapshot` from the store → `Engine.round` with a registered policy (the very objects the simulator
uses) → persist the decision and actions → `backend.apply`. API threads only write requests to the store
and wake the loop, so a slow checkpoint never blocks a request.

`Service` drives rounds; the jobs around a round live beside it: what the policy sees (`live_view`), what
the backend reports (`backend_events`), what users asked for (`user_requests`), the policy's saved state
(`policy_state`). A job's life goes through the engine: `Engine.submitted` when the view first reads it,
`Engine.ended` when it finishes, fails for good or is cancelled; the engine calls the policy's hooks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from elastisched.backends.base import Backend, BackendEvent, JobHints
from elastisched.core.clock import Clock, WallClock
from elastisched.core.enums import LoanState, RequestState
from elastisched.core.events import Action, ActionKind
from elastisched.core.nodes import node_set
from elastisched.core.types import ClusterSnapshot, NodeView, PendingReason, Pool
from elastisched.engine.loop import Engine, RoundResult
from elastisched.policies.base import Policy, PolicyContext
from elastisched.service import backend_events, policy_state
from elastisched.service.launches import Launches, in_place
from elastisched.service.live_view import LiveView
from elastisched.service.loan_offers import apply_loan_offers
from elastisched.service.round_times import RoundTimes
from elastisched.service.store import Store
from elastisched.service.submission import policy_named, stored_reason
from elastisched.service.user_requests import apply_requests

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
        self._clock: Clock = clock or WallClock(offset=time.time() - self.epoch)
        self.view = LiveView(store, self.engine, self._clock, self.epoch, models, profiles_dir)
        self.jobs = self.view.jobs  # the engine's bookkeeping (JobState) per active job
        self.profiles_dir = profiles_dir
        policy_state.restore(store, self.engine, self.clock.now())
        self._saved_life_events = self.engine.life_events
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.min_round_gap_s = min(0.25, tick_s)  # a burst of submissions costs one round, not one each
        self.reasons: dict[str, str | None] = {}  # pending reasons as last written to the store
        self.admin_resized: dict[str, int] = {}  # job -> the admin size its move was made to (once per request)
        self._nodes: tuple[tuple[tuple[str, str, int], ...], tuple[NodeView, ...]] | None = None
        self._dirty = True
        self._last_round = -float("inf")
        self.rounds = 0
        self.round_latency_s = 0.0  # policy + engine time of the last round
        self.round_times = RoundTimes()  # wall time of every step that ran a round
        self.last_error: str | None = None
        self.on_round: Any = None  # observer of (snapshot, RoundResult), as `SimConfig.on_round`

    @property
    def clock(self) -> Clock:
        """The service clock (seconds since the store's epoch), shared with the view."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = self.view.clock = clock

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

    def mark_dirty(self) -> None:
        """Something changed within the step: the next step runs a round (no wake-up of its own)."""
        self._dirty = True

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
        key = tuple((r["node_id"], r["gpu_type"], int(r["num_gpus"]))
                    for r in self.store.list_loans((LoanState.LOANED,)))
        if self._nodes is None or self._nodes[0] != key:
            loaned = [NodeView(n, t, g, Pool.LOANABLE, 0) for n, t, g in key]
            self._nodes = (key, tuple(NodeView(n.node_id, n.gpu_type, n.num_gpus, n.pool, i)
                                      for i, n in enumerate((*self.base_nodes, *loaned))))
        return self._nodes[1]

    def nodes_changed(self, nodes: tuple[NodeView, ...]) -> None:
        """The backend's inventory changed (a Ray node joined or left)."""
        self.base_nodes, self._nodes, self._dirty = nodes, None, True

    def step(self) -> None:
        t0 = time.perf_counter()
        events = self.backend.poll()
        if events:
            self._handle(events)
            if any(not isinstance(e, JobHints) for e in events):  # hints refine progress, no round of their own
                self._dirty = True
        if apply_loan_offers(self.store):  # loan offers the API recorded (service/loan_offers.py)
            self._dirty = True
        requests = self.store.requests()
        if requests:
            apply_requests(self, requests)
        pending_reclaims = self.store.list_reclaims((RequestState.PENDING,))
        interval = self.policy.interval
        now = self.clock.now()
        due = interval is not None and now - self._last_round >= interval
        gap_ok = now - self._last_round >= self.min_round_gap_s
        if (self._dirty and gap_ok) or due or pending_reclaims:
            self._dirty = False
            self._last_round = now
            self._round(pending_reclaims)
            ran = True
        else:
            ran = False
        if self.engine.life_events != self._saved_life_events:  # a job entered or left the policy's view
            self._save_policy_state()
        if ran:
            self.round_times.add(time.perf_counter() - t0, self.round_latency_s)

    def snapshot(self, nodes: tuple[NodeView, ...], reclaim_demand: int = 0) -> ClusterSnapshot:
        """The policy's view (`LiveView.snapshot`)."""
        return self.view.snapshot(nodes, reclaim_demand)

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
        returned = list(res.reclaim.servers) if res.reclaim is not None else []
        why = res.decision.reasons
        reasons = {jid: stored_reason(why.get(jid)) for jid, j in snap.jobs.items() if not j.is_running}
        with self.store.tx():  # everything the round decided, in one commit, before the backend acts
            actions = self.launches.prepare(list(res.actions), {j: v.grad_stats for j, v in snap.jobs.items()})
            self._persist(snap, res, actions, returned, reasons)
            for a in actions:
                if a.kind is ActionKind.SUSPEND:
                    self.store.update_job(a.job_id, state="SUSPENDED", placement=[],
                                          reason=PendingReason.PREEMPTED.value)
        self._apply(actions, snap.now)
        types = node_set(nodes).gpu_type
        for a in res.actions:
            if in_place(a):  # batch-only change: the workers switch at a step boundary; no relaunch, no restart
                self.jobs.applied(a, snap.now, types)
                if a.allocation.batch_size:  # the channel to running workers (a no-op where there is none)
                    self.backend.set_batch(a.job_id, a.allocation.batch_size)
        if reclaims:
            self._settle_reclaims(reclaims, returned)
        if actions:
            self._save_policy_state()

    def _settle_reclaims(self, reclaims: list[dict[str, Any]], returned: list[str]) -> None:
        """The servers the round returned go back to inference; the reclaims they answer are done."""
        with self.store.tx() as c:
            t = time.time()
            for n in returned:
                self.store.update_loan(n, conn=c, state=LoanState.RETURNED, returned_at=t)
            for r in reclaims:
                self.store.update_reclaim(int(r["id"]), conn=c, state=RequestState.DONE, nodes=returned, done_at=t)
            self.store.add_event(None, "nodes_returned", {"nodes": returned}, conn=c)
        self._dirty = True

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
            changed = {jid: why for jid, why in reasons.items() if self.reasons.get(jid) != why}
            if changed:  # one executemany: a burst of submissions queues hundreds at once
                self.store.set_reasons(changed, conn=c)
                self.reasons.update(changed)

    # ------------------------------------------------------------------ around a round
    def _apply(self, actions: Sequence[Action], now: float | None = None) -> None:
        backend_events.apply_actions(self, actions, now)

    def _handle(self, events: Sequence[BackendEvent]) -> None:
        backend_events.handle(self, events)

    def forget(self, job_id: str) -> None:
        """The job ended (finished, failed for good, cancelled): it leaves the engine and the service's caches."""
        self.engine.ended(job_id, self.clock.now())
        self.view.forget(job_id)
        self.reasons.pop(job_id, None)
        self.admin_resized.pop(job_id, None)
        self._dirty = True

    def models(self) -> Any:
        """The bundled profiles plus `--profiles` (built on first use: a fit per application)."""
        return self.view.models()

    def known_apps(self) -> set[str]:
        return self.view.known_apps()

    def _save_policy_state(self) -> None:
        policy_state.save(self.store, self.engine)
        self._saved_life_events = self.engine.life_events
