"""Tests that need `../shared/peer-data` skip on a developer machine without it but FAIL under `CI=true`."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PLANTED = '''
import pytest
import peer_data

@peer_data.needs("no-such-folder-anywhere")
def test_needs_missing_data():
    pass

@pytest.mark.skipif(True, reason="Sia traces not found")
def test_older_wording():
    pass

@pytest.mark.skipif(True, reason="unrelated: needs a GPU")
def test_unrelated_skip():
    pass

def test_plain():
    pass
'''


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_peer_data_fails_only_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                               ci: str) -> None:
    pytester.makeconftest((HERE / "conftest.py").read_text().replace('pytest_plugins = ("pytester",)', ""))
    pytester.makepyfile(peer_data=(HERE / "peer_data.py").read_text(), test_planted=PLANTED)
    monkeypatch.setenv("CI", ci)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    if ci:
        res.assert_outcomes(passed=1, errors=2, skipped=1)  # a skip at set-up turns into a set-up error
        res.stdout.fnmatch_lines(["*CI=true and the shared data is missing*"])
    else:
        res.assert_outcomes(passed=1, skipped=3)
