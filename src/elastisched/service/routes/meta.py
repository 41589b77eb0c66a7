"""The service about itself: the dashboard page, liveness, status, the OpenAPI schema and Prometheus metrics."""

from __future__ import annotations

from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse

from elastisched.service.daemon import Service
from elastisched.service.routes.context import ADMIN, GUARD, Ctx, User, used_gpus
from elastisched.service.store import ACTIVE, TERMINAL

DASHBOARD = (resources.files("elastisched.service") / "dashboard.html").read_text(encoding="utf-8")
STATES = (*ACTIVE, *TERMINAL)

router = APIRouter()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
@router.get("/dashboard", response_class=HTMLResponse)
def dashboard() -> str:
    """A page that polls the API with the user's token (from #token=...): jobs, nodes, scheduler, utilisation."""
    return DASHBOARD


@router.get("/healthz")
def healthz(ctx: Ctx) -> dict[str, Any]:
    """Liveness for probes: no detail (the last engine error is at /v1/status, for admins)."""
    return {"ok": ctx.service.last_error is None, "rounds": ctx.service.rounds}


@router.get("/v1/status")
def status_(who: User, ctx: Ctx) -> dict[str, Any]:
    service = ctx.service
    out: dict[str, Any] = {"ok": service.last_error is None, "policy": service.policy_name,
                           "rounds": service.rounds, "user": who.user, "admin": who.admin,
                           "isolation": ctx.isolation}
    if who.admin:
        out["last_error"] = service.last_error
    return out


@router.get("/v1/openapi.json", dependencies=GUARD, include_in_schema=False)
def openapi(request: Request) -> dict[str, Any]:
    schema: dict[str, Any] = request.app.openapi()
    return schema


@router.get("/metrics", dependencies=ADMIN, response_class=PlainTextResponse)
def metrics(ctx: Ctx) -> str:
    """Prometheus text format: jobs per state, GPUs used and available per pool, loans, engine rounds. An
    operator's endpoint (admins only): its job counts are every user's (docs/security.md, "What a user sees")."""
    return prometheus(ctx.service) + ("# HELP elastisched_log_follows Log follows open now.\n# TYPE "
                                      f"elastisched_log_follows gauge\nelastisched_log_follows {ctx.follows.count}\n")


def prometheus(service: Service) -> str:
    store = service.store
    states = store.count_by_state()
    used = used_gpus(store)
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
              *service.round_times.prometheus(),
              "# HELP elastisched_engine_healthy 1 if the last engine step raised no error.",
              "# TYPE elastisched_engine_healthy gauge",
              f"elastisched_engine_healthy {int(service.last_error is None)}"]
    return "\n".join(lines) + "\n"
