"""Fixtures for backend tests: a store in tmp_path and backends whose workers are killed at teardown."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from elastisched.backends.local import LocalBackend
from elastisched.service.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield s
    s.close()


@pytest.fixture
def backends(store: Store, tmp_path: Path) -> Iterator[Callable[..., LocalBackend]]:
    """Factory of backends on one store; every worker they started is killed at teardown."""
    made: list[LocalBackend] = []

    def make(**kw: object) -> LocalBackend:
        b = LocalBackend(store, tmp_path / "work", grace_s=kw.pop("grace_s", 5.0), **kw)  # type: ignore[arg-type]
        made.append(b)
        return b

    yield make
    for gen in store.generations():
        for pid, _ticks in gen["pids"]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
