"""The service's tables (SQLAlchemy Core) and its one vocabulary of job states (`core.types.JobPhase`)."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Float, Index, Integer, MetaData, String, Table

from elastisched.core.types import JobPhase

TERMINAL = (JobPhase.SUCCEEDED.value, JobPhase.FAILED.value, JobPhase.CANCELLED.value)
ACTIVE = (JobPhase.PENDING.value, JobPhase.RESTARTING.value, JobPhase.RUNNING.value, JobPhase.SUSPENDED.value)
# states written by versions before the one vocabulary, and what they are now (migrated when a store opens)
LEGACY_STATES = {"STARTING": JobPhase.RESTARTING.value, "RESIZING": JobPhase.RESTARTING.value}

meta = MetaData()

jobs = Table(
    "jobs", meta,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(32), unique=True, nullable=False),
    Column("name", String(200), nullable=False),
    Column("script", String(4096), nullable=False),
    Column("args", JSON, nullable=False),
    Column("spec", JSON, nullable=False),  # num_gpus, min_gpus, max_gpus, batch_size, gpu_types, elastic, ...
    Column("state", String(16), nullable=False, index=True),
    Column("reason", String(200)),
    Column("submit_time", Float, nullable=False),
    Column("start_time", Float),
    Column("end_time", Float),
    Column("placement", JSON, nullable=False),  # [[node, gpus], ...] of the running generation
    Column("batch_size", Integer),
    Column("generation", Integer, nullable=False, default=0),
    Column("restarts", Integer, nullable=False, default=0),
    Column("retries", Integer, nullable=False, default=0),
    Column("resize_to", Integer),  # admin override (API resize), pins the job's size
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("held", Boolean, nullable=False, default=False),  # suspended by a user until resumed
    Column("message", String(2000)),
    Column("owner", String(64), index=True),  # the submitting user (service/auth.py); NULL = admin only
)

generations = Table(
    "generations", meta,
    Column("job_id", String(32), primary_key=True),
    Column("generation", Integer, primary_key=True),
    Column("cause", String(16), nullable=False),  # launch | resize | retry | resume
    Column("placement", JSON, nullable=False),
    Column("batch_size", Integer),
    Column("port", Integer),
    Column("state", String(16), nullable=False),  # PLANNED | RUNNING | STOPPING | EXITED
    Column("pids", JSON, nullable=False),  # [[pid, start_ticks], ...] of the per-rank wrappers
    Column("devices", JSON),  # CUDA device index per rank (GPU nodes), else null
    Column("exit_codes", JSON),
    Column("outcome", String(16)),  # backends.base.OUTCOMES
    Column("token", String(32)),  # launch token in every worker's environment (found again after a crash)
    Column("planned_at", Float, nullable=False),
    Column("started_at", Float),
    Column("ended_at", Float),
)

events = Table(
    "events", meta,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("time", Float, nullable=False),
    Column("job_id", String(32), index=True),
    Column("kind", String(32), nullable=False),
    Column("data", JSON, nullable=False),
    # `/v1/scheduler` counts the decisions and finds the last one: from the index, not a scan of every event
    Index("ix_events_kind_time", "kind", "time"),
)

loans = Table(
    "loans", meta,
    Column("node_id", String(64), primary_key=True),
    Column("gpu_type", String(32), nullable=False),
    Column("num_gpus", Integer, nullable=False),
    Column("state", String(16), nullable=False),  # LOANED | RECLAIMING | RETURNED
    Column("offered_at", Float, nullable=False),
    Column("reclaim_id", Integer),
    Column("returned_at", Float),
)

reclaims = Table(
    "reclaims", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("count", Integer, nullable=False),
    Column("deadline", Float, nullable=False),
    Column("state", String(16), nullable=False),  # PENDING | VACATING | DONE
    Column("nodes", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("done_at", Float),
)

# Loan offers the API recorded for the daemon to apply (it alone writes `loans`): `nodes` to lend anew
# ([[node_id, gpu_type, gpus], ...]) and `again`, lent before and returned since, to lend once more.
loan_offers = Table(
    "loan_offers", meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("nodes", JSON, nullable=False),
    Column("again", JSON, nullable=False),
    Column("state", String(16), nullable=False, index=True),  # PENDING | DONE
    Column("created_at", Float, nullable=False),
    Column("done_at", Float),
)

# Submissions made with an `Idempotency-Key` (service/intake.py): a retry with the same key and body gets the
# job the first one created, across restarts; `digest` is sha256 of the request as validated.
idempotency_keys = Table(
    "idempotency_keys", meta,
    Column("owner", String(64), primary_key=True),  # "" for a job without an owner
    Column("key", String(255), primary_key=True),
    Column("digest", String(64), nullable=False),
    Column("job_id", String(32), nullable=False),
    Column("created_at", Float, nullable=False),
)

kv = Table(
    "meta", meta,
    Column("key", String(64), primary_key=True),
    Column("value", JSON),
)
