"""Fixtures for backend tests: backends in tmp_path whose workers are killed at teardown."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from elastisched.backends.local import LocalBackend


@pytest.fixture
def backends(tmp_path: Path) -> Iterator[Callable[..., LocalBackend]]:
    """Factory of backends on one work directory; every worker they started is killed at teardown."""
    made: list[LocalBackend] = []

    def make(**kw: object) -> LocalBackend:
        b = LocalBackend(tmp_path / "work", grace_s=kw.pop("grace_s", 5.0), **kw)  # type: ignore[arg-type]
        made.append(b)
        return b

    yield make
    for b in made:
        for pid in b.started_pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
