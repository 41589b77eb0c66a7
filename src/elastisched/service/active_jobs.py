"""The active jobs as the engine loop reads them every round, kept in memory beside the database.

Every round reads every active job (`Store.active_light`) and every step the pending user requests
(`Store.requests`): from the database that is a scan of the active rows, O(all active jobs) of I/O and decoding
per round however few changed (about 0.1 s at 10,000 queued jobs on SQLite). The service's one process writes
every job row through its `Store` (the API its submissions and requests, the daemon the rest), so the `Store`
keeps this mirror exact instead: it loads it once under the writers' lock, and each write transaction stages
the changes it makes to job rows, applied when (and only when) that transaction commits. A round then reads
the light rows with no query, and a row that did not change is the same dict as last round. A process that
writes job rows behind the service's back (none does: the CLI's token commands write `tokens` only) would not
be seen until the service restarts.

It also counts each owner's queued jobs (pending or suspended), so a submission checks the per-user limit
(`service/intake.py`) without a query inside the writers' lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from elastisched.core.types import JobPhase
from elastisched.service.tables import TERMINAL

# The columns of a job that change while it is active (what the engine loop reads each round, and what
# `GET /v1/jobs` shows of an active job beside the columns fixed at submission, service/job_listing.py); its
# name and submission time besides. A column that changes while a job is active belongs here.
LIGHT = ("id", "name", "submit_time", "placement", "batch_size", "resize_to", "start_time", "restarts",
         "cancel_requested", "held", "state", "generation", "retries", "reason", "message", "end_time", "owner")
QUEUED = (JobPhase.PENDING.value, JobPhase.SUSPENDED.value)  # what a user's limit of queued jobs counts

Change = tuple[str, Mapping[str, Any]]  # (job id, fields written)


def _light(fields: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in fields.items() if k in LIGHT}
    if "placement" in out:  # a copy, as the database would give it back
        out["placement"] = [list(p) for p in out["placement"] or ()]
    return out


class ActiveMirror:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] | None = None  # id -> light row, in submission order; None: not loaded
        self.queued: dict[str | None, int] = {}  # owner -> its jobs in a QUEUED state

    def load(self, rows: Iterable[dict[str, Any]]) -> None:
        self.rows = {r["id"]: dict(r) for r in rows}
        self.queued = {}
        for r in self.rows.values():
            self._count(r, 1)

    def _count(self, row: dict[str, Any], sign: int) -> None:
        if row["state"] in QUEUED:
            self.queued[row["owner"]] = self.queued.get(row["owner"], 0) + sign

    def apply(self, changes: Iterable[Change]) -> None:
        """Changes of one committed transaction (called under the writers' lock): a new job (it has a
        `submit_time`) joins; a job that reaches a final state leaves; a job this mirror does not hold made
        active again (nothing in the service does that) makes it read the table afresh on its next use. A
        changed row is a new dict, never changed in place, so a reader holding the old one sees it whole."""
        if self.rows is None:
            return
        for job_id, fields in changes:
            row = self.rows.get(job_id)
            if row is None:
                if "submit_time" in fields and fields.get("state") not in TERMINAL:
                    self.rows[job_id] = new = {k: None for k in LIGHT} | _light(fields)
                    self._count(new, 1)
                elif fields.get("state") not in (None, *TERMINAL):
                    self.rows = None  # a job came back from a final state (the service never does): read again
                    return
                continue
            new = row | _light(fields)
            self._count(row, -1)
            if new["state"] in TERMINAL:
                del self.rows[job_id]
            else:
                self.rows[job_id] = new
                self._count(new, 1)

    def light(self) -> list[dict[str, Any]] | None:
        """The light rows now, in submission order (None: not loaded). Read-only: a row is replaced, never
        changed, when its job changes (so an unchanged job is the very same dict from one round to the next)."""
        rows = self.rows
        return None if rows is None else list(rows.values())  # one C-level copy: atomic beside a writer's `apply`

    def get(self, job_id: str) -> dict[str, Any] | bool | None:
        """The light row of an active job (read-only), None for a job that is not active, False: not loaded."""
        rows = self.rows
        return False if rows is None else rows.get(job_id)
