"""Applying what the backend does and reports to the service's state: actions handed to the backend and
recorded in the engine's bookkeeping, then the events it reports (workers started, generations ended, jobs
finished or failed, nodes joined or lost) written to the store by the daemon, the single writer.

A job that ends here (finished, or failed with no retry left) ends in the engine too (`Engine.ended`, which
calls `policy.on_finish`), once: an end is applied only to a job the store does not show ended already.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

from elastisched.backends.base import Backend, BackendEvent, GenerationEnded, JobHints, JobStarted, NodesChanged
from elastisched.core.clock import Clock
from elastisched.core.events import Action, JobFailed, JobFinished
from elastisched.core.nodes import node_set
from elastisched.core.types import JobPhase, NodeView
from elastisched.service.launches import Launches
from elastisched.service.live_jobs import LiveJobs
from elastisched.service.store import TERMINAL, Store

log = logging.getLogger("elastisched.service")


class Service(Protocol):
    """What applying backend events needs of the daemon (`service.daemon.Service`; a protocol, so that this
    module does not import the daemon that imports it)."""

    store: Store
    backend: Backend
    launches: Launches
    jobs: LiveJobs
    epoch: float
    last_error: str | None

    @property
    def clock(self) -> Clock: ...

    def nodes(self) -> tuple[NodeView, ...]: ...

    def nodes_changed(self, nodes: tuple[NodeView, ...]) -> None: ...

    def forget(self, job_id: str) -> None: ...


def apply_actions(svc: Service, actions: Sequence[Action], now: float | None = None) -> None:
    """Hand actions to the backend, apply them to the engine's bookkeeping (as the simulator does when it
    applies them), then record at once what the backend reports (PIDs, generations stopped)."""
    svc.backend.apply(actions)
    now = svc.clock.now() if now is None else now
    types = node_set(svc.nodes()).gpu_type
    for a in actions:
        svc.jobs.applied(a, now, types)
    handle(svc, svc.backend.poll())


def handle(svc: Service, events: Sequence[BackendEvent]) -> None:
    """Record what the backend reports. A run of facts that start nothing (workers started, hints) is written
    in one transaction: a burst of launches costs one commit, not one per job. An end may relaunch (its plan
    must be committed before the backend acts), so each end is handled on its own."""
    i = 0
    while i < len(events):
        j = i
        while j < len(events) and isinstance(events[j], JobStarted | JobHints):
            j += 1
        if j == i:
            _guarded(svc, events[i])
            i += 1
            continue
        with svc.store.tx():
            for e in events[i:j]:
                _guarded(svc, e)
        i = j


def _guarded(svc: Service, e: BackendEvent) -> None:
    try:
        _event(svc, e)
    except Exception as exc:  # one job's bad event must not stop the others (nor startup)
        svc.last_error = f"event {type(e).__name__} of {e.job_id}: {type(exc).__name__}: {exc}"
        log.exception("handling %s failed", e)


def _event(svc: Service, e: BackendEvent) -> None:
    if isinstance(e, NodesChanged):  # a Ray node joined or left: new inventory; jobs on a lost one requeue
        svc.nodes_changed(e.nodes)
        svc.store.add_event(None, "nodes_changed", {"nodes": [n.node_id for n in e.nodes], "lost": list(e.lost)})
        apply_actions(svc, svc.launches.nodes_lost(set(e.lost)))
        return
    row = svc.store.active_row(e.job_id) or svc.store.get_job(e.job_id)  # an active job's, without a query
    if isinstance(e, JobStarted):
        svc.launches.started(e)
    elif isinstance(e, GenerationEnded) and row is not None:
        out = svc.launches.ended(e, row)
        if out.note:
            svc.store.add_event(e.job_id, out.note, {"generation": e.generation, "reason": out.message})
        if out.relaunch is not None:
            apply_actions(svc, [out.relaunch])
        if out.job_state is not None and row["state"] not in TERMINAL:
            end_job(svc, e.job_id, out.job_state, out.message)
        return
    if row is None or row["state"] in TERMINAL:
        return
    if isinstance(e, JobHints):
        svc.jobs.hinted(e, e.time - svc.epoch, row)
    elif isinstance(e, JobStarted):
        svc.jobs.generation_started(e.job_id, min(svc.clock.now(), e.time - svc.epoch), e.adopted)
        svc.store.update_job(e.job_id, state=JobPhase.RUNNING.value, reason=None,
                             start_time=row["start_time"] or time.time())
    elif isinstance(e, JobFinished):
        end_job(svc, e.job_id, JobPhase.SUCCEEDED.value, None)
    elif isinstance(e, JobFailed):
        end_job(svc, e.job_id, JobPhase.FAILED.value, e.reason)


def end_job(svc: Service, job_id: str, state: str, message: str | None) -> None:
    """Record the job's end (succeeded or failed for good) and end it in the engine."""
    with svc.store.tx() as c:
        svc.store.update_job(job_id, conn=c, state=state, placement=[], end_time=time.time(),
                             **({"message": message} if message else {}))
        svc.store.add_event(job_id, "finished" if state == JobPhase.SUCCEEDED else "failed",
                            {"reason": message} if message else {}, conn=c)
    svc.forget(job_id)
