"""An in-process backend for tests that drive `Service.step` by hand: workers "start" the moment an action
launches or resizes them, and a test reports their ends itself (appending `JobFinished` to `events`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from elastisched.backends.base import BackendBase, BackendEvent, JobStarted
from elastisched.core.events import Action, ActionKind


class InstantBackend(BackendBase):
    """Launches and resizes start at once (at `now()`); cancels are recorded; nothing survives a restart."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.events: list[BackendEvent] = []
        self.cancelled: list[str] = []

    def apply(self, actions: Sequence[Action]) -> None:
        for a in actions:
            self.check(a)
            if a.kind in (ActionKind.LAUNCH, ActionKind.RESIZE):
                assert a.launch is not None  # the action carries its launch spec: a backend never reads the store
                self.events.append(JobStarted(self.now(), a.job_id, a.launch.generation))

    def check(self, action: Action) -> None:
        """What a subclass asserts about each action before it takes effect (nothing here)."""

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def poll(self) -> list[BackendEvent]:
        out, self.events = self.events, []
        return out

    def recover(self, generations: object = ()) -> list[BackendEvent]:
        return []

    def close(self) -> None:
        pass
