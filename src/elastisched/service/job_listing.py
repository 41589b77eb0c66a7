"""`GET /v1/jobs` at scale, without reading, converting and encoding every row at every poll.

A listing reads the ids and states of the jobs it shows (one narrow query) and assembles the answer from
encoded pieces: an ended job's row never changes again (the daemon writes a job's final state, end time and
message together, and nothing after), so its JSON is encoded once and kept (bounded, least recently listed
dropped first); an active job's JSON is its columns fixed at submission (kept once read) with its changing
columns from the store's mirror of the active jobs (`service/active_jobs.py`), re-encoded only when the
mirror's row for it is a new one. Only jobs never listed before cost a read of their whole row. A job whose
state moved between the two reads is shown as it is now, and left out if a `state` filter no longer holds.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from elastisched.service.active_jobs import LIGHT
from elastisched.service.store import TERMINAL, Store
from elastisched.service.tables import LEGACY_STATES

MAX_KEPT = 100_000  # encoded ended jobs kept (a few hundred bytes each)


def encode(obj: Any) -> bytes:
    """JSON as Starlette's `JSONResponse` renders it."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


class Listing:
    def __init__(self, store: Store, to_json: Callable[[dict[str, Any]], dict[str, Any]],
                 max_kept: int = MAX_KEPT) -> None:
        self.store = store
        self.to_json = to_json  # a row as the API shows it (`routes.context.job_json`)
        self.max_kept = max_kept
        self._ended: OrderedDict[str, bytes] = OrderedDict()
        self._fixed: dict[str, dict[str, Any]] = {}  # active job -> its columns fixed at submission
        self._active: dict[str, tuple[dict[str, Any], bytes]] = {}  # active job -> (mirror row, its JSON)
        self._lock = threading.Lock()

    def body(self, states: Sequence[str] | None, limit: int | None, owner: str | None) -> bytes:
        """The JSON array of the listing (submission order), as `GET /v1/jobs` answers it."""
        ids = self.store.list_job_states(states, limit, owner)
        wanted = None if not states else {LEGACY_STATES.get(s, s) for s in states}
        parts: list[bytes | None] = []
        missing: list[str] = []
        for j, state in ids:
            piece = self._ended_piece(j) if state in TERMINAL else self._active_piece(j, wanted)
            if piece is None:
                missing.append(j)
            parts.append(piece)
        rows = self.store.jobs_by_id(missing) if missing else {}
        out = []
        for (j, _), piece in zip(ids, parts, strict=True):
            if piece is None:
                row = rows.get(j)
                if row is None or (wanted is not None and row["state"] not in wanted):
                    continue  # purged, or moved out of the filter, between the two reads
                piece = self._from_row(row)
            if piece:
                out.append(piece)
        return b"[" + b",".join(out) + b"]"

    def _ended_piece(self, job_id: str) -> bytes | None:
        with self._lock:
            piece = self._ended.get(job_id)
            if piece is not None:
                self._ended.move_to_end(job_id)
        self._active.pop(job_id, None)
        self._fixed.pop(job_id, None)
        return piece

    def _active_piece(self, job_id: str, wanted: set[str] | None) -> bytes | None:
        """An active job's JSON from the mirror; b"" when it left the filter; None: read its row."""
        row = self.store.active_row(job_id)
        fixed = self._fixed.get(job_id)
        if row is None or fixed is None:
            return None
        if wanted is not None and row["state"] not in wanted:
            return b""
        hit = self._active.get(job_id)
        if hit is not None and hit[0] is row:
            return hit[1]
        piece = encode(self.to_json(fixed | row))
        self._active[job_id] = (row, piece)
        return piece

    def _from_row(self, row: dict[str, Any]) -> bytes:
        piece = encode(self.to_json(row))
        if row["state"] in TERMINAL:
            with self._lock:
                self._ended[row["id"]] = piece
                while len(self._ended) > self.max_kept:
                    self._ended.popitem(last=False)
        else:
            if len(self._fixed) >= self.max_kept:  # jobs that ended unlisted since: forget them
                for j in [j for j in self._fixed if self.store.active_row(j) is None]:
                    self._fixed.pop(j, None)
                    self._active.pop(j, None)
            self._fixed[row["id"]] = {k: v for k, v in row.items() if k not in LIGHT}
        return piece
