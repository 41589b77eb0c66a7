"""Applying what users and admins asked for through the API (the API only records requests; the daemon, the
single writer, applies them at its next step): cancels, user holds (suspend / resume) and admin resizes.

A cancelled job ends in the engine (`Engine.ended`, which calls `policy.on_finish`), as a finished one does.
"""

from __future__ import annotations

import time
from typing import Any

from elastisched.core.events import Action, ActionKind
from elastisched.core.types import NO_ALLOCATION, Allocation, ClusterSnapshot, NodeView, PendingReason
from elastisched.engine.overrides import admin_resize
from elastisched.service import backend_events
from elastisched.service.backend_events import apply_actions, handle
from elastisched.service.submission import placement


class Service(backend_events.Service):
    """What applying requests needs of the daemon (`service.daemon.Service`), beyond applying events."""

    reasons: dict[str, str | None]
    admin_resized: dict[str, int]

    def snapshot(self, nodes: tuple[NodeView, ...], reclaim_demand: int = 0) -> ClusterSnapshot: ...

    def mark_dirty(self) -> None: ...


def apply_requests(svc: Service, rows: list[dict[str, Any]]) -> None:
    """Apply the pending requests of `rows` (the store's `requests()`): cancels first, then holds, resizes."""
    _cancels(svc, rows)
    _holds(svc, rows)
    _resizes(svc, rows)


def _cancels(svc: Service, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        if row["cancel_requested"]:
            if row["placement"]:
                svc.launches.stopping(row["id"])
                svc.backend.cancel(row["id"])
                handle(svc, svc.backend.poll())
            svc.store.update_job(row["id"], state="CANCELLED", placement=[], end_time=time.time(), reason=None)
            svc.store.add_event(row["id"], "cancelled", {"by": "user request", "was_running": bool(row["placement"])})
            svc.forget(row["id"])


def _holds(svc: Service, rows: list[dict[str, Any]]) -> None:
    """User suspensions (`POST /v1/jobs/{id}:suspend`): a running job is checkpointed and stopped; a held
    job stays out of every snapshot (no policy sees it) until `:resume` queues it again."""
    stop = [r for r in rows if r["held"] and not r["cancel_requested"]
            and (r["placement"] or r["state"] != "SUSPENDED")]
    for row in stop:
        place = placement(row["placement"])
        if place:
            prev = Allocation(placement=place, batch_size=row["batch_size"])
            svc.store.add_event(row["id"], "action", {"kind": "suspend", "placement": [],
                                                      "previous": [list(p) for p in place], "user": True})
            svc.launches.stopping(row["id"])
            apply_actions(svc, [Action(ActionKind.SUSPEND, row["id"], NO_ALLOCATION, prev)])
        svc.store.update_job(row["id"], state="SUSPENDED", placement=[], reason=PendingReason.HELD.value)
        svc.reasons.pop(row["id"], None)
        svc.jobs.stop(row["id"], svc.clock.now())  # the held time is not service
        svc.mark_dirty()


def _resizes(svc: Service, rows: list[dict[str, Any]]) -> None:
    """Admin resizes (`POST /v1/jobs/{id}:resize`) of running jobs, through the engine (`engine.overrides.
    admin_resize`: its placer on the GPU type the job runs on, then the invariant check). The job's spec is
    pinned at that size from then on; the move is made once, as in the simulator (an elastic policy may move
    the job again: the invariant check lets it). One that does not fit now waits with reason ResizePending."""
    todo = [r for r in rows if r["resize_to"] and r["placement"] and not r["cancel_requested"] and not r["held"]
            and svc.admin_resized.get(r["id"]) != int(r["resize_to"])
            and sum(int(k) for _, k in r["placement"]) != int(r["resize_to"])]
    if not todo:
        return
    nodes = svc.nodes()
    for row in todo:
        snap = svc.snapshot(nodes)
        act = admin_resize(snap, row["id"], int(row["resize_to"]))
        act = svc.launches.plan(act) if act is not None else None
        if act is None:
            svc.store.update_job(row["id"], reason=PendingReason.RESIZE_PENDING.value,
                                 message=f"resize to {row['resize_to']} GPUs does not fit now")
            continue
        svc.store.add_event(row["id"], "action", {
            "kind": "resize", "placement": [list(p) for p in act.allocation.placement],
            "previous": [list(p) for p in act.previous.placement], "admin": True})
        apply_actions(svc, [act], snap.now)
        svc.admin_resized[row["id"]] = int(row["resize_to"])
        svc.mark_dirty()

