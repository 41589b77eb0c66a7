"""Submissions that may be retried and are bounded per user (issue 23 items 2 and 5).

A client that lost its connection cannot know whether its `POST /v1/jobs` was committed. With an
`Idempotency-Key` header the job row and the key (with a digest of the validated request) are written in one
transaction, so a retry with the same key gets the job the first request created — also after a restart,
and when the service was killed between the commit and the answer — and the same key with another request is
refused (409). Keys are scoped to the user who sent them. A user who is not an admin may have at most
`max_queued` jobs queued (pending or suspended) at once; one more is a 429 with `Retry-After`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from elastisched.backends._faults import pause
from elastisched.service.store import Store
from elastisched.service.tables import idempotency_keys, jobs

KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"  # printable ASCII, no spaces (as a UUID or any token a client makes)


class KeyReused(Exception):
    """The key was used before with a different request (for job `job_id`)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


class QueueFull(Exception):
    """The user already has `queued` jobs queued, the limit."""

    def __init__(self, queued: int) -> None:
        super().__init__(queued)
        self.queued = queued


def digest(request: Mapping[str, Any]) -> str:
    """sha256 of a validated request in canonical JSON (key order and whitespace do not matter)."""
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def replay(store: Store, owner: str | None, key: str, request_digest: str) -> dict[str, Any] | None:
    """The job an earlier request with this key created (None: the key is new). Raises `KeyReused`."""
    with store.tx() as c:
        return _replay(c, owner, key, request_digest)


def _replay(c: Any, owner: str | None, key: str, request_digest: str) -> dict[str, Any] | None:
    hit = c.execute(select(idempotency_keys.c.digest, idempotency_keys.c.job_id)
                    .where((idempotency_keys.c.owner == (owner or "")) & (idempotency_keys.c.key == key))).first()
    if hit is None:
        return None
    if hit[0] != request_digest:
        raise KeyReused(str(hit[1]))
    r = c.execute(select(jobs).where(jobs.c.id == hit[1])).first()
    return None if r is None else dict(r._mapping)


def submit_once(store: Store, *, owner: str | None, key: str | None, request_digest: str, max_queued: int | None,
                name: str | None, script: str, args: Sequence[str], spec: Mapping[str, Any]
                ) -> tuple[dict[str, Any], bool]:
    """(the job, whether it was an earlier request's): the key checked, the queue bounded and the job and its
    key written in one transaction."""
    try:
        with store.tx() as c:
            if key is not None:
                earlier = _replay(c, owner, key, request_digest)
                if earlier is not None:
                    return earlier, True
            if max_queued is not None:
                n = store.queued_of(owner)  # committed jobs: we hold the writers' lock
                if n >= max_queued:
                    raise QueueFull(n)
            row = store.insert_job(c, name=name, script=script, args=args, spec=spec, owner=owner)
            if key is not None:
                c.execute(insert(idempotency_keys).values(owner=owner or "", key=key, digest=request_digest,
                                                          job_id=row["id"], created_at=time.time()))
    except IntegrityError:  # the same key committed by another writer a moment ago
        if key is None:
            raise
        earlier = replay(store, owner, key, request_digest)
        if earlier is None:
            raise
        return earlier, True
    pause("submitted", row["id"])  # crash-test hook: committed, not yet answered (backends/_faults.py)
    return row, False
