"""The fuzz suite's oracle and case runner (tests/workloads/test_fuzz_workloads.py; its docstring says what is
checked): the documented ranges an accepted workload must lie in, a per-case deadline, the tally of cases and
failures, and the JSON summary written to `$ELASTISCHED_FUZZ_OUT`."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.core.errors import ConfigError, WorkloadError
from elastisched.workloads import Workload

SEED = int(os.environ.get("ELASTISCHED_FUZZ_SEED", "0"))
CASE_LIMIT_S = 5.0
# the documented ranges (docs/workloads.md), restated here so that the oracle does not trust the schema
MAX_TIME = 10 * 365 * 86400.0
RANGES = {"submit_time": (0.0, MAX_TIME), "num_gpus": (1, 65_536), "batch_size": (1, 2**20),
          "work_scale": (0.0, 1e6), "duration": (0.0, MAX_TIME)}


class Hang(Exception):
    pass


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def on_alarm(*_: object) -> None:
        raise Hang(f"case ran past {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_accepted(w: Workload) -> str | None:
    """Independent range oracle for an accepted workload."""
    if not w.jobs:
        return "empty workload accepted"
    for j in w.jobs:
        for col, (lo, hi) in RANGES.items():
            v = getattr(j, col)
            if v is None and col == "duration":
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
                return f"{j.job_id}: {col}={v!r} outside [{lo}, {hi}]"
            if col in ("num_gpus", "batch_size") and not isinstance(v, int):
                return f"{j.job_id}: {col}={v!r} not an integer"
        if j.work_scale <= 0 or (j.duration is not None and j.duration <= 0):
            return f"{j.job_id}: non-positive work_scale/duration"
    return None


@dataclass
class Tally:
    rows: int = 0
    files: int = 0
    accepted: int = 0
    rejected: int = 0
    slowest: float = 0.0
    failures: list[str] | None = None
    kept: list[Workload] | None = None  # a sample of accepted workloads, simulated afterwards
    by_format: Counter[str] | None = None
    cases_by_format: Counter[str] | None = None
    seconds_by_format: Counter[str] | None = None
    n_failures: int = 0

    def __post_init__(self) -> None:
        self.failures, self.kept = [], []
        self.by_format, self.cases_by_format, self.seconds_by_format = Counter(), Counter(), Counter()

    def fail(self, what: str) -> None:
        assert self.failures is not None
        self.n_failures += 1
        if len(self.failures) < 30:
            self.failures.append(what[:400])


def run_case(t: Tally, fmt: str, fn: Callable[[], Any], check: Callable[[Exception | None, Any], str | None],
             what: str, rows: int = 1) -> None:
    t.rows += rows
    t.files += 1
    assert t.by_format is not None and t.cases_by_format is not None
    t.by_format[fmt] += rows
    t.cases_by_format[fmt] += 1
    t0 = time.perf_counter()
    err: Exception | None = None
    out: Any = None
    try:
        with deadline(CASE_LIMIT_S):
            out = fn()
    except (WorkloadError, ConfigError) as e:
        err = e
    except Exception as e:  # a traceback or a hang: the failure this suite exists to find
        t.fail(f"{fmt}: {what}: {type(e).__name__}: {e}")
        return
    t.slowest = max(t.slowest, time.perf_counter() - t0)
    assert t.seconds_by_format is not None
    t.seconds_by_format[fmt] += time.perf_counter() - t0
    if err is not None:
        t.rejected += 1
        msg = str(err)
        if "\n" in msg or "\r" in msg or len(msg) > 600:
            t.fail(f"{fmt}: {what}: message not one short line: {msg[:200]!r}")
    elif getattr(out, "exit_code", 0) != 0:  # a CLI invocation that refused its options
        t.rejected += 1
    else:
        t.accepted += 1
        if isinstance(out, Workload) and t.kept is not None and t.accepted % 25 == 1:
            t.kept.append(out)
    bad = check(err, out)
    if bad:
        t.fail(f"{fmt}: {what}: {bad}")


def report(t: Tally, seconds: float, name: str) -> None:
    assert t.by_format is not None and t.cases_by_format is not None
    summary = {"seed": SEED, "suite": name, "malformed_rows": t.rows, "cases": t.files, "accepted": t.accepted,
               "rejected": t.rejected, "rows_by_format": {k: v for k, v in t.by_format.items() if v},
               "cases_by_format": dict(t.cases_by_format), "formats": len(t.cases_by_format),
               "seconds_by_format": {k: round(v, 1) for k, v in (t.seconds_by_format or {}).items()},
               "slowest_case_s": round(t.slowest, 3), "seconds": round(seconds, 1), "failures": t.n_failures}
    print(json.dumps(summary))
    out = os.environ.get("ELASTISCHED_FUZZ_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"fuzz_{name}.json").write_text(json.dumps(summary, indent=2))
