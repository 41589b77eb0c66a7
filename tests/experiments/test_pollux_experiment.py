"""`reproduce pollux` on one workload: verdicts computed from the same figures, report renders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from elastisched.core.errors import ConfigError
from elastisched.experiments.pollux_fidelity import PolluxConfig, PolluxFidelity, reference
from elastisched.experiments.writer import write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from rendering import check_page, checked_figures


def test_one_workload_against_the_artifact(tmp_path: Path) -> None:
    with checked_figures() as problems:
        res = PolluxFidelity().run(PolluxConfig(policies=("tiresias",), workloads=("workload-1",)))
    assert not problems, problems
    write_result(res, tmp_path)
    check_page(tmp_path / "report.html", "reproduce-pollux")
    data = json.loads((tmp_path / "pollux.json").read_text())["data"]["policies"]["tiresias"]
    ref = reference("tiresias")["workload-1"]
    assert data["reference"] == {"workload-1": ref}
    assert data["mean_error"] == pytest.approx(data["avg_jct"]["workload-1"] / ref - 1)
    assert res.verdicts[0].passed == (abs(data["mean_error"]) <= 0.05)
    assert (tmp_path / "tiresias.png").stat().st_size > 0


def test_a_policy_without_reference_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="policies"):
        PolluxFidelity().run(PolluxConfig(policies=("fifo",), workloads=("workload-1",)))
