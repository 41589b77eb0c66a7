"""Capacity planning: the knee rule on hand-made curves, the target answer, and the command end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from elastisched.core.errors import ConfigError
from elastisched.sim.plan import cluster_specs, knee


def test_knee_is_the_point_farthest_below_the_chord() -> None:
    # 1/x-like curve: the bend is at the second point
    assert knee([1, 2, 3, 4, 5], [10.0, 3.0, 2.0, 1.5, 1.0]) == 2
    assert knee([1, 2, 3], [3.0, 2.0, 1.0]) is None  # a straight line has no knee
    assert knee([1, 2], [2.0, 1.0]) is None


def test_cluster_specs_whole_nodes() -> None:
    assert cluster_specs([32, 48], 4, "t4") == {"8x4:t4": 32, "12x4:t4": 48}
    with pytest.raises(ConfigError, match="--cluster-sizes"):
        cluster_specs([30], 4, "t4")


def test_plan_command_answers_and_writes_the_report(tmp_path: Path) -> None:
    from elastisched.cli.main import app

    out = tmp_path / "plan"
    res = CliRunner().invoke(app, ["plan", "-w", "synthetic:num_jobs=40,rate=30,seed=2", "--cluster-sizes",
                                   "8,16,32", "-p", "fifo", "--target-p95-queue", "1e9", "--out", str(out)])
    assert res.exit_code == 0, res.output
    plan = json.loads((out / "plan.json").read_text())["plan"]["fifo"]
    assert plan["gpus"] == [8, 16, 32] and plan["needed_gpus"] == 8  # every size meets a huge target
    assert plan["p95_queue"][0] >= plan["p95_queue"][-1]  # more GPUs never queue longer here
    assert {"plan.csv", "plan.png", "report.html"} <= {p.name for p in out.iterdir()}
    bad = CliRunner().invoke(app, ["plan", "-w", "pollux:workload-1", "--cluster-sizes", "3x", "--out",
                                   str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--cluster-sizes" in bad.output
