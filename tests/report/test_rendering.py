"""Every report a user opens renders: figures titled, labelled and with legends; the page loads in headless
Chromium without console errors and its tables fit 1,280 px (screenshots under results/screenshots)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rendering import check_page, checked_figures
from typer.testing import CliRunner

SYN = "synthetic:num_jobs=30,rate=20,seed=4"
REPORTS = {
    "compare": ["sim", "compare", "-w", SYN, "--policies", "fifo,tiresias", "--cluster", "4x4:t4"],
    "trace-describe": ["trace", "describe", "pollux:workload-2"],
    "plan": ["plan", "-w", SYN, "--cluster-sizes", "8,16,24", "-p", "fifo,tiresias"],
    "sweep": ["sim", "sweep", "-w", SYN, "-p", "fifo,tiresias", "--seeds", "0,1", "-c", "4x4:t4"],
}


@pytest.mark.parametrize("name", list(REPORTS))
def test_report_renders(tmp_path: Path, name: str) -> None:
    from elastisched.cli import app

    out = tmp_path / name
    with checked_figures() as problems:
        res = CliRunner().invoke(app, [*REPORTS[name], "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not problems, problems
    check_page(out / "report.html", name)
