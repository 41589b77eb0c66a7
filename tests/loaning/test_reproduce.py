"""`reproduce lyra` end to end on a small slice (the full 15-day run is `elastisched reproduce lyra`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from elastisched.loaning.reproduce import LyraExperiment, register, run_experiment
from elastisched.runner import lyra_runner as run_sim


def test_small_experiment_writes_lyra_json(tmp_path: Path, models: object) -> None:
    exp = LyraExperiment(days=2.0, sample=150, fixed_servers=6, variants=("deepboot", "random"))
    res = run_experiment(run_sim, models, exp, tmp_path, log=lambda _: None)  # type: ignore[arg-type]
    data = json.loads((tmp_path / "lyra.json").read_text())
    for key in ("queue_reduction", "jct_reduction", "gpu_usage_gain", "preemptions", "mckp_optimality",
                "baseline_avg_queue", "inference", "ablation"):
        assert key in data
    assert (tmp_path / "loans.png").exists() and (tmp_path / "report.html").exists()
    assert res["runs"]["lyra"]["n_finished"] == res["runs"]["baseline"]["n_finished"] == 150
    same = res["preemptions"]["same_instances"]
    assert same["greedy"] <= same["deepboot"] and same["greedy"] <= same["random"]
    assert same["milp"] <= same["greedy"]
    assert 0.98 <= res["mckp_optimality"] <= 1.0 + 1e-9
    assert res["inference"]["fraction_below_40pct"] > 0.3


def test_register_adds_a_lyra_command(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app, run_sim)

    @app.command("other")
    def other() -> None:  # a second command keeps `lyra` a named sub-command
        """Unused."""

    out = CliRunner().invoke(app, ["lyra", "--help"])
    assert out.exit_code == 0 and "--out" in out.output and "--peer" in out.output
