"""Jobs: submit, list, describe, cancel, resize, suspend, resume and logs. A handler validates, records the
request in the store (a job row, a cancel / hold / size request) and wakes the engine loop, which acts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, HTTPException, Query, Request, Response, status
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from elastisched.service.api_models import ResizeRequest, SubmitRequest
from elastisched.service.auth import Principal
from elastisched.service.daemon import Service
from elastisched.service.intake import KEY_PATTERN, KeyReused, QueueFull, digest, replay, submit_once
from elastisched.service.routes.context import (
    ApiContext,
    Ctx,
    JobId,
    User,
    find,
    in_thread,
    job_json,
    live,
    unprocessable,
)
from elastisched.service.routes.meta import STATES
from elastisched.service.spec_defaults import stored_spec
from elastisched.service.store import TERMINAL, AmbiguousId
from elastisched.service.tables import LEGACY_STATES

MAX_LOG_BYTES = 16 << 20  # a plain (not followed) log read returns at most the last 16 MiB

router = APIRouter()


IdemKey = Annotated[str | None, Header(alias="Idempotency-Key", pattern=KEY_PATTERN,
                                      description="a retry with the same key returns the first request's job")]


@router.post("/v1/jobs", status_code=201)
async def submit(req: SubmitRequest, who: User, ctx: Ctx, response: Response, key: IdemKey = None
                 ) -> dict[str, Any]:
    return await in_thread(ctx.writes, submit_job, req, who, ctx, response, key)


def submit_job(req: SubmitRequest, who: Principal, ctx: ApiContext, response: Response, key: str | None
               ) -> dict[str, Any]:
    service = ctx.service
    request_digest = digest(req.model_dump(mode="json")) if key is not None else ""
    if key is not None:  # a retry answers with the first request's job, whatever changed since
        earlier = _replayed(ctx, who.user, key, request_digest, response)
        if earlier is not None:
            return earlier
    path = script_path(req.script, ctx.scripts_dir)
    if req.application is not None and req.application not in service.known_apps():
        raise unprocessable(f"application: {req.application!r} has no profile; known: "
                            f"{', '.join(sorted(service.known_apps()))}")
    if req.application is None and service.policy.needs_perf_models:
        raise unprocessable(f"application: policy {service.policy_name!r} needs a profiled application")
    gpu_type = req.gpu_type.lower() if req.gpu_type else None
    spec = stored_spec(gpus=req.gpus, min_gpus=req.min_gpus, max_gpus=req.max_gpus, batch_size=req.batch_size,
                       adaptive=req.adaptive, gpu_type=gpu_type, duration=req.duration_s,
                       application=req.application, work_scale=req.work_scale, env=req.env)
    if not spec["min_gpus"] <= req.gpus <= spec["max_gpus"]:
        raise unprocessable(f"gpus: {req.gpus} is outside min_gpus..max_gpus = {spec['min_gpus']}..{spec['max_gpus']}")
    check_fits(service, gpu_type, req.gpus)
    try:
        row, replayed = submit_once(ctx.store, owner=who.user, key=key, request_digest=request_digest,
                                    max_queued=None if who.admin else ctx.max_queued, name=req.name,
                                    script=str(path), args=req.args, spec=spec)
    except KeyReused as e:
        raise _key_reused(e) from None
    except QueueFull as e:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                            f"jobs: user {who.user!r} has {e.queued} jobs queued, the most a user may have "
                            f"(--max-queued-per-user {ctx.max_queued}); wait for some to start, or cancel some",
                            headers={"Retry-After": "30"}) from None
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    else:
        service.wake()
    return job_json(row)


def _replayed(ctx: ApiContext, user: str, key: str, request_digest: str, response: Response
              ) -> dict[str, Any] | None:
    try:
        earlier = replay(ctx.store, user, key, request_digest)
    except KeyReused as e:
        raise _key_reused(e) from None
    if earlier is not None:
        response.headers["Idempotent-Replayed"] = "true"
        return job_json(earlier)
    return None


def _key_reused(e: KeyReused) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, f"Idempotency-Key: already used for job {e.job_id} with a "
                                                   "different request; use a new key for a new job")


def script_path(script: str, allowed: Path) -> Path:
    """The script resolved inside `allowed` (403 outside it), a regular file (422 otherwise, also for a path
    the OS refuses: a name over 255 bytes, a path over PATH_MAX, a loop of links, no permission)."""
    try:
        raw = Path(script)
        path = (raw if raw.is_absolute() else allowed / raw).resolve()
        inside = path.is_relative_to(allowed)
        regular = inside and path.is_file()
    except (OSError, RuntimeError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise unprocessable(f"script: the path cannot be used: {why}") from None
    shown = str(path) if len(str(path)) <= 300 else str(path)[:300] + "..."
    if not inside:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"script: {shown!r} is outside the allowed "
                                                       f"directory {str(allowed)!r} (the service's --scripts-dir: "
                                                       "start `elastisched serve --scripts-dir DIR` with a "
                                                       "folder that holds it)")
    if not regular:
        raise unprocessable(f"script: {shown!r} is not a regular file")
    return path


# The two reads clients poll answer with a `JSONResponse` built here: FastAPI would otherwise validate and
# re-serialise every row of the answer against the return type (a list of free-form dicts) first.
@router.get("/v1/jobs", response_class=JSONResponse)
async def list_jobs(who: User, ctx: Ctx, state: Annotated[str | None, Query(max_length=200)] = None,
                    limit: Annotated[int | None, Query(ge=1, le=1_000_000)] = None) -> Response:
    """Your jobs (an admin: all) in submission order (`service/job_listing.py`)."""
    states = [s.strip().upper() for s in state.split(",")] if state else None
    for s in states or ():
        if s not in STATES and s not in LEGACY_STATES:  # older names (STARTING, RESIZING) still filter
            raise unprocessable(f"state: {s[:40]!r} is not a job state; one of {', '.join(STATES)}")
    body = await in_thread(ctx.reads, ctx.listing.body, states, limit, None if who.admin else who.user)
    return Response(body, media_type="application/json")


@router.get("/v1/jobs/{job_id}", response_class=JSONResponse)
async def describe(job_id: JobId, who: User, ctx: Ctx) -> JSONResponse:
    """The job with its generations and events (one read)."""
    try:
        found = await in_thread(ctx.reads, ctx.store.job_detail, job_id, None if who.admin else who.user)
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
