"""Fixtures for service tests: a real service process per test (or module), always torn down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _svc_helpers import ServiceProc


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator[Callable[..., ServiceProc]]:
    made: list[ServiceProc] = []

    def make(**kw: object) -> ServiceProc:
        s = ServiceProc(tmp_path, **kw)  # type: ignore[arg-type]
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()
        s.kill_workers()
