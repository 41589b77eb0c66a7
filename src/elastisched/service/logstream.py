"""`GET /v1/jobs/{id}/logs?follow=true`, bounded (issue 11 item 4).

A follow used to be a synchronous generator that slept between polls, so each one held a thread of the
server's pool (40 by default) for its whole life: 45 follows took every thread and `GET /v1/jobs` waited 22 s,
an abandoned stream was never noticed, and uvicorn's shutdown waited for streams that never ended. Here a
follow is an async generator: between polls it awaits (no thread); each poll reads the new bytes and the job's
state in a worker thread under a small limiter of its own, so follows never take the pool the other handlers
use. A follow ends when the job ends, when the client goes away (checked at every poll), after `idle_s` with
no new output, at the client's `timeout_s`, or when the server starts shutting down; at most `limit` run at
once (then 429 with Retry-After), `per_user` of them for one user who is not an admin.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from fastapi import HTTPException, Request, status
from fastapi.responses import StreamingResponse

CHUNK = 1 << 20  # bytes read from one file per poll


class Follows:
    """Admission and lifetime of log follows."""

    def __init__(self, limit: int = 32, per_user: int = 8, idle_s: float = 300.0, poll_s: float = 0.25) -> None:
        self.limit, self.per_user, self.idle_s, self.poll_s = limit, per_user, idle_s, poll_s
        self.active: dict[str, int] = {}
        self.closing = False  # set when the server starts shutting down: every follow ends at its next poll
        self._limiter = anyio.CapacityLimiter(4)

    @property
    def count(self) -> int:
        return sum(self.active.values())

    def admit(self, user: str, admin: bool = False) -> None:
        """Count one more follow of `user` (an admin has no per-user limit), or 429 (503 while shutting down)."""
        if self.closing:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "follow: the server is shutting down")
        if self.count >= self.limit:
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, f"follow: {self.limit} log follows are open "
                                "(the server's limit); retry later", headers={"Retry-After": "5"})
        if not admin and self.active.get(user, 0) >= self.per_user:
            raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, f"follow: user {user!r} has {self.per_user} "
                                "log follows open (the per-user limit)", headers={"Retry-After": "5"})
        self.active[user] = self.active.get(user, 0) + 1

    def release(self, user: str) -> None:
        n = self.active.get(user, 0) - 1
        if n > 0:
            self.active[user] = n
        else:
            self.active.pop(user, None)

    async def stream(self, request: Request, user: str, paths: Callable[[], Sequence[Path]],
                     ended: Callable[[], bool], timeout_s: float) -> AsyncIterator[bytes]:
        """New log bytes until the job ends (or the follow is cut short)."""
        offsets: dict[Path, int] = {}

        def poll() -> tuple[bool, list[bytes]]:
            done = ended()  # before reading: the last bytes a finished job wrote are read below
            out = []
            for p in paths():
                try:
                    with open(p, "rb") as f:
                        f.seek(offsets.get(p, 0))
                        chunk = f.read(CHUNK)
                except OSError:
                    continue
                if chunk:
                    offsets[p] = offsets.get(p, 0) + len(chunk)
                    out.append(chunk)
            return done and not out, out

        now = time.monotonic()
        deadline, last = now + timeout_s, now
        while True:
            done, chunks = await anyio.to_thread.run_sync(poll, limiter=self._limiter)
            for c in chunks:
                yield c
            now = time.monotonic()
            if chunks:
                last = now
            if done or self.closing or now >= deadline or now - last >= self.idle_s:
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(self.poll_s)

    def response(self, request: Request, user: str, paths: Callable[[], Sequence[Path]],
                 ended: Callable[[], bool], timeout_s: float) -> StreamingResponse:
        """The streaming response of one admitted follow; its slot is released however the response ends
        (finished, cut short, client gone, or never started)."""
        follows = self

        class _Follow(StreamingResponse):
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                try:
                    await super().__call__(scope, receive, send)
                finally:
                    follows.release(user)

        return _Follow(self.stream(request, user, paths, ended, timeout_s), media_type="text/plain")
