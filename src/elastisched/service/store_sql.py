"""SQL helpers of the `Store`: rows read as plain dicts without SQLAlchemy's per-row machinery, and SQLite's
connection settings."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import JSON, Select, String, Table, bindparam, insert, select, type_coerce

from elastisched.service.tables import events, generations, jobs


class Rows:
    """A table's rows as plain dicts, without SQLAlchemy's per-row mapping and JSON processing: columns are
    fetched as tuples, JSON columns as text (decoded here, the common `[]` without the decoder; a driver with a
    native JSON type hands them over decoded). A third of the cost of `dict(row._mapping)` on a listing."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.names = tuple(c.name for c in table.columns)
        self.columns = [type_coerce(c, String) if isinstance(c.type, JSON) else c for c in table.columns]
        self.json = tuple(i for i, c in enumerate(table.columns) if isinstance(c.type, JSON))

    def select(self) -> Select[Any]:
        return select(*self.columns)

    def rows(self, raw: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
        names, js, out = self.names, self.json, []
        for r in raw:
            vals = list(r)
            for i in js:
                v = vals[i]
                if isinstance(v, str):
                    vals[i] = [] if v == "[]" else json.loads(v)
            out.append(dict(zip(names, vals, strict=True)))
        return out


JOBS, GENERATIONS, EVENTS = Rows(jobs), Rows(generations), Rows(events)

# The statements of the API's hot paths, built once with bound parameters: SQLAlchemy keeps a statement's cache
# key on it and finds its compiled form by that key, where a statement built per call pays its construction,
# its cache key and the lookup every time (a tenth of a request's CPU under load).
JOB_BY_ID = JOBS.select().where(jobs.c.id == bindparam("jid"))
JOB_BY_ID_OF = JOB_BY_ID.where(jobs.c.owner == bindparam("owner"))
JOB_BY_PREFIX = JOBS.select().where(jobs.c.id.like(bindparam("pat"), escape="\\")).limit(2)
JOB_BY_PREFIX_OF = JOB_BY_PREFIX.where(jobs.c.owner == bindparam("owner"))
JOB_EXISTS = select(jobs.c.id).where(jobs.c.id == bindparam("jid"))
STATES_OF = select(jobs.c.id, jobs.c.state).where(jobs.c.owner == bindparam("owner")).order_by(jobs.c.seq)
GENERATIONS_OF = (GENERATIONS.select().where(generations.c.job_id == bindparam("jid"))
                  .order_by(generations.c.planned_at, generations.c.generation))
EVENTS_OF = EVENTS.select().where(events.c.job_id == bindparam("jid")).order_by(events.c.seq)
INSERT_JOB, INSERT_EVENT = insert(jobs), insert(events)


def json_list(v: Any) -> list[Any]:
    """A JSON list column read as text (SQLite) or already decoded (drivers with a native JSON type)."""
    if isinstance(v, str):
        return [] if v == "[]" else list(json.loads(v))
    return list(v or [])


def in_memory(url: str) -> bool:
    """A SQLite URL of an in-memory database (`sqlite://`, `sqlite:///:memory:`, `?mode=memory`)."""
    path = url.split("://", 1)[1].lstrip("/") if "://" in url else ""
    return path.split("?", 1)[0] in ("", ":memory:") or "mode=memory" in url


def sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """WAL lets readers (CLI, a second process) proceed while the service writes; NORMAL sync is
    durable across a process crash (kill -9), which is the failure the service must survive."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
