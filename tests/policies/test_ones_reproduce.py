"""`reproduce ones` end to end on a few jobs (the full 50-job run is the CLI's job)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elastisched.core.errors import ConfigError
from elastisched.policies.ones import default_history
from elastisched.report.ones_reproduce import artifact_results, run_ones_reproduction

HISTORY = default_history()
needs_data = pytest.mark.skipif(HISTORY is None, reason="ONES artifact data (peer-data/ones) not found")


@needs_data
def test_artifact_figures_match_the_digest() -> None:
    ref = artifact_results(Path(HISTORY).parents[1])  # type: ignore[arg-type]
    assert ref["ones"]["mean_jct"] == pytest.approx(213.98, abs=0.01)
    assert ref["tiresias"]["mean_jct"] / ref["ones"]["mean_jct"] == pytest.approx(2.34, abs=0.01)
    assert ref["optimus"]["mean_jct"] / ref["ones"]["mean_jct"] == pytest.approx(2.12, abs=0.01)


@needs_data
def test_small_reproduction_writes_every_file(tmp_path: Path) -> None:
    r = run_ones_reproduction(tmp_path, Path(HISTORY).parents[1], num_jobs=6,  # type: ignore[arg-type]
                              policies=("ones", "tiresias", "optimus"), ones_options={"refit": False})
    for f in ("ones.json", "report.html", "jct.png", "execution.png", "queuing.png", "jobs-ones.csv"):
        assert (tmp_path / f).stat().st_size > 0
    saved = json.loads((tmp_path / "ones.json").read_text())
    assert saved["policies"]["ones"]["finished"] == 6
    assert saved["jct_ratio_vs_tiresias"] == pytest.approx(r["policies"]["tiresias"]["mean_jct"]
                                                            / r["policies"]["ones"]["mean_jct"])
    assert saved["resize_cost_s"] == 8.0 and saved["restart_cost_s"] == 30.0  # the same costs for every policy
    # the isolated per-job bound holds: no policy beats the job running alone at its best sizes
    bound = saved["lower_bound_mean_jct"]
    assert 30.0 < bound["ones"] <= saved["policies"]["ones"]["mean_jct"]
    assert bound["fixed"] <= min(saved["policies"][p]["mean_jct"] for p in ("tiresias", "optimus"))


@needs_data
def test_reproduction_runs_tuned_and_faithful_ones(tmp_path: Path) -> None:
    from elastisched.report.ones_reproduce import TUNED

    r = run_ones_reproduction(tmp_path, Path(HISTORY).parents[1], num_jobs=4,  # type: ignore[arg-type]
                              policies=("ones", "tiresias", "ones-faithful"),
                              ones_options={**TUNED, "refit": False})
    assert r["ones_options"]["start"] == "node" and {"ones", "ones-faithful"} <= r["policies"].keys()
    assert r["faithful_jct_ratio_vs_tiresias"] == pytest.approx(r["policies"]["tiresias"]["mean_jct"]
                                                                 / r["policies"]["ones-faithful"]["mean_jct"])
    assert (tmp_path / "jobs-ones-faithful.csv").stat().st_size > 0


def test_missing_data_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--data"):
        run_ones_reproduction(tmp_path / "out", tmp_path)
    assert not (tmp_path / "out").exists()


def test_register_adds_the_ones_command() -> None:
    import typer
    from typer.testing import CliRunner

    from elastisched.report.ones_reproduce import register

    app = typer.Typer()
    register(app)

    @app.command("other")
    def other() -> None:  # a second command keeps typer from collapsing the group
        pass

    res = CliRunner().invoke(app, ["ones", "--help"])
    assert res.exit_code == 0 and "--restart-cost" in res.output
