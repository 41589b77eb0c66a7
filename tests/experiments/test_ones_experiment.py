"""`reproduce ones` end to end on a few jobs (the full 50-job run is the CLI's job)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import peer_data
from elastisched.core.errors import ConfigError
from elastisched.experiments.ones import TUNED, Ones, OnesConfig, artifact_results, run_ones
from elastisched.report.experiment import write_result

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
    cfg = OnesConfig(data=DATA, jobs=6, policies=("ones", "tiresias", "optimus"), refit=False)  # type: ignore[arg-type]
    with checked_figures() as problems:
        res = Ones().run(cfg)
    assert not problems, problems
    write_result(res, tmp_path)
    check_page(tmp_path / "report.html", "reproduce-ones")
    for f in ("ones.json", "report.html", "jct.png", "execution.png", "queuing.png", "jobs-ones.csv"):
        assert (tmp_path / f).stat().st_size > 0
    saved = json.loads((tmp_path / "ones.json").read_text())["data"]
    assert saved["policies"]["ones"]["finished"] == 6
    assert saved["jct_ratio_vs_tiresias"] == pytest.approx(res.data["policies"]["tiresias"]["mean_jct"]
                                                            / res.data["policies"]["ones"]["mean_jct"])
    assert saved["resize_cost_s"] == 8.0 and saved["restart_cost_s"] == 30.0  # the same costs for every policy
    # the isolated per-job bound holds: no policy beats the job running alone at its best sizes
    bound = saved["lower_bound_mean_jct"]
    assert 30.0 < bound["ones"] <= saved["policies"]["ones"]["mean_jct"]
    assert bound["fixed"] <= min(saved["policies"][p]["mean_jct"] for p in ("tiresias", "optimus"))
    assert [v.passed for v in res.verdicts] == [saved["jct_ratio_vs_tiresias"] >= 2.0,
                                                saved["jct_ratio_vs_optimus"] >= 1.8]


@needs_data
def test_reproduction_runs_tuned_and_faithful_ones() -> None:
    cfg = OnesConfig(data=DATA, jobs=4, policies=("ones", "tiresias", "ones-faithful"))  # type: ignore[arg-type]
    data, results = run_ones(cfg, ones_options={**TUNED, "refit": False})
    assert data["ones_options"]["start"] == "node" and {"ones", "ones-faithful"} <= data["policies"].keys()
    assert data["faithful_jct_ratio_vs_tiresias"] == pytest.approx(data["policies"]["tiresias"]["mean_jct"]
                                                                    / data["policies"]["ones-faithful"]["mean_jct"])
    assert len(results["ones-faithful"].jobs) == 4


def test_missing_data_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--data"):
        Ones().run(OnesConfig(data=tmp_path))
