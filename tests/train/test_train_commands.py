"""`launch` and `profile` through Typer (CliRunner on a local app, as the elastisched CLI wires them)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import typer
from train_helpers import WORKER, losses, read_trace
from typer.testing import CliRunner

from elastisched.train.commands import register

PLACEMENT_COLS = ["placement", "local_bsz", "step_time", "sync_time"]
SCALABILITY_COLS = ["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"]
POLLUX = Path("/work/shared/peer-data/adaptdl-pollux/traces/cifar10")


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_launch_command_adaptive_batch_writes_hints(tmp_path: Path) -> None:
    """Adaptive global batch on 2 ranks (accumulation 2, 1) with the Pollux goodput rule, whose inputs
    include locally measured step times: every rank must still take the same decisions (else the run
    would deadlock), every sample is seen once per epoch, hints are written. (The similarity rule uses
    only all-reduced statistics; it is tested in process in test_train_adaptive.py.)"""
    rule = "gns"
    ck, tr = tmp_path / "ck", tmp_path / "tr"
    res = CliRunner().invoke(_app(), ["launch", "--nproc", "2", "--accum", "2,1", "--local-batch", "4",
                                      "--checkpoint-dir", str(ck), str(WORKER), "--epochs", "2",
                                      "--stats-interval", "2", "--trace", str(tr), "--autoscale", rule])
    assert res.exit_code == 0, res.output
    steps = sorted(losses(tr))
    assert steps == list(range(1, len(steps) + 1))
    recs = read_trace(tr)
    for epoch in (0, 1):
        seen = Counter(i for r in recs if r["epoch"] == epoch for i in r["idx"])
        assert sorted(seen) == list(range(96)) and set(seen.values()) == {1}
    hints = [json.loads(line) for line in (ck / "hints.jsonl").read_text().splitlines()]
    every_2nd = list(range(2, steps[-1] + 1, 2))
    # Every statistics step writes a hint; one whose two halves are not both non-empty (a short last step)
    # has no gradient statistics in it, only progress and throughput.
    assert [h["step"] for h in hints] == every_2nd
    stats = [h for h in hints if "gradParams" in h]
    assert len(stats) >= len(every_2nd) - 2
    assert len({h["globalBatchSize"] for h in hints}) > 1  # the batch really adapted
    h = stats[-1]
    assert h["rule"] == rule and h["throughput"] > 0 and 4 <= h["globalBatchSize"] <= 48
    assert set(h["gradParams"]) == {"sqr", "var"} and h["grad_sqr"] > 0


def test_launch_command_rejects_bad_accum(tmp_path: Path) -> None:
    res = CliRunner().invoke(_app(), ["launch", "--nproc", "2", "--accum", "1", str(WORKER)])
    assert res.exit_code != 0 and "--accum has 1 entries" in res.output


def test_profile_command_writes_pollux_format(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    res = CliRunner().invoke(_app(), ["profile", str(WORKER), "--local-batches", "8", "--workers", "1,2",
                                      "--steps", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    with open(out / "placements.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == PLACEMENT_COLS
    assert sorted((r[0], r[1]) for r in rows[1:]) == [("1", "8"), ("2", "8")]
    assert all(float(r[2]) > 0 and 0 <= float(r[3]) <= float(r[2]) for r in rows[1:])
    with open(out / "scalability.csv") as f:
        assert next(csv.reader(f)) == SCALABILITY_COLS
    if POLLUX.is_dir():  # same header as the artifact the simulator reads
        for name, cols in (("placements.csv", PLACEMENT_COLS), ("scalability.csv", SCALABILITY_COLS)):
            with open(POLLUX / name) as f:
                assert next(csv.reader(f)) == cols
