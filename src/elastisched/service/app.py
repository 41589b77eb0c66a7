"""REST API (ecosystem.md §B.4): jobs, logs, nodes, loans and reclaims; bearer token on all but /healthz and
the dashboard page (`/`), which holds no data and calls the API with the token the user gives it.

Handlers only validate, write the request to the store and wake the engine loop; the loop acts. Request
models are pydantic, so a bad field is a 422 whose `detail[].loc` names it. A job's script must resolve
inside the allowed directory: the service runs it as its own user.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from elastisched.service.daemon import Service
from elastisched.service.store import ACTIVE, TERMINAL, AmbiguousId

DASHBOARD = (resources.files("elastisched.service") / "dashboard.html").read_text(encoding="utf-8")


class SubmitRequest(BaseModel):
    script: str = Field(min_length=1, max_length=4096)
    args: list[str] = Field(default_factory=list, max_length=256)
    name: str | None = Field(default=None, max_length=200)
    gpus: int = Field(default=1, ge=1, le=4096, description="GPUs requested (the size an inelastic policy gives)")
    min_gpus: int | None = Field(default=None, ge=1, le=4096)
    max_gpus: int | None = Field(default=None, ge=1, le=4096)
    batch_size: int = Field(default=64, ge=1, le=1 << 20)
    adaptive: tuple[int, int] | None = Field(default=None, description="global batch bounds MIN,MAX")
    gpu_type: str | None = Field(default=None, max_length=64)
    duration_s: float | None = Field(default=None, gt=0, description="estimate at the requested size")
    application: str | None = Field(default=None, max_length=64, description="profiled application (models)")
    work_scale: float | None = Field(default=None, gt=0, le=1e6, description="job length as a multiple of the "
                                     "profiled application's run (models)")

    @field_validator("max_gpus")
    @classmethod
    def _max_ge_min(cls, v: int | None, info: ValidationInfo) -> int | None:
        lo = info.data.get("min_gpus")
        if v is not None and lo is not None and v < lo:
            raise ValueError(f"max_gpus={v} is below min_gpus={lo}")
        return v

    @field_validator("adaptive")
    @classmethod
    def _adaptive(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and not 1 <= v[0] <= v[1]:
            raise ValueError(f"adaptive={list(v)} must be MIN,MAX with 1 <= MIN <= MAX")
        return v


class ResizeRequest(BaseModel):
    gpus: int = Field(ge=1, le=4096)


class LoanRequest(BaseModel):
    nodes: int = Field(default=1, ge=1, le=1024)
    gpus_per_node: int = Field(ge=1, le=64)
    gpu_type: str = Field(default="cpu", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")


class ReclaimRequest(BaseModel):
    count: int = Field(ge=1, le=1024)
    deadline_s: float = Field(default=60.0, ge=0, le=86400)


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
        "args": row["args"], "message": row["message"], "held": bool(row.get("held")),
    }


def create_app(service: Service, token: str, scripts_dir: str | os.PathLike[str]) -> FastAPI:
    """The API over a `Service`; the lifespan starts and stops the engine loop."""
    allowed = Path(scripts_dir).resolve()
    store = service.store

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            service.stop()

    app = FastAPI(title="elastisched", version="1", lifespan=lifespan)

    async def auth(request: Request) -> None:  # async: no thread-pool hop before every request
        got = request.headers.get("authorization", "")
        if not (got.startswith("Bearer ") and secrets.compare_digest(got[7:].encode(), token.encode())):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token",
                                headers={"WWW-Authenticate": "Bearer"})

    guard = [Depends(auth)]

    def find(job_id: str) -> dict[str, Any]:
        try:
            row = store.get_job(job_id)
        except AmbiguousId as e:
            raise HTTPException(status.HTTP_409_CONFLICT, str(e)) from None
        if row is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id!r}")
        return row

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    @app.get("/dashboard", response_class=HTMLResponse)
    def dashboard() -> str:
        """A page that polls /v1/nodes, /v1/jobs and /v1/loans every 2 s (token from #token=... or asked)."""
        return DASHBOARD

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": service.last_error is None, "policy": service.policy_name, "rounds": service.rounds,
                "last_error": service.last_error}

    @app.post("/v1/jobs", status_code=201, dependencies=guard)
    def submit(req: SubmitRequest) -> dict[str, Any]:
        path = Path(req.script)
        path = (path if path.is_absolute() else allowed / path).resolve()
        if not path.is_relative_to(allowed):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"script: {req.script!r} is outside the allowed "
                                                           f"directory {str(allowed)!r}")
        if not path.is_file():
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, f"script: {str(path)!r} is not a file")
        if req.application is not None and req.application not in service.known_apps():
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, f"application: {req.application!r} has no "
                                f"profile; known: {', '.join(sorted(service.known_apps()))}")
        if req.application is None and service.policy.needs_perf_models:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, f"application: policy "
                                f"{service.policy_name!r} needs a profiled application")
        lo = req.min_gpus or req.gpus
        hi = req.max_gpus or max(req.gpus, lo)
        if not lo <= req.gpus <= hi:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                                f"gpus: {req.gpus} is outside min_gpus..max_gpus = {lo}..{hi}")
        spec = {"num_gpus": req.gpus, "min_gpus": lo, "max_gpus": hi, "elastic": hi > lo,
                "batch_size": req.batch_size, "adaptive": list(req.adaptive) if req.adaptive else None,
                "gpu_types": [req.gpu_type.lower()] if req.gpu_type else [], "duration": req.duration_s,
                "application": req.application, "work_scale": req.work_scale}
        row = store.create_job(name=req.name, script=str(path), args=req.args, spec=spec)
        service.wake()
        return job_json(row)

    @app.get("/metrics", dependencies=guard, response_class=PlainTextResponse)
    def metrics() -> str:
        """Prometheus text format: jobs per state, GPUs used and available per pool, loans, engine rounds."""
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
        lines += [f'elastisched_jobs{{state="{st}"}} {states.get(st, 0)}' for st in (*ACTIVE, *TERMINAL)]
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

    @app.get("/v1/jobs", dependencies=guard)
    def list_jobs(state: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        states = [s.strip().upper() for s in state.split(",")] if state else None
        return [job_json(r) for r in store.list_jobs(states, limit)]

    @app.get("/v1/jobs/{job_id}", dependencies=guard)
    def describe(job_id: str) -> dict[str, Any]:
        row = find(job_id)
        out = job_json(row)
        out["generations"] = store.generations(row["id"])
        out["events"] = store.events(row["id"])
        return out

    @app.delete("/v1/jobs/{job_id}", status_code=202, dependencies=guard)
    def cancel(job_id: str) -> dict[str, Any]:
        row = find(job_id)
        if row["state"] in TERMINAL:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {row['id']} is already {row['state']}")
        store.request_cancel(row["id"])
        service.wake()
        return job_json(find(row["id"]))

    @app.post("/v1/jobs/{job_id}:resize", status_code=202, dependencies=guard)
    def resize(job_id: str, req: ResizeRequest) -> dict[str, Any]:
        row = find(job_id)
        if row["state"] in TERMINAL:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {row['id']} is already {row['state']}")
        cap = sum(n.num_gpus for n in service.nodes())
        if req.gpus > cap:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, f"gpus: {req.gpus} exceeds the cluster ({cap})")
        store.request_resize(row["id"], req.gpus)
        service.wake()
        return job_json(find(row["id"]))

    @app.post("/v1/jobs/{job_id}:suspend", status_code=202, dependencies=guard)
    def suspend(job_id: str) -> dict[str, Any]:
        row = find(job_id)
        if row["state"] in TERMINAL:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {row['id']} is already {row['state']}")
        store.request_hold(row["id"], True)
        service.wake()
        return job_json(find(row["id"]))

    @app.post("/v1/jobs/{job_id}:resume", status_code=202, dependencies=guard)
    def resume(job_id: str) -> dict[str, Any]:
        row = find(job_id)
        if not row["held"]:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {row['id']} is not suspended")
        store.request_hold(row["id"], False)
        service.wake()
        return job_json(find(row["id"]))

    @app.get("/v1/jobs/{job_id}/logs", dependencies=guard, response_model=None)
    def logs(job_id: str, follow: bool = False, timeout_s: float = 3600.0) -> PlainTextResponse | StreamingResponse:
        row = find(job_id)
        backend = service.backend
        paths = getattr(backend, "log_paths", lambda _j: [])
        if not follow:
            return PlainTextResponse("".join(p.read_text(errors="replace") for p in paths(row["id"])))

        def stream() -> Iterator[bytes]:
            offsets: dict[Path, int] = {}
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                done = (store.get_job(row["id"]) or {}).get("state") in TERMINAL
                for p in paths(row["id"]):
                    with open(p, "rb") as f:
                        f.seek(offsets.get(p, 0))
                        chunk = f.read()
                    if chunk:
                        offsets[p] = offsets.get(p, 0) + len(chunk)
                        yield chunk
                if done:
                    return
                time.sleep(0.2)

        return StreamingResponse(stream(), media_type="text/plain")

    @app.get("/v1/nodes", dependencies=guard)
    def nodes() -> list[dict[str, Any]]:
        used: dict[str, int] = {}
        for r in store.active_jobs():
            for n, k in r["placement"]:
                used[n] = used.get(n, 0) + int(k)
        return [{"node": n.node_id, "gpu_type": n.gpu_type, "gpus": n.num_gpus, "used": used.get(n.node_id, 0),
                 "pool": n.pool.value} for n in service.nodes()]

    @app.get("/v1/loans", dependencies=guard)
    def list_loans() -> dict[str, Any]:
        return {"loans": store.list_loans(), "reclaims": store.list_reclaims()}

    @app.post("/v1/loans", status_code=201, dependencies=guard)
    def offer(req: LoanRequest) -> list[dict[str, Any]]:
        taken = store.loan_ids()
        names: list[tuple[str, str, int]] = []
        k = 0
        t = req.gpu_type.lower()
        while len(names) < req.nodes:
            nid = f"loan-{t}-{k}"
            if nid not in taken:
                names.append((nid, t, req.gpus_per_node))
            k += 1
        out = store.add_loans(names)
        service.wake()
        return out

    @app.post("/v1/reclaims", status_code=202, dependencies=guard)
    def reclaim(req: ReclaimRequest) -> dict[str, Any]:
        have = len(store.list_loans(("LOANED",)))
        if req.count > have:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY,
                                f"count: {req.count} exceeds the {have} servers on loan")
        out = store.add_reclaim(req.count, time.time() + req.deadline_s)
        service.wake()
        return out

    return app
