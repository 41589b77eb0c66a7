"""`Rows.to_csv` writes what pandas' `DataFrame(rows).to_csv(index=False)` writes (sim run no longer imports
pandas to write jobs.csv / timeline.csv)."""

from __future__ import annotations

import pandas as pd

from elastisched.sim.runner import run_policies, setup
from elastisched.sim.table import Rows


def test_same_bytes_as_pandas_on_mixed_columns() -> None:
    cols = ["name", "ints", "ints_none", "floats", "mixed", "text_none", "flag", "nan", "all_none"]
    rows = [("a", 1, 2, 0.1, 3, "x", True, float("nan"), None),
            ("b,c", 2, None, 1e-05, 2.5, None, False, 1.0, None),
            ('q"uote', 3, 4, 123456789.125, 0, "", True, 2.0, None)]
    assert Rows(cols, rows).to_csv() == pd.DataFrame(rows, columns=cols).to_csv(index=False)
    assert Rows(cols, []).to_csv() == pd.DataFrame([], columns=cols).to_csv(index=False)


def test_a_run_writes_what_pandas_would() -> None:
    s = setup("synthetic:num_jobs=25,rate=20,seed=3", "4x4:t4")
    r = run_policies(s, ["tiresias"], 0)["tiresias"]
    assert r.job_rows.to_csv() == r.jobs.to_csv(index=False)
    assert r.timeline_rows.to_csv() == r.timeline.to_csv(index=False)
    assert len(r.jobs) == 25 and list(r.jobs.columns) == r.job_rows.columns


def test_tail_entries_are_the_whole_epochs_after_the_log() -> None:
    """A finished job's run of whole epochs is kept as a range (`JobState.work_tail`); `tail_entries` expands it
    to the entries one per epoch would have given, in epoch order."""
    import numpy as np

    from elastisched.core.types import JobSpec
    from elastisched.engine.jobstate import JobState

    bounds = np.array([0.0, 1.0, 2.5, 4.0, 7.0])
    job = JobState(JobSpec("j", 0.0, "cifar10", 1, 128), None, bounds.tolist(), work_tail=("t4", (4,), 1, 4, 1.0))
    tail = job.tail_entries()
    assert tail is not None and tail[0] == ("t4", (4,))
    assert tail[1].tolist() == [1, 2, 3] and tail[2].tolist() == [1.5, 1.5, 3.0]
    # begun past its first epoch's start (measured progress): that epoch's work is what was left of it
    job.work_tail = ("t4", (4,), 1, 4, 1.5)
    assert job.tail_entries()[2].tolist() == [1.0, 1.5, 3.0]  # type: ignore[index]


def test_finishing_run_logs_every_epoch() -> None:
    """A job that runs undisturbed to the end: its log (dict + tail) has one entry per epoch, each the epoch's
    whole work, and they add up to the job's total."""
    import numpy as np

    from elastisched.core.types import Allocation, JobSpec
    from elastisched.engine.jobstate import new_state
    from elastisched.models import PerfModels

    models = PerfModels.load()
    spec = JobSpec("j", 0.0, "cifar10", 2, 128, work_scale=0.05)
    job = new_state(spec, models.app("cifar10"), 0.0)
    job.apply(Allocation((("n0", 2),)), 0.0, {"n0": "t4"}, 30.0)
    t_end = job.finish_time()
    job.advance(t_end / 3)
    mid = job.epoch
    job.advance(t_end, finishing=True)
    assert job.work_tail is not None and job.work_tail[2:4] == (mid + 1, len(job.bounds) - 1)
    assert max(e for _, _, e in job.work_by_config) == mid  # the epochs after it are the tail's alone
    tail = job.tail_entries()
    assert tail is not None
    epochs = [e for _, _, e in job.work_by_config] + tail[1].tolist()
    work = np.array(list(job.work_by_config.values()) + tail[2].tolist())
    assert epochs == list(range(len(job.bounds) - 1))
    assert np.allclose(work, np.diff(job.bounds_arr)) and abs(work.sum() - job.total) < 1e-9 * job.total


def test_a_missing_cell_after_others_keeps_the_rows_aligned() -> None:
    """A row whose numbers hold a None after other cells (a job that failed before it ever started: no start
    time) is one row of NaN-for-None, not a half-appended row followed by the whole one."""
    from elastisched.sim.table import Table

    t = Table(["a", "b", "c", "name"], ("name",))
    t.append((1.0, 2.0, 3), ("x",))
    t.append((4.0, None, 6), ("y",))
    t.append((7.0, 8.0, 9), ("z",))
    frozen = t.freeze()
    assert frozen.rows == [(1.0, 2.0, 3, "x"), (4.0, None, 6, "y"), (7.0, 8.0, 9, "z")]


def test_a_job_that_fails_before_it_starts_has_its_row() -> None:
    from elastisched.core.cluster import parse_cluster
    from elastisched.core.types import JobSpec
    from elastisched.models import PerfModels
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.workloads.schema import Workload

    jobs = tuple(JobSpec(j, t, "cifar10", 4, 512, work_scale=0.05) for j, t in (("a", 0.0), ("b", 1.0)))
    r = simulate(Workload("hand", jobs, "t", "0"), make_policy("fifo"), parse_cluster("1x4:t4"),
                 PerfModels.load(None), SimConfig(failures=((10.0, "b"),)))
    b = r.jobs.set_index("job").loc["b"]
    assert b.state == "FAILED" and pd.isna(b.start) and b.end == 10.0 and b.jct == 9.0 and b.run_time == 0.0
    assert r.job_rows.to_csv() == r.jobs.to_csv(index=False)
