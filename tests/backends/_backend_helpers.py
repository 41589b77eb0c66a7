"""Helpers shared by backend and service tests: the fake worker's path and a bounded wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

FAKE = str(Path(__file__).with_name("fake_worker.py"))
T = TypeVar("T")


def wait_for(pred: Callable[[], T], timeout: float = 20.0, what: str = "condition") -> T:
    """Poll `pred` until truthy; fail the test (never hang) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
