"""Shared fixtures (the bundled performance models, loaded once per session) and the peer-data rule: under
`CI=true`, a test skipped because `../shared/peer-data` (or data in it) is missing FAILS instead."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from elastisched.models import PerfModels
from peer_data import MISSING, in_ci

pytest_plugins = ("pytester",)  # tests/test_peer_data_rule.py runs pytest on planted test files

#: skip reasons that mean "the shared data is not there" (ours, and older wordings still used by some tests)
DATA_SKIP_WORDS = (MISSING, "peer-data", "../shared", "traces not found", "data not found")


def is_data_skip(reason: str) -> bool:
    return any(w in reason for w in DATA_SKIP_WORDS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if rep.skipped and in_ci() and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        if is_data_skip(reason):
            rep.outcome = "failed"
            rep.longrepr = f"CI=true and the shared data is missing ({reason}); a CI run must have ../shared"


@pytest.fixture(scope="session")
def models() -> PerfModels:
    return PerfModels.load()


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[Any]:
    """A real Slurm cluster (tests/slurm_cluster.py), started once per session by the first test that needs it
    and torn down at the end, whatever happened. Needs root and Debian's Slurm packages (`.ci/run` installs
    them): skipped without them, failed under CI=true."""
    import os

    from slurm_cluster import missing_tools, start_cluster

    why = "needs root" if os.geteuid() != 0 else (f"Slurm not installed ({', '.join(missing_tools())} missing)"
                                                    if missing_tools() else "")
    if why:
        if in_ci():
            pytest.fail(f"CI=true: the Slurm tests cannot run: {why} (.ci/run installs slurmctld, slurmd, slurmdbd)")
        pytest.skip(why)
    try:
        c = start_cluster()
    except RuntimeError as e:  # a free port taken by another process before a daemon bound it: fresh ports, once
        if "Address already in use" not in str(e):
            raise
        c = start_cluster()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def slurm_cluster(slurm_session: Any) -> Iterator[Any]:
    """The session's Slurm cluster, reset after the test (jobs cancelled, nodes up and resumed)."""
    yield slurm_session
    slurm_session.reset()
