"""The SQLAlchemy store: jobs by id prefix, events, generations, loans; state survives a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastisched.service.store import AmbiguousId, Store


def test_state_survives_reopen_and_prefix_lookup(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    s = Store(url)
    a = s.create_job(name="a", script="/x.py", args=["--n", "1"], spec={"num_gpus": 2, "batch_size": 8})
    with s.tx() as c:
        s.add_generation(c, a["id"], 1, cause="launch", placement=[["cpu-0", 2]], batch_size=8, port=1)
    s.update_generation(a["id"], 1, state="RUNNING", pids=[[123, 456], [124, 457]])
    s.add_loans([("loan-cpu-0", "cpu", 4)])
    s.add_reclaim(1, 10.0)
    s.close()
    s = Store(url)
    assert s.get_job(a["id"][:3])["args"] == ["--n", "1"]
    assert s.generations(live=True)[0]["pids"] == [[123, 456], [124, 457]]
    assert [e["kind"] for e in s.events()] == ["submitted", "loan_offered", "reclaim_requested"]
    assert s.list_loans(("LOANED",))[0]["num_gpus"] == 4
    assert s.list_reclaims(("PENDING",))[0]["count"] == 1
    assert s.get_job("zz-no-such") is None
    s.close()


def test_ambiguous_prefix_is_an_error(tmp_path: Path) -> None:
    s = Store(f"sqlite:///{tmp_path / 's.db'}")
    ids = [s.create_job(name=None, script="/x", args=[], spec={"num_gpus": 1})["id"] for _ in range(40)]
    first = {i[0] for i in ids}
    shared = next(c for c in first if sum(i.startswith(c) for i in ids) > 1)
    with pytest.raises(AmbiguousId):
        s.get_job(shared)
    assert s.count_jobs() == 40 and [r["id"] for r in s.list_jobs()] == ids  # submission order


def test_any_sqlalchemy_url_in_memory() -> None:
    s = Store("sqlite://")
    s.set_meta("epoch", 1.5)
    assert s.get_meta("epoch") == 1.5 and s.get_meta("missing", 7) == 7


def test_database_from_before_the_held_column_is_migrated(tmp_path: Path) -> None:
    """A jobs table made before suspend/resume existed gets `held` on open; its jobs stay readable."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'old.db'}"
    s = Store(url)
    a = s.create_job(name="a", script="/x.py", args=[], spec={"num_gpus": 1, "batch_size": 8})
    s.close()
    con = sqlite3.connect(tmp_path / "old.db")
    con.execute("ALTER TABLE jobs DROP COLUMN held")  # what an older release created
    con.commit()
    con.close()
    s = Store(url)
    assert s.get_job(a["id"])["held"] is False
    s.request_hold(a["id"], True)
    assert s.get_job(a["id"])["held"] is True
    s.close()


def test_states_of_older_versions_are_migrated_to_the_one_vocabulary(tmp_path: Path) -> None:
    """STARTING / RESIZING (the store's own words before) become JobPhase.RESTARTING; the job stays active."""
    import sqlite3

    from elastisched.core.types import JobPhase
    from elastisched.service.store import ACTIVE, TERMINAL

    assert set(ACTIVE) | set(TERMINAL) == {p.value for p in JobPhase}
    url = f"sqlite:///{tmp_path / 'old.db'}"
    s = Store(url)
    a = s.create_job(name="a", script="/x.py", args=[], spec={"num_gpus": 1, "batch_size": 8})
    b = s.create_job(name="b", script="/x.py", args=[], spec={"num_gpus": 1, "batch_size": 8})
    s.close()
    con = sqlite3.connect(tmp_path / "old.db")
    con.execute("UPDATE jobs SET state = 'STARTING' WHERE id = ?", (a["id"],))
    con.execute("UPDATE jobs SET state = 'RESIZING' WHERE id = ?", (b["id"],))
    con.commit()
    con.close()
    s = Store(url)
    assert [r["state"] for r in s.active_jobs()] == ["RESTARTING", "RESTARTING"]
    assert len(s.list_jobs(["STARTING"])) == 2  # a filter by an old name selects what it meant
    s.close()
