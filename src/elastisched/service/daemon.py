"""The live body: the shared engine loop on a wall clock, driving a backend, with all state in the store.

One thread runs `step()`: poll the backend → settle cancels, admin resizes and reclaims → build a frozen
`ClusterSnapshot` from the store → `Engine.round` with a registered policy (the very objects the simulator
uses) → persist the decision and actions → `backend.apply`. API threads only write requests to the store
and wake the loop, so a slow checkpoint never blocks a request.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from elastisched.backends.base import Backend, BackendEvent, JobHints, JobRetried, JobStarted
from elastisched.core.clock import WallClock
from elastisched.core.errors import UnknownPolicyError
from elastisched.core.events import Action, ActionKind, JobFailed, JobFinished
from elastisched.core.types import (
    NO_ALLOCATION,
    Allocation,
    ClusterSnapshot,
    JobPhase,
    JobSpec,
    JobView,
    NodeView,
    Pool,
)
from elastisched.engine.loop import Engine
from elastisched.policies.base import Policy, PolicyContext, make_policy
from elastisched.service.progress import ProgressTracker
from elastisched.service.store import TERMINAL, Store

log = logging.getLogger("elastisched.service")
DEFAULT_DURATION_S = 600.0


def _placement(p: Sequence[Sequence[Any]]) -> tuple[tuple[str, int], ...]:
    return tuple((str(n), int(k)) for n, k in p)


def job_spec(row: dict[str, Any], s: dict[str, Any], epoch: float) -> JobSpec:
    """The JobSpec a policy sees. An admin resize pins the job to that size (min = max = num)."""
    pinned = row.get("resize_to")
    n = int(pinned or s["num_gpus"])
    return JobSpec(job_id=row["id"], submit_time=row["submit_time"] - epoch,
                   application=str(s.get("application") or row["name"]),
                   num_gpus=n, batch_size=int(s.get("batch_size") or 1),
                   min_gpus=n if pinned else int(s.get("min_gpus") or n),
                   max_gpus=n if pinned else int(s.get("max_gpus") or n),
                   elastic=bool(s.get("elastic")) and not pinned, gpu_types=tuple(s.get("gpu_types") or ()),
                   work_scale=float(s.get("work_scale") or 1.0),
                   duration=float(s.get("duration") or DEFAULT_DURATION_S))


def _make_policy(name: str) -> Policy:
    """A registered policy; a policy module not yet imported by `elastisched.policies` is imported by name."""
    try:
        return make_policy(name)
    except UnknownPolicyError:
        if not name.isidentifier():
            raise
        try:
            importlib.import_module(f"elastisched.policies.{name}")
        except ImportError:
            raise UnknownPolicyError(f"unknown policy {name!r}") from None
        return make_policy(name)


class Service:
    """Engine + store + backend. `start()` recovers from the store and runs the loop in a thread."""

    def __init__(self, store: Store, nodes: tuple[NodeView, ...], backend: Backend, policy: str = "fifo",
                 *, tick_s: float = 0.5, seed: int = 0, profiles_dir: str | None = None) -> None:
        self.store = store
        self.base_nodes = nodes
        self.backend = backend
        self.policy_name = policy
        self.policy = _make_policy(policy)
        self.engine = Engine(self.policy, PolicyContext(perf=None, rng=np.random.default_rng(seed), seed=seed))
        self.tick_s = tick_s
        epoch = store.get_meta("epoch")
        if epoch is None:
            epoch = time.time()
            store.set_meta("epoch", epoch)
        self.epoch = float(epoch)
        self.clock = WallClock(offset=time.time() - self.epoch)
        state = store.get_meta(f"policy_state:{policy}")
        if state:
            try:
                self.policy.load_state_dict(state)
            except Exception as e:  # a policy may change its state format between versions
                log.warning("policy state not restored: %s", e)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._views: dict[str, tuple[tuple[Any, ...], JobView]] = {}  # last view per job and what it was built from
        self._attained: dict[str, list[float]] = {}  # [GPU-seconds, run seconds, since (clock), GPUs held since]
        self._specs: dict[str, tuple[int | None, JobSpec]] = {}  # immutable but for an admin size (resize_to)
        self.min_round_gap_s = min(0.25, tick_s)  # a burst of submissions costs one round, not one each
        self._reasons: dict[str, str | None] = {}
        self._requests: list[dict[str, Any]] = []
        self._perf: Any = None
        self.profiles_dir = profiles_dir
        self.progress = ProgressTracker()  # engine-owned progress of jobs with a profiled application
        self._nodes: tuple[tuple[tuple[str, str, int], ...], tuple[NodeView, ...]] | None = None
        self._apps: set[str] | None = None
        self._dirty = True
        self._last_round = 0.0
        self.rounds = 0
        self.round_latency_s = 0.0  # policy + engine time of the last round
        self.last_error: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._handle(self.backend.recover())
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
                time.sleep(max(0.0, self.min_round_gap_s - (time.monotonic() - self._last_round)))

    # ------------------------------------------------------------------ one step
    def nodes(self) -> tuple[NodeView, ...]:
        """Training nodes plus servers on loan; the same tuple while loans do not change (the engine's
        placer and capacity caches are keyed by the tuple's identity)."""
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
        due = interval is not None and time.monotonic() - self._last_round >= interval
        gap_ok = time.monotonic() - self._last_round >= self.min_round_gap_s
        if (self._dirty and gap_ok) or due or pending_reclaims:
            self._dirty = False
            self._last_round = time.monotonic()
            self._round(pending_reclaims)

    def snapshot(self, nodes: tuple[NodeView, ...], reclaim_demand: int = 0) -> ClusterSnapshot:
        jobs: dict[str, JobView] = {}
        rows = self.store.active_light()
        missing = [r["id"] for r in rows if self._specs.get(r["id"], (0,))[0] != r["resize_to"]]
        if missing:
            raw = self.store.specs(missing)
            for r in rows:
                if r["id"] in raw:
                    self._specs[r["id"]] = (r["resize_to"], job_spec(r, raw[r["id"]], self.epoch))
        now = self.clock.now()
        for row in rows:
            if row["cancel_requested"] or row["held"]:
                continue
            jid = row["id"]
            place = _placement(row["placement"]) if row["placement"] else ()
            spec = self._specs[jid][1]
            key = (place, row["batch_size"], row["start_time"], row["restarts"], spec)
            cached = self._views.get(jid)
            if cached is not None and cached[0] == key:  # unchanged job: same view (a long queue costs ~nothing)
                jobs[jid] = cached[1]
                continue
            # Attained service: GPU-seconds held so far, folded in at each change of placement; the view is
            # stamped at the change (`updated_at`), so `JobView.attained(now)` adds the time since.
            acc = self._attained.setdefault(jid, [0.0, 0.0, now, 0])
            dt = max(0.0, now - acc[2])
            acc[0] += dt * acc[3]
            acc[1] += dt if acc[3] else 0.0
            acc[2], acc[3] = now, sum(k for _, k in place)
            alloc = Allocation(placement=place, batch_size=row["batch_size"]) if place else NO_ALLOCATION
            view = JobView(
                spec=spec, phase=JobPhase.RUNNING if place else JobPhase.PENDING, allocation=alloc, updated_at=now,
                attained_service=acc[0], run_time=acc[1],
                start_time=None if row["start_time"] is None else row["start_time"] - self.epoch,
                num_restarts=int(row["restarts"]), batch_size=int(row["batch_size"] or 0))
            self._views[jid] = (key, view)
            jobs[jid] = view
        return ClusterSnapshot(now, nodes, jobs, reclaim_demand)

    def with_progress(self, snap: ClusterSnapshot, perf: Any) -> ClusterSnapshot:
        return self.progress.with_progress(snap, perf)

    def _round(self, reclaims: list[dict[str, Any]]) -> None:
        nodes = self.nodes()
        loaned = [n for n in nodes if n.pool is Pool.LOANABLE]
        demand = min(sum(int(r["count"]) for r in reclaims), len(loaned))
        snap = self.snapshot(nodes, demand)
        self.engine.ctx.perf = self._perf_for(snap)
        if self.engine.ctx.perf is not None:
            snap = self.with_progress(snap, self.engine.ctx.perf)
        res = self.engine.round(snap)
        self.rounds += 1
        self.round_latency_s = res.latency_s
        actions = list(res.actions)
        returned: list[str] = []
        if reclaims:
            returned = self._choose_reclaim(snap, res.decision.reclaim, loaned, demand)
            actions = self._vacate(snap, actions, set(returned))
        reasons = {jid: res.decision.reasons.get(jid, "Priority") for jid, j in snap.jobs.items()
                   if not j.is_running}
        with self.store.tx() as c:  # persist the decision and its actions before acting on them
            if actions or returned:
                self.store.add_event(None, "decision", {
                    "time": snap.now, "policy": self.policy_name, "latency_s": res.latency_s,
                    "allocations": {j: [list(p) for p in a.placement] for j, a in res.allocations.items()},
                    "reasons": dict(res.decision.reasons), "reclaim": returned}, conn=c)
            for a in actions:
                self.store.add_event(a.job_id, "action", {
                    "kind": a.kind.value, "placement": [list(p) for p in a.allocation.placement],
                    "previous": [list(p) for p in a.previous.placement], "batch_size": a.allocation.batch_size},
                    conn=c)
            changed = {jid: why for jid, why in reasons.items() if self._reasons.get(jid) != why}
            if changed:  # one executemany: a burst of submissions queues hundreds at once
                self.store.set_reasons(changed, conn=c)
                self._reasons.update(changed)
        self.backend.apply(actions)
        for a in actions:
            if a.kind is ActionKind.SUSPEND:
                self.store.update_job(a.job_id, state="SUSPENDED", placement=[], reason="Preempted")
        if reclaims:
            with self.store.tx() as c:
                now = time.time()
                for n in returned:
                    self.store.update_loan(n, conn=c, state="RETURNED", returned_at=now)
                for r in reclaims:
                    self.store.update_reclaim(int(r["id"]), conn=c, state="DONE", nodes=returned, done_at=now)
                self.store.add_event(None, "nodes_returned", {"nodes": returned}, conn=c)
            self._dirty = True
        if actions:
            self._save_policy_state()

    @staticmethod
    def _choose_reclaim(snap: ClusterSnapshot, chosen: Sequence[str], loaned: Sequence[NodeView],
                        demand: int) -> list[str]:
        """The policy's choice (Lyra), completed for policies that do not choose: least-used servers first."""
        ids = {n.node_id for n in loaned}
        out = [n for n in chosen if n in ids][:demand]
        used: dict[str, int] = {}
        for j in snap.running_jobs().values():
            for n, k in j.allocation.placement:
                used[n] = used.get(n, 0) + k
        for n in sorted(loaned, key=lambda v: (used.get(v.node_id, 0), v.node_id)):
            if len(out) >= demand:
                break
            if n.node_id not in out:
                out.append(n.node_id)
        return out

    @staticmethod
    def _vacate(snap: ClusterSnapshot, actions: list[Action], returned: set[str]) -> list[Action]:
        """No job may keep or get GPUs on a returned server: a policy that scaled the job in elsewhere
        keeps its resize; otherwise the job is suspended (checkpointed preemption) and queues again."""
        out: list[Action] = []
        touched: set[str] = set()
        for a in actions:
            touched.add(a.job_id)
            if not set(a.allocation.nodes) & returned:
                out.append(a)
            elif a.previous.placement:
                out.append(Action(ActionKind.SUSPEND, a.job_id, NO_ALLOCATION, a.previous))
        for jid, j in snap.running_jobs().items():
            if jid not in touched and set(j.allocation.nodes) & returned:
                out.append(Action(ActionKind.SUSPEND, jid, NO_ALLOCATION, j.allocation))
        return out

    # ------------------------------------------------------------------ requests
    def _cancels(self) -> None:
        for row in self._requests:
            if row["cancel_requested"]:
                if row["placement"]:
                    self.backend.cancel(row["id"])
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
            place = _placement(row["placement"])
            if place:
                prev = Allocation(placement=place, batch_size=row["batch_size"])
                self.store.add_event(row["id"], "action", {"kind": "suspend", "placement": [],
                                                           "previous": [list(p) for p in place], "user": True})
                self.backend.apply([Action(ActionKind.SUSPEND, row["id"], NO_ALLOCATION, prev)])
            self.store.update_job(row["id"], state="SUSPENDED", placement=[], reason="Held")
            self._reasons.pop(row["id"], None)
            # Fold attained service up to now and hold it at 0 GPUs: the held time is not service.
            acc = self._attained.get(row["id"])
            if acc is not None:
                now = self.clock.now()
                acc[0] += max(0.0, now - acc[2]) * acc[3]
                acc[1] += max(0.0, now - acc[2]) if acc[3] else 0.0
                acc[2], acc[3] = now, 0
            self._views.pop(row["id"], None)
            self._dirty = True

    def _resizes(self) -> None:
        """Admin resizes (`POST /v1/jobs/{id}:resize`) of running jobs: best-fit on free slots of the job's
        GPU type, its own nodes first; the job then stays pinned at that size."""
        rows = [r for r in self._requests if r["resize_to"] and r["placement"] and not r["cancel_requested"]
                and not r["held"]]
        if not rows:
            return
        nodes = self.nodes()
        free = {n.node_id: n.num_gpus for n in nodes}
        for r in self.store.active_jobs():
            for n, k in r["placement"]:
                if n in free:
                    free[n] -= int(k)
        for row in rows:
            cur = _placement(row["placement"])
            want = int(row["resize_to"])
            if sum(k for _, k in cur) == want:
                continue
            gtype = {n.node_id: n.gpu_type for n in nodes}.get(cur[0][0])
            avail = {n: free[n] + dict(cur).get(n, 0) for n in free if gtype is None or
                     next(v for v in nodes if v.node_id == n).gpu_type == gtype}
            order = sorted(avail, key=lambda n: (n not in dict(cur), -avail[n], n))
            place: list[tuple[str, int]] = []
            left = want
            for n in order:
                if left <= 0:
                    break
                k = min(avail[n], left)
                if k > 0:
                    place.append((n, k))
                    left -= k
            if left > 0:
                self.store.update_job(row["id"], reason=f"ResizePending: {want} GPUs do not fit now")
                continue
            new = Allocation(placement=tuple(place), batch_size=row["batch_size"])
            prev = Allocation(placement=cur, batch_size=row["batch_size"])
            self.store.add_event(row["id"], "action", {"kind": "resize", "placement": [list(p) for p in place],
                                                       "previous": [list(p) for p in cur], "admin": True})
            self.backend.apply([Action(ActionKind.RESIZE, row["id"], new, prev)])
            for n, k in cur:
                free[n] += k
            for n, k in place:
                free[n] -= k
            self._dirty = True

    # ------------------------------------------------------------------ events
    def _handle(self, events: Sequence[BackendEvent]) -> None:
        for e in events:
            row = self.store.get_job(e.job_id)
            if row is None or row["state"] in TERMINAL:
                continue
            if isinstance(e, JobHints):
                self.progress.hinted(e, row, self._perf)
                continue
            if isinstance(e, JobStarted):
                self.progress.generation_started(e.job_id, e.time, e.adopted)
                self.store.update_job(e.job_id, state="RUNNING", reason=None,
                                      start_time=row["start_time"] or time.time())
            elif isinstance(e, JobRetried):
                self.store.add_event(e.job_id, "retried", {"generation": e.generation, "reason": e.reason})
            elif isinstance(e, JobFinished):
                with self.store.tx() as c:
                    self.store.update_job(e.job_id, conn=c, state="SUCCEEDED", placement=[], end_time=time.time())
                    self.store.add_event(e.job_id, "finished", {}, conn=c)
                self._forget(e.job_id)
            elif isinstance(e, JobFailed):
                with self.store.tx() as c:
                    self.store.update_job(e.job_id, conn=c, state="FAILED", placement=[], end_time=time.time(),
                                          message=e.reason)
                    self.store.add_event(e.job_id, "failed", {"reason": e.reason}, conn=c)
                self._forget(e.job_id)

    def _perf_for(self, snap: ClusterSnapshot) -> Any:
        """The measured models when every job names a profiled application (`application` at submit), else
        None: policies then use their model-free fallback (Lyra: linear in `duration_s`)."""
        apps = {j.spec.application for j in snap.jobs.values()}
        if not apps or not apps <= self.known_apps():
            return None
        return self.models()

    def models(self) -> Any:
        """The bundled profiles plus `--profiles` (built on first use: a fit per application)."""
        if self._perf is None:
            from elastisched.service.profiles import load_models

            self._perf = load_models(self.profiles_dir)
        return self._perf

    def known_apps(self) -> set[str]:
        if self._apps is None:
            from elastisched.service.profiles import app_names

            self._apps = app_names(self.profiles_dir)
        return self._apps

    def _forget(self, job_id: str) -> None:
        self.progress.forget(job_id)
        for d in (self._views, self._attained):
            d.pop(job_id, None)  # type: ignore[attr-defined]
        self._specs.pop(job_id, None)
        self._reasons.pop(job_id, None)

    def _save_policy_state(self) -> None:
        try:
            state = self.policy.state_dict()
            if state:
                self.store.set_meta(f"policy_state:{self.policy_name}", state)
        except Exception as e:  # non-JSON state: the policy restarts cold, which is allowed
            log.debug("policy state not saved: %s", e)
