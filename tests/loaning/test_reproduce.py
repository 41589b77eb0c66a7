"""`reproduce lyra` end to end on a small slice (the full 15-day run is `elastisched reproduce lyra`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from elastisched.loaning.deepboot import DeepBootSetup, deepboot_compare
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


DEEPBOOT_CSV = """name,time,application,num_replicas,batch_size,duration,num_task
cifar10-0,0,cifar10,4,512,4.0,-1
ncf-1,30,ncf,1,256,4.0,-1
cifar10-2,60,cifar10,2,256,4.0,-1
inference-ncf-0,10,infer-ncf-1,1,1,5.0,100
inference-ncf-1,400,infer-ncf-1,1,1,5.0,100
"""


def test_deepboot_compare_runs_lyra_and_tiresias_on_the_split(tmp_path: Path) -> None:
    wl = tmp_path / "tiny.csv"
    wl.write_text(DEEPBOOT_CSV)
    setup = DeepBootSetup(servers=4, inference_servers=2, policies=("lyra", "tiresias"))
    res = deepboot_compare(run_sim, wl, setup, tmp_path / "out", log=lambda _: None)
    data = json.loads((tmp_path / "out" / "deepboot.json").read_text())
    assert (tmp_path / "out" / "deepboot_cdf.png").exists() and (tmp_path / "out" / "deepboot_loans.png").exists()
    assert data["training_jobs"] == 3 and data["training_servers"] == 2 and data["inference"]["tasks"] == 2
    assert set(res["avg_jct_training"]) == {"lyra", "tiresias"}
    for name in ("lyra", "tiresias"):
        assert res["runs"][name]["n_finished"] == 3  # training jobs only: inference rows are demand, not jobs
    assert res["lyra_beats"]["aryl"] == (res["avg_jct_training"]["lyra"] < 42310.0)
    assert data["deepboot_figures"] == {"deepboot_aryl": 42310.0, "deepboot_tiresias": 2618.0}


def test_register_adds_a_lyra_deepboot_command() -> None:
    app = typer.Typer()
    register(app, run_sim)
    out = CliRunner().invoke(app, ["lyra-deepboot", "--help"])
    assert out.exit_code == 0 and "--workload" in out.output and "--hold" in out.output
