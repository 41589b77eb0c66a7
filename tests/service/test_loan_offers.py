"""Loan offers are requests: the API records them, the daemon (the single writer of `loans`) applies them."""

from __future__ import annotations

from collections.abc import Sequence

from elastisched.backends.base import BackendBase, BackendEvent
from elastisched.core.cluster import parse_cluster
from elastisched.core.events import Action
from elastisched.core.types import Pool
from elastisched.service.daemon import Service
from elastisched.service.loan_offers import apply_loan_offers, loans_named, request_offer, wait_applied
from elastisched.service.store import Store


class IdleBackend(BackendBase):
    def apply(self, actions: Sequence[Action]) -> None:
        pass

    def cancel(self, job_id: str) -> None:
        pass

    def poll(self) -> list[BackendEvent]:
        return []

    def recover(self, generations: object = ()) -> list[BackendEvent]:
        return []

    def close(self) -> None:
        pass


def test_an_offer_lends_nothing_until_applied_then_once() -> None:
    store = Store("sqlite://")
    oid = request_offer(store, [("loan-cpu-0", "cpu", 2), ("loan-cpu-1", "cpu", 2)], [])
    assert store.list_loans() == [] and not wait_applied(store, oid, 0.0)  # recorded, not acted on
    assert apply_loan_offers(store) is True
    assert wait_applied(store, oid, 0.0)
    assert [(r["node_id"], r["state"]) for r in loans_named(store, ["loan-cpu-0", "loan-cpu-1"])] == [
        ("loan-cpu-0", "LOANED"), ("loan-cpu-1", "LOANED")]
    assert [e["data"]["node"] for e in store.events(kinds=["loan_offered"])] == ["loan-cpu-0", "loan-cpu-1"]
    assert apply_loan_offers(store) is False  # applied once: nothing pending, no second write


def test_a_returned_server_is_lent_again_not_added_twice() -> None:
    store = Store("sqlite://")
    store.add_loans([("ray-a", "t4", 4)])
    store.update_loan("ray-a", state="RETURNED", returned_at=1.0)
    request_offer(store, [], ["ray-a"])
    request_offer(store, [("ray-a", "t4", 4)], [])  # a concurrent offer that named it too
    apply_loan_offers(store)
    (row,) = store.list_loans()
    assert (row["state"], row["returned_at"]) == ("LOANED", None)
    assert [e["data"].get("again") for e in store.events(kinds=["loan_offered"])] == [None, True, True]


def test_the_daemon_applies_offers_in_its_step() -> None:
    store = Store("sqlite://")
    svc = Service(store, parse_cluster("1x2:cpu"), IdleBackend(), "fifo", tick_s=0.01)
    oid = request_offer(store, [("loan-cpu-0", "cpu", 2)], [])
    assert [n.pool for n in svc.nodes()] == [Pool.TRAIN]
    svc.step()
    assert wait_applied(store, oid, 0.0)
    assert [(n.node_id, n.pool) for n in svc.nodes()] == [("cpu-0", Pool.TRAIN), ("loan-cpu-0", Pool.LOANABLE)]
