"""`reproduce ones` end to end on a few jobs (the full 50-job run is the CLI's job)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import peer_data
from elastisched.core.errors import ConfigError
from elastisched.experiments.ones import Ones, OnesConfig, artifact_consistency, artifact_results, run_ones
from elastisched.experiments.writer import write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from rendering import check_page, checked_figures

DATA = peer_data.ONES
needs_data = peer_data.needs("ones", "traces", "job_history.csv")


@needs_data
def test_artifact_figures_match_the_digest() -> None:
    ref = artifact_results(DATA)  # type: ignore[arg-type]
    assert ref["ones"]["mean_jct"] == pytest.approx(213.98, abs=0.01)
    assert ref["tiresias"]["mean_jct"] / ref["ones"]["mean_jct"] == pytest.approx(2.34, abs=0.01)
    assert ref["optimus"]["mean_jct"] / ref["ones"]["mean_jct"] == pytest.approx(2.12, abs=0.01)


@needs_data
def test_small_reproduction_writes_every_file(tmp_path: Path) -> None:
    cfg = OnesConfig(data=DATA, jobs=6, seeds=(0,), refit=False,  # type: ignore[arg-type]
                     policies=("ones", "ones-artifact", "fifo", "tiresias", "tiresias-tuned"),
                     tiresias_grid=(600.0, 57600.0))
    with checked_figures() as problems:
        res = Ones().run(cfg)
    assert not problems, problems
    write_result(res, tmp_path)
    check_page(tmp_path / "report.html", "reproduce-ones")
    for f in ("ones.json", "report.html", "jct.png", "execution.png", "queuing.png", "jobs-ones.csv"):
        assert (tmp_path / f).stat().st_size > 0
    saved = json.loads((tmp_path / "ones.json").read_text())["data"]
    pol = saved["policies"]
    assert pol["ones"]["finished"] == 6 and pol["ones-artifact"]["finished"] == 6
    assert saved["resize_cost_s"] == 8.0 and saved["restart_cost_s"] == 30.0  # the same costs for every policy
    best = min(("fifo", "tiresias", "tiresias-tuned"), key=lambda p: pol[p]["mean_jct"])
    assert saved["best_baseline"] == best
    assert saved["ones_over_best_baseline"] == pytest.approx(pol["ones"]["mean_jct"] / pol[best]["mean_jct"])
    assert saved["restarts_per_job"]["ones"] == pytest.approx(pol["ones"]["restarts_by_seed"][0] / 6)
    grid = saved["tiresias_grid_mean_jct"]
    assert set(grid) == {"600.0", "57600.0"} and saved["tiresias_tuned_threshold_gpu_s"] in (600.0, 57600.0)
    assert pol["tiresias-tuned"]["mean_jct"] == pytest.approx(min(grid.values()))
    # the predictor is scored on runs it never saw, and that error is worse than the in-sample one
    pred = saved["predictor"]
    assert pred["folds"] == 2 and pred["held_out_mae"] > pred["in_sample_mae"] > 0
    # the isolated per-job bound holds: no policy beats the job running alone at its best sizes
    bound = saved["lower_bound_mean_jct"]
    assert 30.0 < bound["ones"] <= pol["ones"]["mean_jct"]
    assert bound["fixed"] <= min(pol[p]["mean_jct"] for p in ("tiresias", "fifo"))
    assert [v.passed for v in res.verdicts] == [saved["ones_over_best_baseline"] <= 0.95,
                                                saved["artifact_over_fifo"] < 1.0,
                                                saved["restarts_per_job"]["ones"] <= 0.5 * (435 / 150)]


@needs_data
def test_spread_over_seeds_and_preset_options() -> None:
    cfg = OnesConfig(data=DATA, jobs=4, seeds=(0, 1), policies=("ones", "ones-faithful"))  # type: ignore[arg-type]
    data, results = run_ones(cfg, ones_options={"refit": False})
    assert data["ones_options"]["preset"] == "tuned"
    for p in ("ones", "ones-faithful"):
        s = data["policies"][p]
        by = s["mean_jct_by_seed"]
        assert len(by) == 2 and s["mean_jct"] == pytest.approx(sum(by) / 2)
        assert s["jct_spread"] == pytest.approx(max(by) - min(by))
    assert len(results["ones-faithful"].jobs) == 4


@needs_data
def test_artifact_consistency_counts_match_a_hand_check() -> None:
    res = artifact_consistency(DATA, DATA / "traces" / "job_history.csv")  # type: ignore[operator]
    assert res["jobs_checked"] == 50
    job1 = next(r for r in res["per_job"] if r["job"] == 1)  # Inception-v3, 20k samples per epoch: 38 s in out/
    assert job1["execution_s"] == 38.0 and job1["minimum_s"] > 38.0
    rows = res["per_job"]
    assert res["below_minimum"] == sum(r["execution_s"] < r["minimum_s"] for r in rows)
    assert res["below_generous_minimum"] == sum(r["execution_s"] < r["generous_minimum_s"] for r in rows)
    assert res["below_generous_minimum"] <= res["below_minimum"]
    assert all(r["generous_minimum_s"] < r["minimum_s"] for r in rows)


def test_missing_data_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--data"):
        Ones().run(OnesConfig(data=tmp_path))
