"""The `elastisched` command end to end (Typer's runner, real files)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from elastisched.cli import app

runner = CliRunner()


def test_policies_json() -> None:
    r = runner.invoke(app, ["policies", "--json"])
    assert r.exit_code == 0, r.output
    names = {p["name"] for p in json.loads(r.stdout)}
    assert {"fifo", "srtf", "tiresias", "optimus"} <= names


def test_sim_run_writes_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = runner.invoke(app, ["sim", "run", "-w", "synthetic:num_jobs=20,rate=40,seed=2", "-p", "tiresias",
                            "--cluster", "4x4:t4", "--seed", "5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    for key in ("policy", "workload", "n_jobs", "avg_jct", "median_jct", "p95_jct", "p99_jct", "avg_queue",
                "makespan", "gpu_utilization", "restarts", "decision_ms_p50", "decision_ms_max", "wall_seconds",
                "seed", "version"):
        assert key in s, key
    assert s["seed"] == 5 and s["n_jobs"] == 20 and s["n_finished"] == 20
    assert (out / "jobs.csv").read_text().count("\n") == 21


def test_sim_compare_report(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    r = runner.invoke(app, ["sim", "compare", "-w", "synthetic:num_jobs=15,rate=40,seed=1", "--policies",
                            "fifo,tiresias", "--cluster", "2x4:t4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "tiresias" in html
    assert (out / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "summary.csv").read_text().splitlines()[0].startswith("policy,")


def test_bad_input_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\na,0,ncf,zero,256\n")
    out = tmp_path / "never"
    r = runner.invoke(app, ["sim", "run", "-w", str(bad), "-p", "fifo", "--out", str(out)])
    assert r.exit_code == 2
    assert "num_replicas" in r.output and "'zero'" in r.output and ":2:" in r.output
    assert not out.exists()
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-1", "-p", "fifo", "--cluster", "4y4", "--out",
                            str(out)])
    assert r.exit_code == 2 and "--cluster" in r.output and not out.exists()
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-1", "-p", "nope", "--out", str(out)])
    assert r.exit_code == 2 and "unknown policy" in r.output and not out.exists()
