"""`Rows.to_csv` writes what pandas' `DataFrame(rows).to_csv(index=False)` writes (sim run no longer imports
pandas to write jobs.csv / timeline.csv)."""

from __future__ import annotations

import pandas as pd

from elastisched.runner import run_policies, setup
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


def test_work_log_keeps_keys_order_and_values() -> None:
    from elastisched.sim.table import WorkLog

    work = {("t4", (4, 4), 0): 1.5, ("t4", (2,), 0): 0.25, ("t4", (4, 4), 1): 1e-3, ("v100", (4, 4), 1): 3.0}
    log = WorkLog(work)
    assert list(log.items()) == list(work.items()) and list(log) == list(work) and len(log) == 4
    assert log["t4", (2,), 0] == 0.25 and dict(log) == work
