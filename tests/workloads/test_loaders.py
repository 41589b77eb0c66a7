"""Workload loaders: formats parse, and a bad row names file, line, column and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastisched.core.errors import ConfigError, WorkloadError
from elastisched.models import PerfModels
from elastisched.workloads import load_workload
from elastisched.workloads.traces import application_for, load_raw_trace


def test_bundled_pollux_workload(models: PerfModels) -> None:
    w = load_workload("pollux:workload-6", models)
    assert len(w) == 160 and w.jobs[0].job_id == "cifar10-0" and w.jobs[0].num_gpus == 6
    assert [j.submit_time for j in w.jobs] == sorted(j.submit_time for j in w.jobs)


@pytest.mark.parametrize("row,col,val", [
    ("x,10,cifar10,-1,128", "num_replicas", "-1"),
    ("x,ten,cifar10,1,128", "time", "ten"),
    ("x,10,resnet9000,1,128", "application", None),
    ("x,10,cifar10,1,1.5", "batch_size", "1.5"),
])
def test_bad_row_is_located(tmp_path: Path, models: PerfModels, row: str, col: str, val: str | None) -> None:
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,num_replicas,batch_size\nok,0,ncf,1,256\n" + row + "\n")
    with pytest.raises(WorkloadError) as e:
        load_workload(str(p), models)
    assert e.value.line == 3 and e.value.column == col and e.value.path == str(p)
    if val is not None:
        assert e.value.value == val
    assert f"{p}:3" in str(e.value)


def test_missing_column_and_duplicates(tmp_path: Path, models: PerfModels) -> None:
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,batch_size\na,0,ncf,256\n")
    with pytest.raises(WorkloadError, match="num_replicas"):
        load_workload(str(p), models)
    p.write_text("name,time,application,num_replicas,batch_size\na,0,ncf,1,256\na,5,ncf,1,256\n")
    with pytest.raises(WorkloadError, match="duplicate"):
        load_workload(str(p), models)


def test_raw_trace_keeps_traced_duration(models: PerfModels, tmp_path: Path) -> None:
    p = tmp_path / "raw.csv"
    p.write_text("time,duration,num_gpus\n0,3600,1\n100,7200,4\n200,30,1\n300,600000,8\n")
    w = load_raw_trace(p, models)
    assert len(w) == 2  # 30 s job filtered out (< 60 s); the 8-GPU job is 1333 GPU-hours (>= 1000) and dropped
    assert [j.num_gpus for j in w.jobs] == [1, 4] and w.jobs[1].submit_time == 100.0
    from elastisched.core.cluster import parse_cluster
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate

    r = simulate(w, make_policy("fifo"), parse_cluster("4x4:t4"), models, SimConfig(restart_cost=0.0))
    got = r.jobs.set_index("job")["run_time"].to_dict()
    for j in w.jobs:
        assert got[j.job_id] == pytest.approx(j.duration, rel=1e-6)


def test_gpu_time_buckets() -> None:
    assert application_for(0.5, 0) == "cifar10" and application_for(0.5, 1) == "ncf"
    assert application_for(5, 0) == "deepspeech2" and application_for(50, 0) == "yolov3"
    assert application_for(500, 0) == "imagenet"


def test_bundled_philly_filters(models: PerfModels) -> None:
    w = load_workload("philly:sample=500,seed=1", models)
    assert len(w) == 500
    assert all(j.duration >= 60 and j.duration * j.num_gpus < 1000 * 3600 for j in w.jobs)
    assert load_workload("philly:sample=500,seed=1", models).jobs == w.jobs


def test_unknown_inputs(models: PerfModels) -> None:
    with pytest.raises(ConfigError, match="workload-99"):
        load_workload("pollux:workload-99", models)
    with pytest.raises(ConfigError, match="no such file"):
        load_workload("/nonexistent.csv", models)


def test_gavel_trace(models: PerfModels, tmp_path: Path) -> None:
    p = tmp_path / "g.trace"
    p.write_text("ResNet-50 (batch size 64)\tcmd\t-n\t1\t1000\t0.0\t2\n"
                 "CycleGAN\tcmd\t-n\t1\t500\t30.0\t1\n")
    w = load_workload(str(p), models)
    assert [j.application for j in w.jobs] == ["imagenet", "yolov3"] and w.jobs[0].num_gpus == 2
    p.write_text("Nonsense (batch size 1)\tcmd\t-n\t1\t1000\t0.0\t2\n")
    with pytest.raises(WorkloadError, match="job_type"):
        load_workload(str(p), models)
