"""Jobs: submit, list, describe, cancel, resize, suspend, resume and logs. A handler validates, records the
request in the store (a job row, a cancel / hold / size request) and wakes the engine loop, which acts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from elastisched.service.api_models import ResizeRequest, SubmitRequest
from elastisched.service.daemon import Service
from elastisched.service.routes.context import Ctx, JobId, User, find, job_json, live, unprocessable
from elastisched.service.routes.meta import STATES
from elastisched.service.spec_defaults import stored_spec
from elastisched.service.store import TERMINAL, AmbiguousId
from elastisched.service.tables import LEGACY_STATES

MAX_LOG_BYTES = 16 << 20  # a plain (not followed) log read returns at most the last 16 MiB

router = APIRouter()


@router.post("/v1/jobs", status_code=201)
def submit(req: SubmitRequest, who: User, ctx: Ctx) -> dict[str, Any]:
    service, allowed = ctx.service, ctx.scripts_dir
    path = Path(req.script)
    path = (path if path.is_absolute() else allowed / path).resolve()
    if not path.is_relative_to(allowed):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"script: {req.script!r} is outside the allowed "
                                                       f"directory {str(allowed)!r}")
    if not path.is_file():
        raise unprocessable(f"script: {str(path)!r} is not a file")
    if req.application is not None and req.application not in service.known_apps():
        raise unprocessable(f"application: {req.application!r} has no profile; known: "
                            f"{', '.join(sorted(service.known_apps()))}")
    if req.application is None and service.policy.needs_perf_models:
        raise unprocessable(f"application: policy {service.policy_name!r} needs a profiled application")
    gpu_type = req.gpu_type.lower() if req.gpu_type else None
    spec = stored_spec(gpus=req.gpus, min_gpus=req.min_gpus, max_gpus=req.max_gpus, batch_size=req.batch_size,
                       adaptive=req.adaptive, gpu_type=gpu_type, duration=req.duration_s,
                       application=req.application, work_scale=req.work_scale)
    if not spec["min_gpus"] <= req.gpus <= spec["max_gpus"]:
        raise unprocessable(f"gpus: {req.gpus} is outside min_gpus..max_gpus = {spec['min_gpus']}..{spec['max_gpus']}")
    check_fits(service, gpu_type, req.gpus)
    row = ctx.store.create_job(name=req.name, script=str(path), args=req.args, spec=spec, owner=who.user)
    service.wake()
    return job_json(row)


# The two reads clients poll answer with a `JSONResponse` built here: FastAPI would otherwise validate and
# re-serialise every row of the answer against the return type (a list of free-form dicts) first.
@router.get("/v1/jobs", response_class=JSONResponse)
def list_jobs(who: User, ctx: Ctx, state: Annotated[str | None, Query(max_length=200)] = None,
              limit: Annotated[int | None, Query(ge=1, le=1_000_000)] = None) -> Response:
    """Your jobs (an admin: all) in submission order (`service/job_listing.py`)."""
    states = [s.strip().upper() for s in state.split(",")] if state else None
    for s in states or ():
        if s not in STATES and s not in LEGACY_STATES:  # older names (STARTING, RESIZING) still filter
            raise unprocessable(f"state: {s[:40]!r} is not a job state; one of {', '.join(STATES)}")
    return Response(ctx.listing.body(states, limit, owner=None if who.admin else who.user),
                    media_type="application/json")


@router.get("/v1/jobs/{job_id}", response_class=JSONResponse)
def describe(job_id: JobId, who: User, ctx: Ctx) -> JSONResponse:
    """The job with its generations and events (one read)."""
    try:
        found = ctx.store.job_detail(job_id, owner=None if who.admin else who.user)
    except AmbiguousId as e:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job_id: {e}") from None
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job_id: no job {job_id!r}")
    row, gens, evs = found
    return JSONResponse(job_json(row) | {"generations": gens, "events": evs})


@router.delete("/v1/jobs/{job_id}", status_code=202)
def cancel(job_id: JobId, who: User, ctx: Ctx) -> dict[str, Any]:
    row = live(ctx.store, job_id, who)
    ctx.store.request_cancel(row["id"])
    ctx.service.wake()
    return job_json(find(ctx.store, row["id"], who))


@router.post("/v1/jobs/{job_id}:resize", status_code=202)
def resize(job_id: JobId, req: ResizeRequest, who: User, ctx: Ctx) -> dict[str, Any]:
    row = live(ctx.store, job_id, who)
    cap = sum(n.num_gpus for n in ctx.service.nodes())
    if req.gpus > cap:
        raise unprocessable(f"gpus: {req.gpus} exceeds the cluster ({cap})")
    ctx.store.request_resize(row["id"], req.gpus)
    ctx.service.wake()
    return job_json(find(ctx.store, row["id"], who))


@router.post("/v1/jobs/{job_id}:suspend", status_code=202)
def suspend(job_id: JobId, who: User, ctx: Ctx) -> dict[str, Any]:
    row = live(ctx.store, job_id, who)
    ctx.store.request_hold(row["id"], True)
    ctx.service.wake()
    return job_json(find(ctx.store, row["id"], who))


@router.post("/v1/jobs/{job_id}:resume", status_code=202)
def resume(job_id: JobId, who: User, ctx: Ctx) -> dict[str, Any]:
    row = find(ctx.store, job_id, who)
    if not row["held"]:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job_id: job {row['id']} is not suspended")
    ctx.store.request_hold(row["id"], False)
    ctx.service.wake()
    return job_json(find(ctx.store, row["id"], who))


@router.get("/v1/jobs/{job_id}/logs", response_model=None)
async def logs(request: Request, job_id: JobId, who: User, ctx: Ctx, follow: bool = False,
               timeout_s: Annotated[float, Query(gt=0, le=86400, allow_inf_nan=False)] = 3600.0,
               ) -> PlainTextResponse | StreamingResponse:
    store, backend = ctx.store, ctx.service.backend
    row = await anyio.to_thread.run_sync(find, store, job_id, who)
    jid = row["id"]
    if not follow:
        return PlainTextResponse(await anyio.to_thread.run_sync(read_logs, backend.log_paths(jid)))
    ctx.follows.admit(who.user, who.admin)
    return ctx.follows.response(request, who.user, lambda: backend.log_paths(jid),
                                lambda: (store.get_job(jid) or {}).get("state") in TERMINAL, timeout_s)


def check_fits(service: Service, gpu_type: str | None, gpus: int) -> None:
    """422 unless the cluster (training nodes and servers on loan now) has `gpu_type` and `gpus` of it: a job
    that can never be placed would wait forever and, under FIFO, hold up every job behind it."""
    nodes = service.nodes()
    types = sorted({n.gpu_type for n in nodes})
    if gpu_type is not None and gpu_type not in types:
        raise unprocessable(f"gpu_type: {gpu_type!r} is not in the cluster, which has "
                            f"{', '.join(types) or 'no nodes'}")
    cap = sum(n.num_gpus for n in nodes if gpu_type is None or n.gpu_type == gpu_type)
    if gpus > cap:
        of = f" of type {gpu_type}" if gpu_type else ""
        raise unprocessable(f"gpus: {gpus} exceeds the {cap} GPUs{of} the cluster has")


def read_logs(paths: list[Path]) -> str:
    """All generations and ranks, the last MAX_LOG_BYTES of them."""
    parts, total = [], 0
    for p in reversed(paths):
        try:
            size = p.stat().st_size
            with open(p, "rb") as f:
                if total + size > MAX_LOG_BYTES:
                    f.seek(size - (MAX_LOG_BYTES - total))
                parts.append(f.read(MAX_LOG_BYTES - total))
        except OSError:
            continue
        total += len(parts[-1])
        if total >= MAX_LOG_BYTES:
            break
    return b"".join(reversed(parts)).decode(errors="replace")
