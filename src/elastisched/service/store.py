"""Durable service state in SQLAlchemy Core (SQLite by default, any SQLAlchemy URL accepted).

The service writes here *before* it acts (submission, decision, action, generation), so that after a crash
the store alone says which jobs exist, which worker generation each one should be running and which
processes (PID + start time) belong to it. One lock serialises writers: SQLite allows one writer anyway,
and the API threads and the daemon thread share a single engine.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Connection,
    String,
    bindparam,
    create_engine,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from elastisched.core.enums import GenerationState, LoanState, RequestState
from elastisched.service.tables import (
    ACTIVE,
    LEGACY_STATES,
    TERMINAL,
    events,
    generations,
    jobs,
    kv,
    loans,
    meta,
    reclaims,
)

__all__ = ["ACTIVE", "TERMINAL", "AmbiguousId", "Store"]

class AmbiguousId(LookupError):
    """A short job id prefix matches more than one job."""


def _row(r: Any) -> dict[str, Any]:
    return dict(r._mapping)


def _json_list(v: Any) -> list[Any]:
    """A JSON list column read as text (SQLite) or already decoded (drivers with a native JSON type)."""
    if isinstance(v, str):
        return [] if v == "[]" else list(json.loads(v))
    return list(v or [])


class Store:
    """All reads and writes of the service. Methods return plain dicts (rows) so callers never hold
    connections across threads."""

    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
            kwargs["poolclass"] = StaticPool  # one connection shared under our lock
        self.engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._lock = threading.RLock()
        meta.create_all(self.engine)
        self._add_missing_columns()
        with self._lock, self.engine.begin() as c:  # one vocabulary of states: rename those of older versions
            for old, new in LEGACY_STATES.items():
                c.execute(update(jobs).where(jobs.c.state == old).values(state=new))

    # Columns added after the first release: (table, column, DDL type and default). create_all never alters
    # an existing table, so a database made by an older version gets them here.
    # FALSE, not 0: PostgreSQL refuses an integer default for a boolean (SQLite >= 3.23 reads FALSE too).
    _ADDED_COLUMNS = (("jobs", "held", "BOOLEAN NOT NULL DEFAULT FALSE"), ("jobs", "owner", "VARCHAR(64)"),
                      ("generations", "token", "VARCHAR(32)"))

    def _add_missing_columns(self) -> None:
        for table, column, ddl in self._ADDED_COLUMNS:
            if column in {col["name"] for col in inspect(self.engine).get_columns(table)}:
                continue
            try:
                with self.engine.begin() as c:
                    c.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))
            except DBAPIError:
                # Another process opening the same old database may have added it first.
                if column not in {col["name"] for col in inspect(self.engine).get_columns(table)}:
                    raise

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """One atomic transaction (callers group 'persist, then act' writes in one)."""
        with self._lock, self.engine.begin() as conn:
            yield conn

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str, default: Any = None) -> Any:
        with self.tx() as c:
            r = c.execute(select(kv.c.value).where(kv.c.key == key)).first()
        return default if r is None else r[0]

    def set_meta(self, key: str, value: Any) -> None:
        with self.tx() as c:
            if c.execute(select(kv.c.key).where(kv.c.key == key)).first() is None:
                c.execute(insert(kv).values(key=key, value=value))
            else:
                c.execute(update(kv).where(kv.c.key == key).values(value=value))

    # ------------------------------------------------------------------ jobs
    def create_job(self, *, name: str | None, script: str, args: Sequence[str], spec: Mapping[str, Any],
                   now: float | None = None, owner: str | None = None) -> dict[str, Any]:
        with self.tx() as c:
            return self.insert_job(c, name=name, script=script, args=args, spec=spec, now=now, owner=owner)

    def insert_job(self, c: Connection, *, name: str | None, script: str, args: Sequence[str],
                   spec: Mapping[str, Any], now: float | None = None, owner: str | None = None) -> dict[str, Any]:
        """A new PENDING job and its `submitted` event, in the caller's transaction; the row as written (no
        read-back: columns not set are NULL)."""
        now = time.time() if now is None else now
        jid = secrets.token_hex(4)
        while c.execute(select(jobs.c.id).where(jobs.c.id == jid)).first() is not None:
            jid = secrets.token_hex(4)
        row: dict[str, Any] = {
            "id": jid, "name": name or jid, "script": script, "args": list(args), "spec": dict(spec),
            "state": "PENDING", "submit_time": now, "placement": [], "generation": 0, "restarts": 0,
            "retries": 0, "cancel_requested": False, "held": False, "owner": owner}
        seq = c.execute(insert(jobs).values(**row)).inserted_primary_key[0]
        self._event(c, now, jid, "submitted", {"spec": row["spec"], "script": script, "args": row["args"]})
        return {col.name: None for col in jobs.columns} | row | {"seq": seq}

    def get_job(self, id_or_prefix: str, owner: str | None = None) -> dict[str, Any] | None:
        """Exact id, else a unique prefix (short ids as in Docker/kubectl); with `owner`, among its jobs only."""
        mine = (jobs.c.owner == owner) if owner is not None else True
        with self.tx() as c:
            r = c.execute(select(jobs).where((jobs.c.id == id_or_prefix) & mine)).first()
            if r is not None:
                return _row(r)
            pat = id_or_prefix.replace("\\", "").replace("%", "").replace("_", "\\_") + "%"
            rows = c.execute(select(jobs).where(jobs.c.id.like(pat, escape="\\") & mine).limit(2)).all()
        if len(rows) > 1:
            raise AmbiguousId(f"job id prefix {id_or_prefix!r} matches more than one job")
        return _row(rows[0]) if rows else None

    def list_jobs(self, states: Sequence[str] | None = None, limit: int | None = None,
                  owner: str | None = None) -> list[dict[str, Any]]:
        q = select(jobs).order_by(jobs.c.seq)
        if owner is not None:
            q = q.where(jobs.c.owner == owner)
        if states:  # older names (STARTING, RESIZING) still select what they meant
            q = q.where(jobs.c.state.in_(list({LEGACY_STATES.get(x, x) for x in states})))
        if limit:
            q = q.limit(limit)
        with self.tx() as c:
            return [_row(r) for r in c.execute(q)]

    def active_jobs(self) -> list[dict[str, Any]]:
        return self.list_jobs(ACTIVE)

    def active_light(self) -> list[dict[str, Any]]:
        """Active jobs without the large columns (spec, args): what one engine round reads.

        Every round reads every active job, so this is the service's hot read: plain tuples are fetched under
        the lock (placement as raw text, no per-row JSON processing), rows are built after releasing it, and
        the common empty placement of a queued job skips the JSON decoder."""
        names = ("id", "name", "submit_time", "placement", "batch_size", "resize_to", "start_time", "restarts",
                 "cancel_requested", "held")
        q = (select(jobs.c.id, jobs.c.name, jobs.c.submit_time, type_coerce(jobs.c.placement, String),
                    jobs.c.batch_size, jobs.c.resize_to, jobs.c.start_time, jobs.c.restarts, jobs.c.cancel_requested,
                    jobs.c.held)
             .where(jobs.c.state.in_(ACTIVE)).order_by(jobs.c.seq))
        with self.tx() as c:
            raw = c.execute(q).all()
        out = []
        for r in raw:
            d = dict(zip(names, r, strict=True))
            d["placement"] = _json_list(d["placement"])
            out.append(d)
        return out

    def specs(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self.tx() as c:
            return {r[0]: r[1] for r in c.execute(select(jobs.c.id, jobs.c.spec).where(jobs.c.id.in_(list(ids))))}

    def requests(self) -> list[dict[str, Any]]:
        """Active jobs with a pending cancel or an admin size (indexed scan, cheap on a long queue)."""
        q = select(jobs).where(jobs.c.state.in_(ACTIVE) & (jobs.c.cancel_requested | jobs.c.resize_to.is_not(None)
                                                            | jobs.c.held))
        with self.tx() as c:
            return [_row(r) for r in c.execute(q.order_by(jobs.c.seq))]

    def count_by_state(self) -> dict[str, int]:
        with self.tx() as c:
            return {str(k): int(n) for k, n in c.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))}

    def count_jobs(self) -> int:
        with self.tx() as c:
            return int(c.execute(select(func.count()).select_from(jobs)).scalar_one())

    def update_job(self, job_id: str, conn: Connection | None = None, **fields: Any) -> None:
        if conn is not None:
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(**fields))
            return
        with self.tx() as c:
            c.execute(update(jobs).where(jobs.c.id == job_id).values(**fields))

    def set_reasons(self, reasons: Mapping[str, str | None], conn: Connection) -> None:
        """Set the `reason` of many jobs in one statement (executemany)."""
        q = update(jobs).where(jobs.c.id == bindparam("jid")).values(reason=bindparam("why"))
        conn.execute(q, [{"jid": j, "why": w} for j, w in reasons.items()])

    def request_cancel(self, job_id: str) -> None:
        with self.tx() as c:
            c.execute(update(jobs).where(jobs.c.id == job_id).values(cancel_requested=True))
            self._event(c, time.time(), job_id, "cancel_requested", {})

    def request_hold(self, job_id: str, held: bool) -> None:
        """Suspend (held) or resume a job: the engine loop checkpoints and stops it, or queues it again."""
        with self.tx() as c:
            c.execute(update(jobs).where(jobs.c.id == job_id).values(held=held))
            self._event(c, time.time(), job_id, "suspend_requested" if held else "resume_requested", {})

    def request_resize(self, job_id: str, gpus: int) -> None:
        with self.tx() as c:
            c.execute(update(jobs).where(jobs.c.id == job_id).values(resize_to=gpus))
            self._event(c, time.time(), job_id, "resize_requested", {"gpus": gpus})

    # ------------------------------------------------------------------ events
    @staticmethod
    def _event(c: Connection, t: float, job_id: str | None, kind: str, data: Mapping[str, Any]) -> None:
        c.execute(insert(events).values(time=t, job_id=job_id, kind=kind, data=dict(data)))

    def add_event(self, job_id: str | None, kind: str, data: Mapping[str, Any] | None = None,
                  conn: Connection | None = None) -> None:
        if conn is not None:
            self._event(conn, time.time(), job_id, kind, data or {})
            return
        with self.tx() as c:
            self._event(c, time.time(), job_id, kind, data or {})

    def events(self, job_id: str | None = None, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
        q = select(events).order_by(events.c.seq)
        if job_id is not None:
            q = q.where(events.c.job_id == job_id)
        if kinds:
            q = q.where(events.c.kind.in_(list(kinds)))
        with self.tx() as c:
            return [_row(r) for r in c.execute(q)]

    # ------------------------------------------------------------------ generations
    def add_generation(self, conn: Connection, job_id: str, generation: int, **fields: Any) -> None:
        conn.execute(insert(generations).values(job_id=job_id, generation=generation, planned_at=time.time(),
                                                pids=[], state=GenerationState.PLANNED, **fields))

    def update_generation(self, job_id: str, generation: int | None, conn: Connection | None = None,
                          **fields: Any) -> None:
        """Update one generation, or (generation None) every live (not EXITED) generation of the job."""
        where = generations.c.job_id == job_id
        live = generations.c.state != GenerationState.EXITED
        where &= (generations.c.generation == generation) if generation is not None else live
        if conn is not None:
            conn.execute(update(generations).where(where).values(**fields))
            return
        with self.tx() as c:
            c.execute(update(generations).where(where).values(**fields))

    def generations(self, job_id: str | None = None, live: bool = False) -> list[dict[str, Any]]:
        q = select(generations).order_by(generations.c.planned_at, generations.c.generation)
        if job_id is not None:
            q = q.where(generations.c.job_id == job_id)
        if live:
            q = q.where(generations.c.state != GenerationState.EXITED)
        with self.tx() as c:
            return [_row(r) for r in c.execute(q)]

    # ------------------------------------------------------------------ loans and reclaims
    def add_loans(self, nodes: Sequence[tuple[str, str, int]], conn: Connection | None = None
                  ) -> list[dict[str, Any]]:
        """Lend `nodes` (id, GPU type, GPUs) now, each with its `loan_offered` event; the rows as written."""
        if conn is None:
            with self.tx() as c:
                return self.add_loans(nodes, c)
        now = time.time()
        for node_id, gpu_type, n in nodes:
            conn.execute(insert(loans).values(node_id=node_id, gpu_type=gpu_type, num_gpus=n, state=LoanState.LOANED,
                                              offered_at=now))
            self._event(conn, now, None, "loan_offered", {"node": node_id, "gpus": n, "gpu_type": gpu_type})
        ids = [n for n, _, _ in nodes]
        return [_row(r) for r in conn.execute(select(loans).where(loans.c.node_id.in_(ids)))]

    def list_loans(self, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        q = select(loans).order_by(loans.c.offered_at, loans.c.node_id)
        if states:
            q = q.where(loans.c.state.in_(list(states)))
        with self.tx() as c:
            return [_row(r) for r in c.execute(q)]

    def loan_ids(self) -> set[str]:
        with self.tx() as c:
            return {r[0] for r in c.execute(select(loans.c.node_id))}

    def update_loan(self, node_id: str, conn: Connection | None = None, **fields: Any) -> None:
        q = update(loans).where(loans.c.node_id == node_id).values(**fields)
        if conn is not None:
            conn.execute(q)
            return
        with self.tx() as c:
            c.execute(q)

    def add_reclaim(self, count: int, deadline: float) -> dict[str, Any]:
        now = time.time()
        with self.tx() as c:
            rid = c.execute(insert(reclaims).values(count=count, deadline=deadline, state=RequestState.PENDING,
                                                    nodes=[],
                                                    created_at=now)).inserted_primary_key[0]
            self._event(c, now, None, "reclaim_requested", {"reclaim": rid, "count": count, "deadline": deadline})
            return _row(c.execute(select(reclaims).where(reclaims.c.id == rid)).one())

    def list_reclaims(self, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        q = select(reclaims).order_by(reclaims.c.id)
        if states:
            q = q.where(reclaims.c.state.in_(list(states)))
        with self.tx() as c:
            return [_row(r) for r in c.execute(q)]

    def update_reclaim(self, rid: int, conn: Connection | None = None, **fields: Any) -> None:
        q = update(reclaims).where(reclaims.c.id == rid).values(**fields)
        if conn is not None:
            conn.execute(q)
            return
        with self.tx() as c:
            c.execute(q)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """WAL lets readers (CLI, a second process) proceed while the service writes; NORMAL sync is
    durable across a process crash (kill -9), which is the failure the service must survive."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
