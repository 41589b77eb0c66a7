"""The Python API (issue 24 item 3): `elastisched.simulate/compare/sweep` take the CLI's specs and give the CLI's
figures as DataFrames; `.report(path)` writes the CLI's files; the example notebook runs under nbclient, its plots
render, and its summaries equal `sim compare`'s for the same run."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import elastisched
from elastisched.cli.main import app
from elastisched.core.errors import ConfigError

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "python-api.ipynb"
TIMING = ("wall_seconds", "decision_ms_p50", "decision_ms_p99", "decision_ms_max")
runner = CliRunner()


def _same_run(a: dict[str, object], b: dict[str, object]) -> None:
    assert {k: v for k, v in a.items() if k not in TIMING} == {k: v for k, v in b.items() if k not in TIMING}


def test_simulate_equals_sim_run(tmp_path: Path) -> None:
    run = elastisched.simulate("pollux:workload-6", "tiresias", options={"threshold_gpu_seconds": 3600})
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "tiresias:threshold_gpu_seconds=3600",
                            "-o", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    _same_run(run.summary_dict, json.loads((tmp_path / "cli" / "summary.json").read_text()))
    assert run.summary.index.tolist() == ["tiresias:threshold_gpu_seconds=3600"]
    assert run.summary.loc[run.label, "avg_jct"] == run.summary_dict["avg_jct"]
    assert run.summary.loc[run.label, "decomposition.queued"] == run.summary_dict["decomposition"]["queued"]
    assert len(run.jobs) == 160 and {"jct", "queue"} <= set(run.jobs.columns) and len(run.timeline) > 0
    report = run.report(tmp_path / "api")
    assert report.is_file() and (tmp_path / "api" / "jobs.csv").read_bytes() == \
        (tmp_path / "cli" / "jobs.csv").read_bytes()


def test_compare_stacks_tables_and_refuses_bad_specs() -> None:
    c = elastisched.compare("pollux:workload-6", "fifo,tiresias")
    assert c.summary.index.tolist() == ["fifo", "tiresias"]
    assert c.jobs.columns[0] == "policy" and c.jobs.groupby("policy").size().to_dict() == {"fifo": 160,
                                                                                           "tiresias": 160}
    assert c["fifo"].summary_dict["avg_jct"] > c["tiresias"].summary_dict["avg_jct"]
    with pytest.raises(ConfigError, match="unknown option; tiresias takes"):
        elastisched.compare("pollux:workload-6", ["tiresias:bogus=1"])
    with pytest.raises(ConfigError, match="names a policy not run here"):
        elastisched.compare("pollux:workload-6", ["fifo"], policy_options={"gavel": {"interval": 60}})


def test_sweep_equals_serial_runs(tmp_path: Path) -> None:
    s = elastisched.sweep("pollux:workload-6", ["fifo", "tiresias"], seeds=[0, 1])
    assert set(s.cells["status"]) == {"ok"} and len(s.cells) == 4
    tiresias = s.summary.set_index("policy").loc["tiresias", "avg_jct"]
    assert tiresias == elastisched.simulate("pollux:workload-6", "tiresias").summary_dict["avg_jct"]
    assert s.report(tmp_path).is_file()


def test_import_elastisched_stays_cheap() -> None:
    code = "import sys, elastisched; print(' '.join(sorted(sys.modules)))"
    mods = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert not {"numpy", "pandas", "elastisched.api", "elastisched.sim"} & set(mods)


def test_notebook_runs_and_matches_the_cli(tmp_path: Path) -> None:
    """Must show: the notebook runs in CI (nbclient), its plots render, and its summaries are `sim compare`'s."""
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    out = tmp_path / "nb"
    old = os.environ.get("ELASTISCHED_NOTEBOOK_OUT")
    os.environ["ELASTISCHED_NOTEBOOK_OUT"] = str(out)  # the kernel inherits the environment
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if old is None:
            os.environ.pop("ELASTISCHED_NOTEBOOK_OUT", None)
        else:
            os.environ["ELASTISCHED_NOTEBOOK_OUT"] = old
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    pngs = [base64.b64decode(o["data"]["image/png"]) for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 2 and all(p.startswith(b"\x89PNG") and len(p) > 5000 for p in pngs)
    r = runner.invoke(app, ["sim", "compare", "-w", "pollux:workload-6", "-p", "fifo,tiresias,srtf", "-c", "16x4:t4",
                            "-o", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    for policy in ("fifo", "tiresias", "srtf"):
        _same_run(json.loads((out / policy / "summary.json").read_text()),
                  json.loads((tmp_path / "cli" / policy / "summary.json").read_text()))
    assert (out / "report.html").is_file()
