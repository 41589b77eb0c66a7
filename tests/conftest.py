"""Shared fixtures: the bundled performance models are loaded once per test session."""

from __future__ import annotations

import pytest

from elastisched.models import PerfModels


@pytest.fixture(scope="session")
def models() -> PerfModels:
    return PerfModels.load()
