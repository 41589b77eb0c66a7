"""Reports a reader can interpret (issue 24 item 5): the compare report defines its terms on the page; a sweep's
verdict names the winner and says which policies ignore the seed (no ± 0.0), with counts shown whole; `plan`
warns about jobs that can never fit a size; `trace describe`'s GPU demand is on a linear axis; a long `compare`
shows what it is doing while it loads and writes (on a terminal)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from elastisched.cli.main import app

runner = CliRunner()


def test_compare_report_defines_its_terms(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "compare", "-w", "pollux:workload-6", "-p", "fifo,tiresias", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Definitions</h2>" in page
    for term in ("avg queue", "queued", "best", "loss_gpus", "loss_batch"):
        assert f"<dt><b>{term}</b></dt><dd>" in page, term
    assert "first start only" in page and "queued &gt;= avg queue" in page


def test_sweep_verdict_names_the_winner_and_the_policies_that_ignore_the_seed(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "sweep", "-w", "pollux:workload-6", "-p", "fifo,tiresias", "--seeds", "0,1",
                            "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "report.html").read_text()
    assert re.search(r"<b>tiresias</b> has the lowest average JCT on pollux:workload-6, [0-9,]+ s over 2 seed\(s\) "
                     r"\(fifo [0-9.]+× longer\)", page), page[:2000]
    assert "fifo, tiresias gave the same run for every seed" in page
    assert "± 0.0" not in page and "same every seed" in page
    restarts = page.split("restarts")[-1]
    assert ".0<" not in restarts.split("</table>")[0], "a whole count shown as a float"


def test_plan_warns_about_jobs_that_can_never_fit(tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "-w", "pollux:workload-6", "--cluster-sizes", "32,48", "-p", "fifo",
                            "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    warning = "At 32 GPUs, 1 job(s) can never run (they ask for up to 48 GPUs, e.g. imagenet-137)"
    assert warning in " ".join(r.output.split())
    assert warning in (tmp_path / "report.html").read_text()


def test_describe_gpu_demand_is_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    from elastisched.core.cluster import parse_cluster
    from elastisched.models import PerfModels
    from elastisched.workloads import load_workload
    from elastisched.workloads.describe import describe, figure

    seen: list[Any] = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (seen.append(fig), close(fig)))
    models = PerfModels.load()
    figure(describe(load_workload("pollux:workload-6", models), models, parse_cluster("16x4:t4")))
    demand = next(a for a in seen[0].axes if a.get_title() == "GPU demand")
    assert demand.get_yscale() == "linear" and demand.get_ylabel() == "jobs"


def test_compare_on_a_terminal_says_what_it_loads_and_writes(tmp_path: Path) -> None:
    """On a terminal the steps without a progress bar of their own show a spinner and a 'done' line."""
    leader, follower = pty.openpty()
    p = subprocess.run([sys.executable, "-m", "elastisched.cli", "sim", "compare", "-w", "pollux:workload-6", "-p",
                        "fifo", "-o", str(tmp_path)], stdin=follower, stdout=subprocess.DEVNULL, stderr=follower,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "COLUMNS": "160"}, timeout=300, check=False)
    os.close(follower)
    text = b""
    try:
        while chunk := os.read(leader, 65536):
            text += chunk
    except OSError:  # the follower side is closed: all read
        pass
    os.close(leader)
    assert p.returncode == 0
    out = text.decode(errors="replace")
    assert "loading pollux:workload-6 and the performance models done" in out
    assert "writing the report (1 policies: plots, tables, jobs.csv) done" in out
