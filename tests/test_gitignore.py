"""Issue 24 item 6: the folders the README writes into (`out/`, `results/`, the service's `.elastisched/`) are
ignored by git, so following the README leaves `git status` clean."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.parametrize("path", ["out/ph/report.html", "results/quickstart/summary.csv", ".elastisched/token"])
def test_readme_outputs_are_ignored(path: str) -> None:
    r = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path], check=False)
    assert r.returncode == 0, f"{path} is not git-ignored"
