"""The cluster: its nodes (training and on loan), and for admins the loans and reclaims of inference servers.
A loan offer is recorded as a request (`service/loan_offers.py`) that the daemon applies; the handler answers
with the loans once it has. A reclaim is a pending request the next engine round acts on."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException, status

from elastisched.core.enums import LoanState
from elastisched.service.api_models import LoanRequest, ReclaimRequest
from elastisched.service.loan_offers import loans_named, request_offer, wait_applied
from elastisched.service.routes.context import ADMIN, GUARD, ApiContext, Ctx, unprocessable, used_gpus

OFFER_WAIT_S = 60.0  # how long a loan offer waits for the engine loop to apply it

router = APIRouter()


@router.get("/v1/nodes", dependencies=GUARD)
def nodes(ctx: Ctx) -> list[dict[str, Any]]:
    used = used_gpus(ctx.store)
    return [{"node": n.node_id, "gpu_type": n.gpu_type, "gpus": n.num_gpus, "used": used.get(n.node_id, 0),
             "pool": n.pool.value} for n in ctx.service.nodes()]


@router.get("/v1/loans", dependencies=ADMIN)
def list_loans(ctx: Ctx) -> dict[str, Any]:
    return {"loans": ctx.store.list_loans(), "reclaims": ctx.store.list_reclaims()}


@router.post("/v1/loans", status_code=201, dependencies=ADMIN)
def offer(req: LoanRequest, ctx: Ctx) -> list[dict[str, Any]]:
    """Lend servers: real ones of the backend's loanable pool where it has one (their own GPU count), else
    virtual `loan-<type>-<k>` nodes of the size asked."""
    store, t = ctx.store, req.gpu_type.lower()
    taken = store.loan_ids()
    loanable = ctx.service.backend.loanable()
    if loanable is None:
        names = _virtual_names(taken, t, req.nodes, req.gpus_per_node)
        again: list[str] = []
    else:
        busy = {r["node_id"] for r in store.list_loans((LoanState.LOANED,))}
        names = [(n.node_id, n.gpu_type, n.num_gpus) for n in loanable
                 if n.node_id not in busy and n.gpu_type == t][:req.nodes]
        if len(names) < req.nodes:
            raise unprocessable(f"nodes: {req.nodes} exceeds the {len(names)} free loanable Ray nodes of type {t}")
        again = [n for n, _, _ in names if n in taken]  # lent before, returned since
    fresh = [n for n in names if n[0] not in again]
    _apply(ctx, fresh, again)
    out = loans_named(store, [n for n, _, _ in fresh])
    return out + [r for r in store.list_loans() if r["node_id"] in set(again)]


def _virtual_names(taken: set[str], gpu_type: str, count: int, gpus: int) -> list[tuple[str, str, int]]:
    """The first `count` names `loan-<type>-<k>` not lent yet."""
    names: list[tuple[str, str, int]] = []
    k = 0
    while len(names) < count:
        nid = f"loan-{gpu_type}-{k}"
        if nid not in taken:
            names.append((nid, gpu_type, gpus))
        k += 1
    return names


def _apply(ctx: ApiContext, fresh: list[tuple[str, str, int]], again: list[str]) -> None:
    """Record the offer, wake the engine loop and wait for it to lend the nodes (503 if it does not in time)."""
    offer_id = request_offer(ctx.store, fresh, again)
    ctx.service.wake()
    if not wait_applied(ctx.store, offer_id, OFFER_WAIT_S):
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"nodes: the engine loop has not applied loan "
                                                                 f"offer {offer_id} within {OFFER_WAIT_S:g} s; "
                                                                 "it will when it can")


@router.post("/v1/reclaims", status_code=202, dependencies=ADMIN)
def reclaim(req: ReclaimRequest, ctx: Ctx) -> dict[str, Any]:
    have = len(ctx.store.list_loans((LoanState.LOANED,)))
    if req.count > have:
        raise unprocessable(f"count: {req.count} exceeds the {have} servers on loan")
    out = ctx.store.add_reclaim(req.count, time.time() + req.deadline_s)
    ctx.service.wake()
    return out
