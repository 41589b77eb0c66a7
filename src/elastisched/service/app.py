"""REST API (ecosystem.md §B.4): jobs, logs, nodes, loans and reclaims. Every path but /healthz and the dashboard
page (`/`, which holds no data and calls the API with the token the user gives it) needs a bearer token.

Handlers only validate, write the request to the store and wake the engine loop; the loop acts. Who may do what
(service/auth.py): a user sees and acts on its own jobs (another user's job is a 404, as if absent); an admin
sees and acts on all of them and alone reaches loans and reclaims. Input is bounded field by field
(service/api_models.py), so a bad request is a 4xx naming the field, never a 500. A job's script must resolve
inside the allowed directory: the service runs it as its own user. The OpenAPI schema is served to
authenticated clients at /v1/openapi.json; /docs and /redoc are off.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from elastisched.service.api_models import (
    JOB_ID,
    BodyTooLarge,
    LoanRequest,
    ReclaimRequest,
    ResizeRequest,
    SubmitRequest,
    body_too_large,
    guard,
    validation_error,
)
from elastisched.service.auth import TOKEN_RE, Authenticator, Principal
from elastisched.service.daemon import Service
from elastisched.service.dashapi import add_routes
from elastisched.service.logstream import Follows
from elastisched.service.store import ACTIVE, TERMINAL, AmbiguousId
from elastisched.service.tables import LEGACY_STATES

DASHBOARD = (resources.files("elastisched.service") / "dashboard.html").read_text(encoding="utf-8")
STATES = (*ACTIVE, *TERMINAL)
MAX_LOG_BYTES = 16 << 20  # a plain (not followed) log read returns at most the last 16 MiB
JobId = Annotated[str, PathParam(pattern=JOB_ID, description="job id or a unique prefix of it")]


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
    }


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
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


def _422(msg: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, msg)


def create_app(service: Service, token: str | None, scripts_dir: str | os.PathLike[str], *,
               follows: Follows | None = None) -> FastAPI:
    """The API over a `Service`; `token` is the legacy admin token (None: per-user tokens only). The lifespan
    starts and stops the engine loop."""
    allowed = Path(scripts_dir).resolve()
    store = service.store
    authn = Authenticator(store, token)
    follows = follows or Follows()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            follows.closing = True
            service.stop()

    app = FastAPI(title="elastisched", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.follows = follows
    app.state.authn = authn
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(BodyTooLarge, body_too_large)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_middleware(lambda inner: guard(inner))  # type: ignore[arg-type]

    guard_dep = [Depends(principal)]
    admin_dep = [Depends(admin)]

    def find(job_id: str, who: Principal) -> dict[str, Any]:
        """The job, if `who` may see it; another user's job is 404 as if it did not exist."""
        try:
            row = store.get_job(job_id, owner=None if who.admin else who.user)
        except AmbiguousId as e:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job_id: {e}") from None
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"job_id: no job {job_id!r}")
        return row

    def live(job_id: str, who: Principal) -> dict[str, Any]:
        row = find(job_id, who)
        if row["state"] in TERMINAL:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job_id: job {row['id']} is already {row['state']}")
        return row

    add_routes(app, service, principal)  # read-only: utilisation, scheduler, reasons, log tail

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    @app.get("/dashboard", response_class=HTMLResponse)
    def dashboard() -> str:
        """A page that polls the API with the user's token (from #token=...): jobs, nodes, scheduler, utilisation."""
        return DASHBOARD

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """Liveness for probes: no detail (the last engine error is at /v1/status, for admins)."""
        return {"ok": service.last_error is None, "rounds": service.rounds}

    @app.get("/v1/status")
    def status_(who: User) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": service.last_error is None, "policy": service.policy_name,
                               "rounds": service.rounds, "user": who.user, "admin": who.admin}
        if who.admin:
            out["last_error"] = service.last_error
        return out

    @app.get("/v1/openapi.json", dependencies=guard_dep, include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.post("/v1/jobs", status_code=201)
    def submit(req: SubmitRequest, who: User) -> dict[str, Any]:
        path = Path(req.script)
        path = (path if path.is_absolute() else allowed / path).resolve()
        if not path.is_relative_to(allowed):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"script: {req.script!r} is outside the allowed "
                                                           f"directory {str(allowed)!r}")
        if not path.is_file():
            raise _422(f"script: {str(path)!r} is not a file")
        if req.application is not None and req.application not in service.known_apps():
            raise _422(f"application: {req.application!r} has no profile; known: "
                       f"{', '.join(sorted(service.known_apps()))}")
        if req.application is None and service.policy.needs_perf_models:
            raise _422(f"application: policy {service.policy_name!r} needs a profiled application")
        lo = req.min_gpus or req.gpus
        hi = req.max_gpus or max(req.gpus, lo)
        if not lo <= req.gpus <= hi:
            raise _422(f"gpus: {req.gpus} is outside min_gpus..max_gpus = {lo}..{hi}")
        gpu_type = req.gpu_type.lower() if req.gpu_type else None
        check_fits(service, gpu_type, req.gpus)
        spec = {"num_gpus": req.gpus, "min_gpus": lo, "max_gpus": hi, "elastic": hi > lo,
                "batch_size": req.batch_size, "adaptive": list(req.adaptive) if req.adaptive else None,
                "gpu_types": [gpu_type] if gpu_type else [], "duration": req.duration_s,
                "application": req.application, "work_scale": req.work_scale}
        row = store.create_job(name=req.name, script=str(path), args=req.args, spec=spec, owner=who.user)
        service.wake()
        return job_json(row)

    @app.get("/metrics", dependencies=guard_dep, response_class=PlainTextResponse)
    def metrics() -> str:
        """Prometheus text format: jobs per state, GPUs used and available per pool, loans, engine rounds."""
        return prometheus(service) + ("# HELP elastisched_log_follows Log follows open now.\n# TYPE "
                                      f"elastisched_log_follows gauge\nelastisched_log_follows {follows.count}\n")

    @app.get("/v1/jobs")
    def list_jobs(who: User, state: Annotated[str | None, Query(max_length=200)] = None,
                  limit: Annotated[int | None, Query(ge=1, le=1_000_000)] = None) -> list[dict[str, Any]]:
        states = [s.strip().upper() for s in state.split(",")] if state else None
        for s in states or ():
            if s not in STATES and s not in LEGACY_STATES:  # older names (STARTING, RESIZING) still filter
                raise _422(f"state: {s[:40]!r} is not a job state; one of {', '.join(STATES)}")
        return [job_json(r) for r in store.list_jobs(states, limit, owner=None if who.admin else who.user)]

    @app.get("/v1/jobs/{job_id}")
    def describe(job_id: JobId, who: User) -> dict[str, Any]:
        row = find(job_id, who)
        out = job_json(row)
        out["generations"] = store.generations(row["id"])
        out["events"] = store.events(row["id"])
        return out

    @app.delete("/v1/jobs/{job_id}", status_code=202)
    def cancel(job_id: JobId, who: User) -> dict[str, Any]:
        row = live(job_id, who)
        store.request_cancel(row["id"])
        service.wake()
        return job_json(find(row["id"], who))

    @app.post("/v1/jobs/{job_id}:resize", status_code=202)
    def resize(job_id: JobId, req: ResizeRequest, who: User) -> dict[str, Any]:
        row = live(job_id, who)
        cap = sum(n.num_gpus for n in service.nodes())
        if req.gpus > cap:
            raise _422(f"gpus: {req.gpus} exceeds the cluster ({cap})")
        store.request_resize(row["id"], req.gpus)
        service.wake()
        return job_json(find(row["id"], who))

    @app.post("/v1/jobs/{job_id}:suspend", status_code=202)
    def suspend(job_id: JobId, who: User) -> dict[str, Any]:
        row = live(job_id, who)
        store.request_hold(row["id"], True)
        service.wake()
        return job_json(find(row["id"], who))

    @app.post("/v1/jobs/{job_id}:resume", status_code=202)
    def resume(job_id: JobId, who: User) -> dict[str, Any]:
        row = find(job_id, who)
        if not row["held"]:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job_id: job {row['id']} is not suspended")
        store.request_hold(row["id"], False)
        service.wake()
        return job_json(find(row["id"], who))

    @app.get("/v1/jobs/{job_id}/logs", response_model=None)
    async def logs(request: Request, job_id: JobId, who: User, follow: bool = False,
                   timeout_s: Annotated[float, Query(gt=0, le=86400, allow_inf_nan=False)] = 3600.0,
                   ) -> PlainTextResponse | StreamingResponse:
        row = await anyio.to_thread.run_sync(find, job_id, who)
        jid = row["id"]
        backend = service.backend
        paths = getattr(backend, "log_paths", lambda _j: [])
        if not follow:
            return PlainTextResponse(await anyio.to_thread.run_sync(read_logs, paths(jid)))
        follows.admit(who.user, who.admin)
        return follows.response(request, who.user, lambda: paths(jid),
                                lambda: (store.get_job(jid) or {}).get("state") in TERMINAL, timeout_s)

    @app.get("/v1/nodes", dependencies=guard_dep)
    def nodes() -> list[dict[str, Any]]:
        used: dict[str, int] = {}
        for r in store.active_light():
            for n, k in r["placement"]:
                used[n] = used.get(n, 0) + int(k)
        return [{"node": n.node_id, "gpu_type": n.gpu_type, "gpus": n.num_gpus, "used": used.get(n.node_id, 0),
                 "pool": n.pool.value} for n in service.nodes()]

    @app.get("/v1/loans", dependencies=admin_dep)
    def list_loans() -> dict[str, Any]:
        return {"loans": store.list_loans(), "reclaims": store.list_reclaims()}

    @app.post("/v1/loans", status_code=201, dependencies=admin_dep)
    def offer(req: LoanRequest) -> list[dict[str, Any]]:
        taken = store.loan_ids()
        names: list[tuple[str, str, int]] = []
        k = 0
        t = req.gpu_type.lower()
        loanable = getattr(service.backend, "loanable", None)
        if loanable is not None:  # Ray: a loan names real nodes of the loanable pool (their own GPU count)
            busy = {r["node_id"] for r in store.list_loans(("LOANED",))}
            names = [(n.node_id, n.gpu_type, n.num_gpus) for n in loanable()
                     if n.node_id not in busy and n.gpu_type == t][:req.nodes]
            if len(names) < req.nodes:
                raise _422(f"nodes: {req.nodes} exceeds the {len(names)} free loanable Ray nodes of type {t}")
            for nid, _, _ in (again := [n for n in names if n[0] in taken]):  # lent before, returned since
                store.update_loan(nid, state="LOANED", offered_at=time.time(), returned_at=None)
                store.add_event(None, "loan_offered", {"node": nid, "again": True})
            out = store.add_loans([n for n in names if n not in again])
            service.wake()
            return out + [r for r in store.list_loans() if r["node_id"] in {n for n, _, _ in again}]
        while len(names) < req.nodes:
            nid = f"loan-{t}-{k}"
            if nid not in taken:
                names.append((nid, t, req.gpus_per_node))
            k += 1
        out = store.add_loans(names)
        service.wake()
        return out

    @app.post("/v1/reclaims", status_code=202, dependencies=admin_dep)
    def reclaim(req: ReclaimRequest) -> dict[str, Any]:
        have = len(store.list_loans(("LOANED",)))
        if req.count > have:
            raise _422(f"count: {req.count} exceeds the {have} servers on loan")
        out = store.add_reclaim(req.count, time.time() + req.deadline_s)
        service.wake()
        return out

    return app


def check_fits(service: Service, gpu_type: str | None, gpus: int) -> None:
    """422 unless the cluster (training nodes and servers on loan now) has `gpu_type` and `gpus` of it: a job
    that can never be placed would wait forever and, under FIFO, hold up every job behind it."""
    nodes = service.nodes()
    types = sorted({n.gpu_type for n in nodes})
    if gpu_type is not None and gpu_type not in types:
        raise _422(f"gpu_type: {gpu_type!r} is not in the cluster, which has {', '.join(types) or 'no nodes'}")
    cap = sum(n.num_gpus for n in nodes if gpu_type is None or n.gpu_type == gpu_type)
    if gpus > cap:
        of = f" of type {gpu_type}" if gpu_type else ""
        raise _422(f"gpus: {gpus} exceeds the {cap} GPUs{of} the cluster has")


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


def prometheus(service: Service) -> str:
    store = service.store
    states = store.count_by_state()
    used: dict[str, int] = {}
    for r in store.active_light():
        for n, k in r["placement"]:
            used[n] = used.get(n, 0) + int(k)
    pools: dict[str, list[int]] = {}
    for n in service.nodes():
        p = pools.setdefault(n.pool.value, [0, 0])
        p[0] += used.get(n.node_id, 0)
        p[1] += n.num_gpus
    lines = ["# HELP elastisched_jobs Jobs known to the service, by state.", "# TYPE elastisched_jobs gauge"]
    lines += [f'elastisched_jobs{{state="{st}"}} {states.get(st, 0)}' for st in STATES]
    lines += ["# HELP elastisched_gpus GPUs (worker slots) by pool.", "# TYPE elastisched_gpus gauge"]
    for pool, (u, tot) in sorted(pools.items()):
        lines += [f'elastisched_gpus{{pool="{pool}",state="used"}} {u}',
                  f'elastisched_gpus{{pool="{pool}",state="total"}} {tot}']
    lines += ["# HELP elastisched_loaned_servers Inference servers on loan now.",
              "# TYPE elastisched_loaned_servers gauge",
              f"elastisched_loaned_servers {len(store.list_loans(('LOANED',)))}",
              "# HELP elastisched_rounds_total Engine rounds run since the service started.",
              "# TYPE elastisched_rounds_total counter", f"elastisched_rounds_total {service.rounds}",
              "# HELP elastisched_round_latency_seconds Policy and engine time of the last round.",
              "# TYPE elastisched_round_latency_seconds gauge",
              f"elastisched_round_latency_seconds {service.round_latency_s:.6f}",
              "# HELP elastisched_engine_healthy 1 if the last engine step raised no error.",
              "# TYPE elastisched_engine_healthy gauge",
              f"elastisched_engine_healthy {int(service.last_error is None)}"]
    return "\n".join(lines) + "\n"
