"""Fixtures for tests/train."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def inproc_ctx() -> Iterator[None]:
    """In-process contexts install a SIGTERM handler: put pytest's back afterwards."""
    import elastisched.train.runtime as rt

    old = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, old)
    rt._CURRENT = None
