"""`trace describe`: counts that add up, durations that match the trace, offered load by hand, and the
command on the bundled and the peers' traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from elastisched.core.cluster import parse_cluster
from elastisched.models import PerfModels
from elastisched.workloads import load_workload
from elastisched.workloads.describe import describe

PEER = Path(__file__).resolve().parents[2] / ".." / "shared" / "peer-data"


def test_counts_add_up_and_offered_load_is_requested_gpu_time_over_capacity(models: PerfModels) -> None:
    wl = load_workload("pollux:workload-6", models)
    nodes = parse_cluster("16x4:t4")
    d = describe(wl, models, nodes)
    assert d["jobs"] == 160 == sum(d["applications"].values()) == sum(d["gpu_demand"].values())
    assert sum(d["arrivals_by_day_of_week"]) == 160
    span = max(j.submit_time for j in wl.jobs) - min(j.submit_time for j in wl.jobs)
    by_hand = sum(models.app(j.application).run_seconds("t4", j.num_gpus, j.batch_size, 4) * j.work_scale
                  * j.num_gpus for j in wl.jobs) / (64 * span)
    assert d["offered_load"] == pytest.approx(by_hand, rel=1e-9)


def test_raw_trace_durations_are_the_traced_ones(tmp_path: Path, models: PerfModels) -> None:
    f = tmp_path / "trace.csv"
    f.write_text("timestamp,duration,num_gpus\n0,600,1\n60,7200,4\n120,3600,2\n")
    wl = load_workload(str(f), models)
    d = describe(wl, models, parse_cluster("4x4:t4"))
    np.testing.assert_allclose(sorted(d["_durations"]), [600, 3600, 7200], rtol=1e-6)
    assert d["gpu_hours_requested"] == pytest.approx((600 + 7200 * 4 + 3600 * 2) / 3600, rel=1e-6)


@pytest.mark.parametrize("trace", ["pollux:workload-1", "philly:sample=3000,seed=1",
                                   "sia/workloads/saturn/workload-1.csv", "deepboot/workload/small.csv"])
def test_describe_command_writes_report(tmp_path: Path, trace: str) -> None:
    from elastisched.cli.main import app

    if "/" in trace:
        path = PEER / trace
        if not path.exists():
            pytest.skip(f"../shared/peer-data missing: {path}")
        trace = str(path)
    res = CliRunner().invoke(app, ["trace", "describe", trace, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "describe.json").read_text())
    assert d["jobs"] > 0 and d["offered_load"] > 0 and d["duration_s"]["p50"] > 0
    assert {"describe.png", "report.html"} <= {p.name for p in tmp_path.iterdir()}

