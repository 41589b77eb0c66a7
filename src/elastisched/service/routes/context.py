"""What every route shares: the `ApiContext` the app was built with (reached through a dependency, never a
closure), who sent the request (`principal`, `admin`), the job lookups that hide another user's jobs, and the
one JSON shape of a job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import Depends, HTTPException, Request, status
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from elastisched.service.api_models import JOB_ID
from elastisched.service.auth import TOKEN_RE, Authenticator, Principal
from elastisched.service.daemon import Service
from elastisched.service.job_listing import Listing
from elastisched.service.logstream import Follows
from elastisched.service.store import TERMINAL, AmbiguousId, Store

API_THREADS = 2  # `serve --api-threads`: measured best at 20 clients on 2 cores (docs/service.md)
API_THREADS_MAX = 64  # the most it takes
T = TypeVar("T")
JobId = Annotated[str, PathParam(pattern=JOB_ID, description="job id or a unique prefix of it")]


@dataclass(frozen=True, slots=True)
class ApiContext:
    """The objects the routes act through, set once on `app.state.api` by `create_app`."""

    service: Service
    store: Store
    scripts_dir: Path  # resolved: a job's script must lie inside it
    follows: Follows
    authn: Authenticator
    listing: Listing  # `GET /v1/jobs`, with ended jobs' JSON kept
    max_queued: int = 1000  # queued (pending or suspended) jobs a user who is not an admin may have
    isolation: str = "none"  # users: jobs run as each user's account; none: as the service
    threads: int = API_THREADS  # worker threads of the polled reads, and of submissions (`in_thread`)
    reads: anyio.CapacityLimiter = field(init=False)
    writes: anyio.CapacityLimiter = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reads", anyio.CapacityLimiter(self.threads))
        object.__setattr__(self, "writes", anyio.CapacityLimiter(self.threads))


async def in_thread(limiter: anyio.CapacityLimiter, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread under `limiter`. The hot routes (list, describe, submit) run under two
    small pools of their own rather than the 40 threads of the default one: each thread beyond the few that
    can use the one interpreter lock only adds hand-offs of it (a request then waits behind every other one's
    slices, and a SQLite statement, which lets go of the lock, waits to get it back), and reads never wait
    behind submissions queued for the writers' lock."""
    return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)


async def api_context(request: Request) -> ApiContext:
    """The app's context. Async: a dependency that is a plain function would cost a thread-pool hop."""
    ctx: ApiContext = request.app.state.api
    return ctx


Ctx = Annotated[ApiContext, Depends(api_context)]


async def principal(request: Request) -> Principal:
    """Who sent the request (401 if nobody we know). Async: a known token costs no thread-pool hop."""
    authn: Authenticator = request.app.state.authn
    got = request.headers.get("authorization", "")
    who = None
    if got.startswith("Bearer "):
        tok = got[7:].strip()
        who = authn.fast(tok)
        if who is None and TOKEN_RE.match(tok):
            who = await anyio.to_thread.run_sync(authn.slow, tok)
    if who is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "Authorization: missing, wrong or revoked bearer token",
                            headers={"WWW-Authenticate": "Bearer"})
    return who


User = Annotated[Principal, Depends(principal)]


async def admin(who: User) -> Principal:
    if not who.admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"Authorization: user {who.user!r} is not an admin")
    return who


GUARD = [Depends(principal)]
ADMIN = [Depends(admin)]


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """Routing misses name what was wrong too (`path`, `method`), like every other 4xx."""
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail
    if exc.status_code == 404 and detail == "Not Found":
        detail = "path: no such endpoint"
    elif exc.status_code == 400 and detail == "There was an error parsing the body":
        detail = "body: not a JSON document (UTF-8, nested at most as deep as the parser allows)"
    elif exc.status_code == 405:
        detail = f"method: {request.method} is not allowed on this path"
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)


def unprocessable(msg: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, msg)


def find(store: Store, job_id: str, who: Principal) -> dict[str, Any]:
    """The job, if `who` may see it; another user's job is 404 as if it did not exist."""
    try:
        row = store.get_job(job_id, owner=None if who.admin else who.user)
    except AmbiguousId as e:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job_id: {e}") from None
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job_id: no job {job_id!r}")
    return row


def live(store: Store, job_id: str, who: Principal) -> dict[str, Any]:
    """The job as `find` gives it, 409 if it has already ended."""
    row = find(store, job_id, who)
    if row["state"] in TERMINAL:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job_id: job {row['id']} is already {row['state']}")
    return row


def job_json(row: dict[str, Any]) -> dict[str, Any]:
    spec = row["spec"]
    return {
        "id": row["id"], "name": row["name"], "state": row["state"], "reason": row["reason"],
        "gpus": sum(int(k) for _, k in row["placement"]), "placement": row["placement"],
        "min_gpus": spec.get("min_gpus"), "max_gpus": spec.get("max_gpus"), "requested_gpus": spec["num_gpus"],
        "resize_to": row["resize_to"], "gpu_type": (spec.get("gpu_types") or [None])[0],
        "batch_size": row["batch_size"] or spec.get("batch_size"), "generation": row["generation"],
        "restarts": row["restarts"], "retries": row["retries"], "submit_time": row["submit_time"],
        "start_time": row["start_time"], "end_time": row["end_time"], "script": row["script"],
        "args": row["args"], "message": row["message"], "held": bool(row.get("held")), "owner": row.get("owner"),
        "env": spec.get("env") or {},
    }


def used_gpus(store: Store) -> dict[str, int]:
    """GPUs held per node by the active jobs' placements."""
    used: dict[str, int] = {}
    for r in store.active_light():
        for n, k in r["placement"]:
            used[n] = used.get(n, 0) + int(k)
    return used
