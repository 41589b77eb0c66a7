"""The active jobs as the engine loop reads them every round, kept in memory beside the database.

Every round reads every active job (`Store.active_light`) and every step the pending user requests
(`Store.requests`): from the database that is a scan of the active rows, O(all active jobs) of I/O and decoding
per round however few changed (about 0.1 s at 10,000 queued jobs on SQLite). The service's one process writes
every job row through its `Store` (the API its submissions and requests, the daemon the rest), so the `Store`
keeps this mirror exact instead: it loads it once under the writers' lock, and each write transaction stages
the changes it makes to job rows, applied when (and only when) that transaction commits. A round then costs
a copy of the light rows, with no query. A process that writes job rows behind the service's back (none
does: the CLI's token commands write `tokens` only) would not be seen until the service restarts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from elastisched.service.tables import TERMINAL

# the columns of a job the engine loop reads each round (the spec and arguments are read once per job)
LIGHT = ("id", "name", "submit_time", "placement", "batch_size", "resize_to", "start_time", "restarts",
         "cancel_requested", "held", "state", "generation")

Change = tuple[str, Mapping[str, Any]]  # (job id, fields written)


def _light(fields: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in fields.items() if k in LIGHT}
    if "placement" in out:  # a copy, as the database would give it back
        out["placement"] = [list(p) for p in out["placement"] or ()]
    return out


class ActiveMirror:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] | None = None  # id -> light row, in submission order; None: not loaded

    def load(self, rows: Iterable[dict[str, Any]]) -> None:
        self.rows = {r["id"]: dict(r) for r in rows}

    def apply(self, changes: Iterable[Change]) -> None:
        """Changes of one committed transaction: a new job (it has a `submit_time`) joins; a job that reaches
        a final state leaves."""
        if self.rows is None:
            return
        for job_id, fields in changes:
            row = self.rows.get(job_id)
            if row is None:
                if "submit_time" in fields and fields.get("state") not in TERMINAL:
                    self.rows[job_id] = {k: None for k in LIGHT} | _light(fields)
                continue
            row.update(_light(fields))
            if row["state"] in TERMINAL:
                del self.rows[job_id]

    def light(self) -> list[dict[str, Any]]:
        """Copies of the light rows (a caller may keep or change them)."""
        assert self.rows is not None
        return [dict(r) for r in self.rows.values()]

    def requests(self) -> list[dict[str, Any]]:
        """Active jobs with a pending cancel, a hold or an admin size."""
        assert self.rows is not None
        return [dict(r) for r in self.rows.values() if r["cancel_requested"] or r["held"] or r["resize_to"] is not None]
