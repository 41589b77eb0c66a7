"""Read-only endpoints the dashboard (and any client) uses beyond the job API: the pending-reason sentences,
what the scheduler has been doing, utilisation history and a job's log tail (computed in `service/dashapi.py`).
Nothing here writes."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy import func, select

from elastisched.service.dashapi import tail_files, utilisation
from elastisched.service.reasons import EXPLAIN
from elastisched.service.routes.context import GUARD, Ctx, JobId, User, find
from elastisched.service.tables import events

router = APIRouter()


@router.get("/v1/reasons", dependencies=GUARD)
def reasons() -> dict[str, str]:
    """Every pending reason code with one sentence saying what it means for the job."""
    return {str(k): v for k, v in EXPLAIN.items()}


@router.get("/v1/scheduler", dependencies=GUARD)
def scheduler(ctx: Ctx) -> dict[str, Any]:
    """What the scheduler has been doing: when it last ran, how many decisions changed the plan."""
    service = ctx.service
    with ctx.store.tx() as c:
        n, last = c.execute(select(func.count(), func.max(events.c.time)).where(events.c.kind == "decision")).one()
    ran = getattr(service, "_last_round", 0.0)
    return {"policy": service.policy_name, "ok": service.last_error is None, "tick_s": service.tick_s,
            "interval_s": getattr(service.policy, "interval", None),
            "rounds": service.rounds, "round_latency_s": service.round_latency_s,
            "last_round_ago_s": service.clock.now() - ran if ran > -float("inf") else None,
            "decisions": int(n), "last_decision_at": last, "now": time.time(),
            "round_seconds": service.round_times.summary()}


@router.get("/v1/utilisation")
def utilisation_(ctx: Ctx, who: User,
                 window_s: Annotated[float, Query(gt=0, le=30 * 86400, allow_inf_nan=False)] = 3600.0,
                 buckets: Annotated[int, Query(ge=1, le=2000)] = 120) -> dict[str, Any]:
    """Busy vs total GPUs over the last `window_s` seconds (cluster-wide; `mine` for a user who is not an
    admin: its own jobs' busy GPUs)."""
    base = sum(n.num_gpus for n in ctx.service.base_nodes)
    return utilisation(ctx.store, base, now=time.time(), window_s=window_s, buckets=buckets,
                       owner=None if who.admin else who.user)


@router.get("/v1/jobs/{job_id}/log-tail")
def log_tail(job_id: JobId, ctx: Ctx, who: User,
             bytes_: Annotated[int, Query(alias="bytes", ge=1, le=1 << 20)] = 32768) -> dict[str, Any]:
    """The end of each of the job's newest log files (generation, rank), with its state and pending reason."""
    row = find(ctx.store, job_id, who)
    paths = ctx.service.backend.log_paths(row["id"])
    return {"id": row["id"], "state": row["state"], "reason": row["reason"], "files": tail_files(paths, bytes_)}
