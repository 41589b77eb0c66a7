"""ONES trace loader (src/elastisched/workloads/ones.py): mapping, convergence rule, work calibration, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import peer_data
from elastisched.core.errors import WorkloadError
from elastisched.workloads.ones import (
    HISTORY_RUN,
    _seconds_per_unit,
    convergence_epoch,
    history_runs,
    load_ones_csv,
    ones_batch,
)

HISTORY = peer_data.ONES_HISTORY
needs_data = peer_data.needs("ones", "traces", "job_history.csv")
HEADER = "time,model,task,epoch_size,patience,batch_size,lr,max_lr,target_acc,num_gpus\n"


def test_convergence_rule_hand_checked() -> None:
    acc = np.array([0.3, 0.5, 0.505, 0.508, 0.6, 0.605])
    # counter: 0.3 reset, 0.5 reset, 0.505 +1, 0.508 +1 (< 0.5+0.01), 0.6 reset, 0.605 +1, then plateau +1, +1
    assert convergence_epoch(acc, target=0.9, patience=2) == 4
    assert convergence_epoch(acc, target=0.9, patience=3) == 8
    assert convergence_epoch(np.array([0.2, 0.95]), target=0.9, patience=1) == 2  # target reached counts


def test_ones_batch_linear_then_capped() -> None:
    assert ones_batch(32, 5e-4, 0.008, 8) == (256, 0.004)
    assert ones_batch(32, 5e-4, 0.008, 16) == (512, 0.008)
    assert ones_batch(32, 5e-4, 0.008, 32) == (512, 0.008)  # global batch held, 16 per GPU
    assert ones_batch(32, 5e-4, None, 64) == (2048, 0.032)


@needs_data
def test_history_mapping_covers_every_trace_configuration() -> None:
    runs = history_runs(HISTORY)  # type: ignore[arg-type]
    assert len(runs) == 21  # ids 0..19, id 0 reused with two epoch sizes (ones.md §4 quirk)
    assert set(HISTORY_RUN.values()) <= set(runs)
    import pandas as pd

    trace = pd.read_csv(Path(HISTORY).parent / "trace_1.csv")  # type: ignore[arg-type]
    keys = {(r.model, r.task, int(r.epoch_size)) for r in trace.itertuples()}
    assert keys <= set(HISTORY_RUN)
    for (_, _, es), key in HISTORY_RUN.items():
        assert key[1] == es


@needs_data
def test_first_50_jobs_and_work_calibration(models: object) -> None:
    wl = load_ones_csv(Path(HISTORY).parent / "trace_1.csv", HISTORY, models, num_jobs=50)  # type: ignore[arg-type]
    assert len(wl) == 50 and wl.jobs[0].submit_time == 0 and wl.jobs[-1].submit_time == 1558
    assert sum(j.num_gpus for j in wl.jobs) == 448  # ones.md §3.2
    j = next(j for j in wl.jobs if j.attrs["model"] == "resnet18" and j.attrs["epoch_size"] == 40000)
    a = j.attrs
    assert j.application == "cifar10" and j.batch_size == 1024 and a["convergence_epochs"] == 25
    # at the historical configuration the job takes E · epoch_size / measured throughput
    t = j.work_scale * _seconds_per_unit(models, "cifar10", a["history_gpus"], a["history_batch"])  # type: ignore[arg-type]
    assert t == pytest.approx(25 * 40000 / a["history_throughput"], rel=1e-9)
    assert a["epoch_work"] * 25 == pytest.approx(j.work_scale * models.app("cifar10").total_work)  # type: ignore[attr-defined]
    assert {x.application for x in wl.jobs} == {"cifar10", "imagenet", "bert"}


@needs_data
@pytest.mark.parametrize(("row", "column"), [
    ("0,resnet18,cifar,20000,10,256,0.005,0.08,0.7,0", "num_gpus"),
    ("0,resnet18,mnist,20000,10,256,0.005,0.08,0.7,4", "task"),
    ("0,bert,cifar,20000,10,256,0.005,0.08,0.7,4", "model"),
    ("0,resnet18,cifar,30000,10,256,0.005,0.08,0.7,4", "epoch_size"),
    ("0,resnet18,cifar,20000,10,256,0.005,0.001,0.7,4", "max_lr"),
    ("-1,resnet18,cifar,20000,10,256,0.005,0.08,0.7,4", "time"),
])
def test_bad_rows_name_the_column(tmp_path: Path, row: str, column: str, models: object) -> None:
    f = tmp_path / "t.csv"
    f.write_text(HEADER + "0,resnet18,cifar,20000,10,256,0.005,0.08,0.7,4\n" + row + "\n")
    with pytest.raises(WorkloadError) as e:
        load_ones_csv(f, HISTORY, models)  # type: ignore[arg-type]
    assert e.value.column == column and e.value.line == 3


@needs_data
def test_missing_column(tmp_path: Path, models: object) -> None:
    f = tmp_path / "t.csv"
    f.write_text("time,model\n0,resnet18\n")
    with pytest.raises(WorkloadError, match="missing column"):
        load_ones_csv(f, HISTORY, models)  # type: ignore[arg-type]
