"""REST API (ecosystem.md §B.4): jobs, logs, nodes, loans and reclaims. Every path but /healthz and the dashboard
page (`/`, which holds no data and calls the API with the token the user gives it) needs a bearer token.

Handlers only validate, record the request in the store and wake the engine loop; the loop acts (the daemon is
the single writer of service state). Who may do what (service/auth.py): a user sees and acts on its own jobs
(another user's job is a 404, as if absent); an admin sees and acts on all of them and alone reaches loans and
reclaims. Input is bounded field by field (service/api_models.py), so a bad request is a 4xx naming the field,
never a 500. A job's script must resolve inside the allowed directory: the service runs it as its own user. The
OpenAPI schema is served to authenticated clients at /v1/openapi.json; /docs and /redoc are off.

The routes live in `service/routes/` (one module per resource); this module assembles them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from elastisched.service.api_models import BodyTooLarge, body_too_large, guard, validation_error
from elastisched.service.auth import Authenticator
from elastisched.service.daemon import Service
from elastisched.service.headers import security_headers
from elastisched.service.isolation import DEFAULT_MAX_QUEUED
from elastisched.service.job_listing import Listing
from elastisched.service.logstream import Follows
from elastisched.service.routes import cluster, dashboard, jobs, meta
from elastisched.service.routes.context import API_THREADS, ApiContext, http_error, job_json
from elastisched.service.routes.meta import DASHBOARD


def create_app(service: Service, token: str | None, scripts_dir: str | os.PathLike[str], *,
               follows: Follows | None = None, max_queued: int = DEFAULT_MAX_QUEUED, isolation: str = "none",
               api_threads: int = API_THREADS) -> FastAPI:
    """The API over a `Service`; `token` is the legacy admin token (None: per-user tokens only); `max_queued`:
    queued jobs a user who is not an admin may have; `isolation`: how jobs run (reported by /v1/status);
    `api_threads`: worker threads of the polled reads, and as many of submissions. The lifespan starts and
    stops the engine loop."""
    ctx = ApiContext(service=service, store=service.store, scripts_dir=Path(scripts_dir).resolve(),
                     follows=follows or Follows(), authn=Authenticator(service.store, token), max_queued=max_queued,
                     isolation=isolation, listing=Listing(service.store, job_json), threads=api_threads)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            ctx.follows.closing = True
            service.stop()

    app = FastAPI(title="elastisched", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.api = ctx
    app.state.follows = ctx.follows
    app.state.authn = ctx.authn
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(BodyTooLarge, body_too_large)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_middleware(lambda inner: guard(inner))  # type: ignore[arg-type]
    app.add_middleware(lambda inner: security_headers(inner, DASHBOARD))  # type: ignore[arg-type]
    for routes in (dashboard, meta, jobs, cluster):
        app.include_router(routes.router)
    return app
