"""Where the tests find `../shared/peer-data` (public traces and peer results), and how they say it is missing.

A test that needs it is marked `needs("ones", "traces")`: without the data it is skipped on a developer's
machine, and under `CI=true` the skip becomes a failure (`tests/conftest.py`), so a CI run without the data
cannot pass silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PEER_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "peer-data"
MISSING = "peer-data missing"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def path(*parts: str) -> Path | None:
    """`peer-data/<parts>` if it exists, else None."""
    p = PEER_DATA.joinpath(*parts)
    return p if p.exists() else None


def needs(*parts: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(path(*parts) is None, reason=f"{MISSING}: {PEER_DATA.joinpath(*parts)}")


ONES = path("ones")
ONES_HISTORY = path("ones", "traces", "job_history.csv")
