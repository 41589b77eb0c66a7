"""Loan offers as requests: the API records what an admin offers (`request_offer`), the daemon, the single
writer of `loans`, applies it on its next step (`apply_loan_offers`), and the API answers with the loans as
written once the offer is applied (`wait_applied`). Like cancels, resizes and reclaims, an offer survives a
crash between its request and its application: the daemon applies it after the restart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select, update

from elastisched.core.enums import LoanState, RequestState
from elastisched.service.store import Store
from elastisched.service.tables import loan_offers, loans

PENDING, DONE = RequestState.PENDING, RequestState.DONE


def request_offer(store: Store, nodes: Sequence[tuple[str, str, int]], again: Sequence[str]) -> int:
    """Record an offer: `nodes` to lend anew (id, GPU type, GPUs), `again` (ids) to lend once more."""
    with store.tx() as c:
        return int(c.execute(insert(loan_offers).values(
            nodes=[list(n) for n in nodes], again=list(again), state=PENDING,
            created_at=time.time())).inserted_primary_key[0])


def apply_loan_offers(store: Store) -> bool:
    """The daemon's side: lend the nodes of every pending offer, each offer in one transaction with its events
    (`loan_offered`). A node already on the books is lent again rather than added twice. True if any applied."""
    with store.tx() as c:
        pending = c.execute(select(loan_offers).where(loan_offers.c.state == PENDING)
                            .order_by(loan_offers.c.id)).all()
    for offer in pending:
        with store.tx() as c:
            now = time.time()
            known = {r[0] for r in c.execute(select(loans.c.node_id))}
            new = [(str(n), str(t), int(g)) for n, t, g in offer.nodes if n not in known]
            for nid in [*offer.again, *(n for n, _, _ in offer.nodes if n in known)]:
                store.update_loan(nid, conn=c, state=LoanState.LOANED, offered_at=now, returned_at=None)
                store.add_event(None, "loan_offered", {"node": nid, "again": True}, conn=c)
            store.add_loans(new, conn=c)
            c.execute(update(loan_offers).where(loan_offers.c.id == offer.id).values(state=DONE, done_at=now))
    return bool(pending)


def wait_applied(store: Store, offer_id: int, timeout_s: float) -> bool:
    """Wait (polling the store) until the daemon has applied the offer; False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        with store.tx() as c:
            state = c.execute(select(loan_offers.c.state).where(loan_offers.c.id == offer_id)).scalar()
        if state == DONE:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def loans_named(store: Store, node_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The loan rows of `node_ids`, in the store's order."""
    with store.tx() as c:
        return [dict(r._mapping) for r in c.execute(select(loans).where(loans.c.node_id.in_(list(node_ids))))]
