"""`philly:jobs=N`: N jobs with the Philly trace's (duration, GPUs) pairs and weekly rhythm, at a chosen load."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.core.cluster import PAI_GPUS
from elastisched.core.errors import ConfigError
from elastisched.models import PerfModels
from elastisched.workloads import load_workload
from elastisched.workloads.philly_scale import HOUR, WEEK_HOURS, arrivals, philly_jobs, weekly_profile
from elastisched.workloads.traces import application_for, read_trace


def _pairs() -> set[tuple[float, int]]:
    return {(d, g) for _, d, g, _ in read_trace(None).rows}


def test_seeded_and_deterministic(models: PerfModels) -> None:
    a = load_workload("philly:jobs=2000,seed=3", models)
    b = load_workload("philly:jobs=2000,seed=3", models)
    c = load_workload("philly:jobs=2000,seed=4", models)
    assert a.jobs == b.jobs and a.digest == b.digest
    assert a.jobs != c.jobs and a.digest != c.digest
    assert len(a) == 2000 and len({j.job_id for j in a.jobs}) == 2000
    times = [j.submit_time for j in a.jobs]
    assert times == sorted(times) and times[0] >= 0.0


def test_jobs_are_the_traces_jobs_mapped_as_the_trace_is(models: PerfModels) -> None:
    """Every job is one of the trace's filtered (duration, GPUs) jobs, given an application by its GPU-time
    bucket and a work that takes its traced duration at its requested size on 4-GPU T4 nodes (`traces.py`)."""
    traced: dict[float, set[int]] = {}
    for _, d, g, _ in read_trace(None).rows:
        traced.setdefault(d, set()).add(g)
    for j in philly_jobs(models, jobs=3000, seed=1).jobs:
        assert j.duration in traced and j.num_gpus in traced[j.duration]  # (no GPU count is capped here)
        assert j.application in {application_for(j.duration * j.num_gpus / 3600, k) for k in (0, 1)}
        run = models.app(j.application).run_seconds("t4", j.num_gpus, j.batch_size, 4)
        assert j.work_scale * run == pytest.approx(j.duration, rel=1e-9)


def test_duration_and_gpu_mix_are_the_traces(models: PerfModels) -> None:
    """Drawn with replacement from the trace: its duration quantiles and GPU-count shares come back."""
    rows = read_trace(None).rows
    d, g = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    wl = philly_jobs(models, jobs=40_000, seed=2, gpus=256)
    dd, gg = np.array([j.duration for j in wl.jobs]), np.array([j.num_gpus for j in wl.jobs])
    assert np.allclose(np.percentile(dd, [50, 90, 99]), np.percentile(d, [50, 90, 99]), rtol=0.05)
    assert abs(float(np.mean(gg == 1)) - float(np.mean(g == 1))) < 0.01
    assert abs(float(np.mean(gg >= 8)) - float(np.mean(g >= 8))) < 0.005


def test_offered_load_is_the_one_asked_for(models: PerfModels) -> None:
    """Σ duration × GPUs over the span is load × gpus: the last arrival is just before the end of that span."""
    for load, gpus in ((0.8, PAI_GPUS), (0.5, 512)):
        wl = philly_jobs(models, jobs=20_000, seed=5, load=load, gpus=gpus)
        span = sum(j.duration * j.num_gpus for j in wl.jobs) / (load * gpus)  # (no GPU count is capped here)
        assert 0.97 * span < wl.jobs[-1].submit_time < span


def test_arrivals_follow_the_weekly_profile() -> None:
    """Hour-of-week counts of the generated arrivals follow the trace's profile (and not a flat one)."""
    trace = read_trace(None)
    profile = weekly_profile(np.array([t for t, *_ in trace.rows]) + trace.t0)
    assert profile.shape == (WEEK_HOURS,) and profile.min() > 0 and profile.max() > 2 * profile.min()
    t = arrivals(profile, 200_000, 8 * 7 * 24 * HOUR, np.random.default_rng(0))
    assert np.all(np.diff(t) >= 0) and t[0] >= 0 and t[-1] < 8 * 7 * 24 * HOUR
    counts = np.bincount((t // HOUR).astype(int) % WEEK_HOURS, minlength=WEEK_HOURS)
    assert np.corrcoef(counts, profile)[0, 1] > 0.95
    flat = arrivals(np.ones(WEEK_HOURS), 200_000, 8 * 7 * 24 * HOUR, np.random.default_rng(0))
    flat_counts = np.bincount((flat // HOUR).astype(int) % WEEK_HOURS, minlength=WEEK_HOURS)
    assert np.corrcoef(flat_counts, profile)[0, 1] < 0.5


def test_bad_options_name_the_option(models: PerfModels) -> None:
    for spec, field in (("philly:jobs=0", "philly:jobs"), ("philly:jobs=10,load=0", "philly:load"),
                        ("philly:jobs=10,gpus=-1", "philly:gpus"), ("philly:jobs=10,sample=5", "philly:sample"),
                        ("philly:jobs=10,days=2", "philly:days"), ("philly:load=0.5", "philly:jobs"),
                        ("philly:jobs=10,jobs=11", "philly:jobs"), ("philly:jobs=1e9", "philly:jobs")):
        with pytest.raises(ConfigError) as e:
            load_workload(spec, models)
        assert e.value.field == field, spec
    with pytest.raises(ConfigError, match="would span"):
        load_workload("philly:jobs=1000000,load=0.001,gpus=1", models)
