"""Durable service state in SQLAlchemy Core (SQLite by default, any SQLAlchemy URL accepted).

The service writes here *before* it acts (submission, decision, action, generation), so that after a crash
the store alone says which jobs exist, which worker generation each one should be running and which
processes (PID + start time) belong to it. One lock serialises writers: SQLite allows one writer anyway,
and the API threads and the daemon thread share a single engine.
"""

from __future__ import annotations

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

from elastisched.core.enums import GenerationState
from elastisched.service import store_sql as sql
from elastisched.service.active_jobs import LIGHT, ActiveMirror, Change
from elastisched.service.store_loans import LoanStore
from elastisched.service.store_sql import EVENTS, GENERATIONS, JOBS, in_memory, json_list, sqlite_pragmas
from elastisched.service.tables import (
    ACTIVE,
    LEGACY_STATES,
    TERMINAL,
    events,
    generations,
    jobs,
    kv,
    meta,
)

__all__ = ["ACTIVE", "TERMINAL", "AmbiguousId", "Store"]

# Connections kept open for reads (API threads, the daemon) and the most opened beside them at a peak.
POOL_SIZE, POOL_OVERFLOW = 16, 48  # anyio's thread pool runs up to 40 requests at once

class AmbiguousId(LookupError):
    """A short job id prefix matches more than one job."""


def _row(r: Any) -> dict[str, Any]:
    return dict(r._mapping)


class Store(LoanStore):
    """All reads and writes of the service. Methods return plain dicts (rows) so callers never hold
    connections across threads."""

    def __init__(self, url: str) -> None:
        self.url = url
        kwargs: dict[str, Any] = {}
        # An in-memory SQLite database lives in its one connection, which every thread shares under our lock;
        # any other database gets a pool, so reads need no lock (SQLite's WAL lets them run beside the writer).
        self.shared = url.startswith("sqlite") and in_memory(url)
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        if self.shared:
            kwargs["poolclass"] = StaticPool
        else:
            kwargs |= {"pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW, "pool_pre_ping": False}
        self.engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", sqlite_pragmas)
        self._lock = threading.RLock()
        self.mirror = ActiveMirror()  # the active jobs' light rows, for the engine loop (service/active_jobs.py)
        self._staged: dict[int, list[Change]] = {}  # job-row writes of each open write transaction
        self._local = threading.local()  # the write transaction open on this thread, if any
        meta.create_all(self.engine)
        self._add_missing_columns()
        for table in meta.sorted_tables:  # create_all never adds an index to a table that exists already
            for index in table.indexes:
                index.create(self.engine, checkfirst=True)
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
        """One atomic write transaction (callers group 'persist, then act' writes in one); opened inside another
        on the same thread, it is that one. Writers take turns under one lock: SQLite allows one writer anyway,
        and so no writer ever waits on SQLite's busy timeout."""
        outer = getattr(self._local, "conn", None)
        if outer is not None:  # already inside one on this thread: its writes join it (one commit)
            yield outer
            return
        with self._lock:
            staged: list[Change] = []
            with self.engine.begin() as conn:
                self._staged[id(conn)], self._local.conn = staged, conn
                try:
                    yield conn
                finally:
                    self._local.conn = None
                    del self._staged[id(conn)]
            self.mirror.apply(staged)  # committed (a failed commit raised above): the mirror follows
            self._loans_committed(conn)

    def _stage(self, conn: Connection, job_id: str, fields: Mapping[str, Any]) -> None:
        """A write to a job row in `conn`'s transaction, for the mirror of the active jobs once it commits."""
        self._staged[id(conn)].append((job_id, fields))  # a KeyError: a job row written outside `tx`

    def _in_tx(self) -> bool:
        return getattr(self._local, "conn", None) is not None

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads, outside the writers' lock (but for a shared in-memory database): an API
        request never waits for a round's writes, nor a round for a request's reads. Inside a write transaction
        on this thread, that transaction's connection (its own writes are seen)."""
        outer = getattr(self._local, "conn", None)
        if outer is not None:  # inside a write transaction on this thread: read what it wrote
            yield outer
        elif self.shared:
            with self._lock, self.engine.connect() as conn:
                yield conn
        else:
            with self.engine.connect() as conn:
                yield conn

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str, default: Any = None) -> Any:
        with self.read() as c:
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
        while c.execute(sql.JOB_EXISTS, {"jid": jid}).first() is not None:
            jid = secrets.token_hex(4)
        row: dict[str, Any] = {
            "id": jid, "name": name or jid, "script": script, "args": list(args), "spec": dict(spec),
            "state": "PENDING", "submit_time": now, "placement": [], "generation": 0, "restarts": 0,
            "retries": 0, "cancel_requested": False, "held": False, "owner": owner}
        seq = c.execute(sql.INSERT_JOB, row).inserted_primary_key[0]
        self._stage(c, jid, row)
        self._event(c, now, jid, "submitted", {"spec": row["spec"], "script": script, "args": row["args"]})
        return {col.name: None for col in jobs.columns} | row | {"seq": seq}

    def get_job(self, id_or_prefix: str, owner: str | None = None) -> dict[str, Any] | None:
        """Exact id, else a unique prefix (short ids as in Docker/kubectl); with `owner`, among its jobs only."""
        with self.read() as c:
            return self._get_job(c, id_or_prefix, owner)

    @staticmethod
    def _get_job(c: Connection, id_or_prefix: str, owner: str | None) -> dict[str, Any] | None:
        mine = {} if owner is None else {"owner": owner}
        rows = JOBS.rows(c.execute(sql.JOB_BY_ID_OF if mine else sql.JOB_BY_ID, {"jid": id_or_prefix} | mine))
        if rows:
            return rows[0]
        pat = id_or_prefix.replace("\\", "").replace("%", "").replace("_", "\\_") + "%"
        rows = JOBS.rows(c.execute(sql.JOB_BY_PREFIX_OF if mine else sql.JOB_BY_PREFIX, {"pat": pat} | mine))
        if len(rows) > 1:
            raise AmbiguousId(f"job id prefix {id_or_prefix!r} matches more than one job")
        return rows[0] if rows else None

    def job_detail(self, id_or_prefix: str, owner: str | None = None
                   ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]] | None:
        """A job with its generations and events (`describe`), read on one connection."""
        with self.read() as c:
            row = self._get_job(c, id_or_prefix, owner)
            if row is None:
                return None
            gens = GENERATIONS.rows(c.execute(sql.GENERATIONS_OF, {"jid": row["id"]}))
            return row, gens, EVENTS.rows(c.execute(sql.EVENTS_OF, {"jid": row["id"]}))

    def list_jobs(self, states: Sequence[str] | None = None, limit: int | None = None,
                  owner: str | None = None) -> list[dict[str, Any]]:
        q = JOBS.select().order_by(jobs.c.seq)
        if owner is not None:
            q = q.where(jobs.c.owner == owner)
        if states:  # older names (STARTING, RESIZING) still select what they meant
            q = q.where(jobs.c.state.in_(list({LEGACY_STATES.get(x, x) for x in states})))
        if limit:
            q = q.limit(limit)
        with self.read() as c:
            return JOBS.rows(c.execute(q))

    def list_job_states(self, states: Sequence[str] | None = None, limit: int | None = None,
                        owner: str | None = None) -> list[tuple[str, str]]:
        """(id, state) of the jobs `list_jobs` would return, in the same order."""
        if owner is not None and not states and not limit:  # what a user's `ls` asks
            with self.read() as c:
                return [(str(i), str(st)) for i, st in c.execute(sql.STATES_OF, {"owner": owner}).all()]
        q = select(jobs.c.id, jobs.c.state).order_by(jobs.c.seq)
        if owner is not None:
            q = q.where(jobs.c.owner == owner)
        if states:
            q = q.where(jobs.c.state.in_(list({LEGACY_STATES.get(x, x) for x in states})))
        if limit:
            q = q.limit(limit)
        with self.read() as c:
            return [(str(i), str(s)) for i, s in c.execute(q)]

    def active_jobs(self) -> list[dict[str, Any]]:
        return self.list_jobs(ACTIVE)

    def active_light(self) -> list[dict[str, Any]]:
        """Active jobs without the large columns (spec, args): what one engine round reads, from the mirror
        (`service/active_jobs.py`, read-only rows), loaded from the database on first use."""
        while True:
            self._load_mirror()
            rows = self.mirror.light()
            if rows is not None:
                return rows

    def active_row(self, job_id: str) -> dict[str, Any] | None:
        """The light row of one active job (read-only; from the mirror), None if the job is not active."""
        while True:
            self._load_mirror()
            row = self.mirror.get(job_id)
            if row is not False:
                return row or None

    def _load_mirror(self) -> None:
        if self.mirror.rows is not None:
            return
        cols = [type_coerce(jobs.c.placement, String) if n == "placement" else jobs.c[n] for n in LIGHT]
        q = select(*cols).where(jobs.c.state.in_(ACTIVE)).order_by(jobs.c.seq)
        with self._lock:  # no write may commit between this read and the mirror taking over
            if self.mirror.rows is not None:
                return
            with self.read() as c:
                raw = c.execute(q).all()
            rows = []
            for r in raw:
                d = dict(zip(LIGHT, r, strict=True))
                d["placement"] = json_list(d["placement"])
                rows.append(d)
            self.mirror.load(rows)

    def jobs_by_id(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Whole rows of the jobs `ids` (one query)."""
        with self.read() as c:
            return {r["id"]: r for r in JOBS.rows(c.execute(JOBS.select().where(jobs.c.id.in_(list(ids)))))}

    def specs(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self.read() as c:
            return {r[0]: r[1] for r in c.execute(select(jobs.c.id, jobs.c.spec).where(jobs.c.id.in_(list(ids))))}

    def queued_of(self, owner: str | None) -> int:
        """`owner`'s jobs queued now (pending or suspended), from the mirror; exact under the writers' lock."""
        self._load_mirror()
        return self.mirror.queued.get(owner, 0)

    def requests(self) -> list[dict[str, Any]]:
        """Active jobs with a pending cancel, a hold or an admin size (read-only light rows, from the mirror)."""
        return [r for r in self.active_light() if r["cancel_requested"] or r["held"] or r["resize_to"] is not None]

    def count_by_state(self) -> dict[str, int]:
        with self.read() as c:
            return {str(k): int(n) for k, n in c.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))}

    def count_jobs(self) -> int:
        with self.read() as c:
            return int(c.execute(select(func.count()).select_from(jobs)).scalar_one())

    def update_job(self, job_id: str, conn: Connection | None = None, **fields: Any) -> None:
        if conn is None:
            with self.tx() as c:
                return self.update_job(job_id, c, **fields)
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(**fields))
        self._stage(conn, job_id, fields)
        return None

    def set_reasons(self, reasons: Mapping[str, str | None], conn: Connection) -> None:
        """Set the `reason` of many jobs in one statement (executemany)."""
        q = update(jobs).where(jobs.c.id == bindparam("jid")).values(reason=bindparam("why"))
        conn.execute(q, [{"jid": j, "why": w} for j, w in reasons.items()])
        for j, w in reasons.items():
            self._stage(conn, j, {"reason": w})

    def request_cancel(self, job_id: str) -> None:
        with self.tx() as c:
            c.execute(update(jobs).where(jobs.c.id == job_id).values(cancel_requested=True))
            self._stage(c, job_id, {"cancel_requested": True})
            self._event(c, time.time(), job_id, "cancel_requested", {})

    def request_hold(self, job_id: str, held: bool) -> None:
        """Suspend (held) or resume a job: the engine loop checkpoints and stops it, or queues it again."""
        with self.tx() as c:
            c.execute(update(jobs).where(jobs.c.id == job_id).values(held=held))
            self._stage(c, job_id, {"held": held})
            self._event(c, time.time(), job_id, "suspend_requested" if held else "resume_requested", {})

    def request_resize(self, job_id: str, gpus: int) -> None:
        with self.tx() as c:
            c.execute(update(jobs).where(jobs.c.id == job_id).values(resize_to=gpus))
            self._stage(c, job_id, {"resize_to": gpus})
            self._event(c, time.time(), job_id, "resize_requested", {"gpus": gpus})

    # ------------------------------------------------------------------ events
    @staticmethod
    def _event(c: Connection, t: float, job_id: str | None, kind: str, data: Mapping[str, Any]) -> None:
        c.execute(sql.INSERT_EVENT, {"time": t, "job_id": job_id, "kind": kind, "data": dict(data)})

    def add_event(self, job_id: str | None, kind: str, data: Mapping[str, Any] | None = None,
                  conn: Connection | None = None) -> None:
        if conn is not None:
            self._event(conn, time.time(), job_id, kind, data or {})
            return
        with self.tx() as c:
            self._event(c, time.time(), job_id, kind, data or {})

    def events(self, job_id: str | None = None, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
        q = EVENTS.select().order_by(events.c.seq)
        if job_id is not None:
            q = q.where(events.c.job_id == job_id)
        if kinds:
            q = q.where(events.c.kind.in_(list(kinds)))
        with self.read() as c:
            return EVENTS.rows(c.execute(q))

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
        q = GENERATIONS.select().order_by(generations.c.planned_at, generations.c.generation)
        if job_id is not None:
            q = q.where(generations.c.job_id == job_id)
        if live:
            q = q.where(generations.c.state != GenerationState.EXITED)
        with self.read() as c:
            return GENERATIONS.rows(c.execute(q))

