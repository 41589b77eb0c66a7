"""What the store does so that a round and a listing stay cheap at thousands of jobs, held to the database:
the in-memory mirror of the active jobs (service/active_jobs.py) equals a fresh read of the table after any
mix of writes, committed or rolled back, from several threads, and so do its counts of each user's queued
jobs; the loans kept in memory follow committed writes only; a listing that keeps ended jobs' JSON
(service/job_listing.py) answers exactly what encoding every row afresh answers."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest
from sqlalchemy import String, select, type_coerce

from elastisched.service.active_jobs import LIGHT
from elastisched.service.job_listing import Listing
from elastisched.service.routes.context import job_json
from elastisched.service.store import ACTIVE, Store
from elastisched.service.tables import jobs


def _from_table(store: Store) -> list[dict[str, object]]:
    cols = [type_coerce(jobs.c.placement, String) if n == "placement" else jobs.c[n] for n in LIGHT]
    with store.read() as c:
        raw = c.execute(select(*cols).where(jobs.c.state.in_(ACTIVE)).order_by(jobs.c.seq)).all()
    out = []
    for r in raw:
        d = dict(zip(LIGHT, r, strict=True))
        d["placement"] = json.loads(d["placement"]) if isinstance(d["placement"], str) else d["placement"]
        out.append(d)
    return out


def _writes(store: Store, rng: random.Random, ids: list[str], n: int) -> None:
    for _ in range(n):
        op = rng.random()
        if op < 0.3 or not ids:
            owner = rng.choice(["ann", "bob", None])
            ids.append(store.create_job(name=None, script="/x", args=[], spec={"num_gpus": 1}, owner=owner)["id"])
            continue
        jid = rng.choice(ids)
        if op < 0.5:
            store.update_job(jid, state="RUNNING", placement=[["n0", rng.randint(1, 4)]], generation=rng.randint(1, 9),
                             batch_size=rng.choice([None, 64]), restarts=rng.randint(0, 3), start_time=1.0)
        elif op < 0.6:
            store.request_cancel(jid)
        elif op < 0.7:
            store.request_hold(jid, rng.random() < 0.5)
        elif op < 0.75:
            store.request_resize(jid, rng.randint(1, 8))
        elif op < 0.85:
            store.update_job(jid, state=rng.choice(["SUCCEEDED", "FAILED", "CANCELLED", "SUSPENDED"]), placement=[])
        else:  # a transaction that writes and then fails: the mirror must not show its writes
            with pytest.raises(RuntimeError), store.tx() as c:
                store.update_job(jid, c, state="SUCCEEDED", placement=[["n9", 9]])
                raise RuntimeError("rolled back")


@pytest.mark.parametrize("url", ["file", "sqlite://"])
def test_the_mirror_of_active_jobs_equals_the_table(tmp_path: Path, url: str) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}" if url == "file" else url)
    ids: list[str] = []
    _writes(store, random.Random(1), ids, 50)
    assert store.active_light() == _from_table(store)  # loaded from the table
    threads = [threading.Thread(target=_writes, args=(store, random.Random(k), list(ids), 150)) for k in range(4)]
    for t in threads:
        t.start()
    for _ in range(50):  # readers beside the writers see whole rows
        for row in store.active_light():
            assert set(row) == set(LIGHT)
    for t in threads:
        t.join()
    mirror = store.active_light()
    assert mirror == _from_table(store) and len(mirror) > 10
    assert store.requests() == [r for r in _from_table(store)
                                if r["cancel_requested"] or r["held"] or r["resize_to"] is not None]
    queued: dict[str | None, int] = {}  # what the per-user limit of queued jobs counts (service/intake.py)
    for r in _from_table(store):
        if r["state"] in ("PENDING", "SUSPENDED"):
            queued[r["owner"]] = queued.get(r["owner"], 0) + 1
    assert {o: store.queued_of(o) for o in ("ann", "bob", None)} == {o: queued.get(o, 0) for o in ("ann", "bob", None)}
    assert sum(queued.values()) > 5
    store.close()


def test_queued_counts_follow_each_job_through_its_states(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    a = [store.create_job(name=None, script="/x", args=[], spec={"num_gpus": 1}, owner="ann")["id"] for _ in range(4)]
    store.create_job(name=None, script="/x", args=[], spec={"num_gpus": 1}, owner="bob")
    assert (store.queued_of("ann"), store.queued_of("bob"), store.queued_of("eve")) == (4, 1, 0)
    store.update_job(a[0], state="RUNNING", placement=[["n0", 1]])
    store.update_job(a[1], state="RUNNING", placement=[["n0", 1]])
    assert store.queued_of("ann") == 2
    store.update_job(a[1], state="SUSPENDED", placement=[])  # queued again
    store.update_job(a[2], state="CANCELLED")
    store.update_job(a[0], state="SUCCEEDED", placement=[])
    assert (store.queued_of("ann"), store.queued_of("bob")) == (2, 1)
    with pytest.raises(RuntimeError), store.tx() as c:  # rolled back: counts unchanged
        store.update_job(a[3], c, state="RUNNING")
        raise RuntimeError("rolled back")
    assert store.queued_of("ann") == 2
    store.close()


def test_loans_kept_in_memory_follow_committed_writes_only(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    assert store.list_loans() == []
    store.add_loans([("inf0", "t4", 4), ("inf1", "t4", 4)])
    assert [r["node_id"] for r in store.list_loans(("LOANED",))] == ["inf0", "inf1"]
    with pytest.raises(RuntimeError), store.tx() as c:  # rolled back: never seen, never kept
        store.update_loan("inf0", conn=c, state="RETURNED")
        assert [r["state"] for r in store.list_loans()] == ["RETURNED", "LOANED"]  # its own transaction sees it
        raise RuntimeError("rolled back")
    assert [r["node_id"] for r in store.list_loans(("LOANED",))] == ["inf0", "inf1"]
    store.update_loan("inf1", state="RETURNED", returned_at=1.0)
    assert [r["node_id"] for r in store.list_loans(("LOANED",))] == ["inf0"]
    store.list_loans()[0]["state"] = "changed by a caller"  # callers get copies
    assert [r["state"] for r in store.list_loans()] == ["LOANED", "RETURNED"]
    seen: list[list[str]] = []
    with store.tx() as c:  # another thread reads between the write and the commit: what it keeps goes stale
        store.update_loan("inf0", conn=c, state="RETURNED")
        reader = threading.Thread(target=lambda: seen.append([r["state"] for r in store.list_loans()]))
        reader.start()
        reader.join()
    assert seen == [["LOANED", "RETURNED"]]  # the committed state then
    assert [r["state"] for r in store.list_loans()] == ["RETURNED", "RETURNED"]  # read again after the commit
    store.close()


def test_listing_keeps_ended_jobs_json_and_answers_as_afresh(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    listing = Listing(store, job_json, max_kept=5)  # small: ended jobs are dropped and read again
    rng = random.Random(2)
    ids = [store.create_job(name=f"j{i}", script="/x", args=["--k", str(i)], spec={"num_gpus": 1 + i % 3},
                            owner=rng.choice(["a", "b"]))["id"] for i in range(30)]

    def afresh(states: list[str] | None, owner: str | None) -> list[dict[str, object]]:
        return [job_json(r) for r in store.list_jobs(states, None, owner)]

    for step in range(4):  # as in the service, a job that has ended is never written again
        live = [j for j in ids if store.get_job(j)["state"] not in ("SUCCEEDED", "FAILED")]
        for jid in rng.sample(live, min(6, len(live))):
            store.update_job(jid, state=rng.choice(["RUNNING", "SUCCEEDED", "FAILED"]), end_time=float(step),
                             placement=[["n1", 2]] if step % 2 else [], message=f"m{step}")
        with store.tx() as c:  # the round's pending reasons (one statement for many jobs)
            store.set_reasons({j: f"Why{step}" for j in rng.sample(live, min(5, len(live)))}, c)
        for owner in (None, "a", "b"):
            for states in (None, ["SUCCEEDED", "FAILED"], ["RUNNING"]):
                assert json.loads(listing.body(states, None, owner)) == afresh(states, owner)
    assert len(listing._ended) == 5  # bounded
    assert json.loads(listing.body(None, 3, None)) == afresh(None, None)[:3]
    store.close()
