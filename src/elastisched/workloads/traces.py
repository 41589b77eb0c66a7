"""Raw `(submit, duration, num_gpus)` cluster traces (e.g. the 82k-job Philly trace) as application jobs.

Such traces name no model and no batch size. We map each job to a Pollux application by its GPU-time
bucket, in the spirit of the Pollux artifact's workload generator (`simulator/workload.py`), whose buckets
we reuse; the rest of the mapping is ours:

| GPU-time          | application                                        |
|-------------------|----------------------------------------------------|
| < 1 GPU-hour      | cifar10 or ncf (alternating by a seeded draw)      |
| 1 – 10 GPU-hours  | deepspeech2 or bert (seeded draw)                  |
| 10 – 100          | yolov3                                             |
| ≥ 100             | imagenet                                           |

The job keeps the trace's GPU count, and its global batch is the application's initial (smallest profiled)
batch times the GPU count, clamped to the profiled range. Its amount of work (`work_scale`) is set so that
at its requested size, packed on nodes of `gpus_per_node`, it runs for exactly the traced duration —
so a non-elastic policy replays the trace's GPU-time, while an elastic one changes it through the
measured throughput and efficiency models.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import numpy as np

from elastisched.core.errors import WorkloadError
from elastisched.core.types import JobSpec
from elastisched.models.registry import PerfModels
from elastisched.workloads.schema import (
    GPUS,
    MAX_TIME,
    RAW_DURATION,
    RAW_TIMESTAMP,
    RowReader,
    Workload,
    csv_rows,
    file_digest,
    finish,
    looks_numeric,
    read_text,
    require_columns,
)

BUCKETS = ((1.0, ("cifar10", "ncf")), (10.0, ("deepspeech2", "bert")), (100.0, ("yolov3",)),
           (float("inf"), ("imagenet",)))


def bundled_philly() -> Path:
    return Path(str(resources.files("elastisched.workloads") / "data" / "pollux" / "philly.csv.gz"))


def _parse_time(v: str) -> float:
    """Unix seconds, or an ISO 8601 date (a date without a zone is read as UTC, so runs do not depend on
    the machine's time zone)."""
    if looks_numeric(v):
        return float(RAW_TIMESTAMP(v))
    if not (v.isascii() and len(v) <= 40):
        raise ValueError("not a number of seconds nor an ISO date such as 2017-10-09 07:01:55")
    try:
        dt = datetime.fromisoformat(v.strip())
    except ValueError:
        raise ValueError("not a number of seconds nor an ISO date such as 2017-10-09 07:01:55") from None
    t = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    return float(RAW_TIMESTAMP.check(t))


def application_for(gpu_hours: float, draw: int) -> str:
    for bound, apps in BUCKETS:
        if gpu_hours < bound:
            return apps[draw % len(apps)]
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True)
class RawTrace:
    """A raw trace's jobs that pass the filters: `(time, duration, GPUs, line)` in time order, rebased to start
    at 0; `t0` the time they were rebased by (Unix seconds of the first job: `philly_scale` reads the hour of
    the week from it) and the name of the time column."""

    rows: list[tuple[float, float, int, int]]
    t0: float
    time_column: str


def read_trace(path: str | Path | None, *, min_duration: float = 60.0, max_gpu_hours: float = 1000.0) -> RawTrace:
    """The jobs of a raw trace (the bundled Philly trace when `path` is None) that pass the duration /
    GPU-time filters."""
    path = Path(path) if path is not None else bundled_philly()
    p = str(path)
    header, reader = csv_rows(p, read_text(path))
    tcol = "timestamp" if "timestamp" in header else "time"
    require_columns(p, header, (tcol, "duration", "num_gpus"))
    rows: list[tuple[float, float, int, int]] = []
    for i, row in reader:
        r = RowReader(p, i, row)
        t = r.get(tcol, _parse_time)
        d = r.get("duration", RAW_DURATION)
        g = r.get("num_gpus", GPUS)
        if d < min_duration or d * g >= max_gpu_hours * 3600:
            continue
        rows.append((t, d, g, i))
    if not rows:
        raise WorkloadError(p, 1, "duration", None, "no job passes the duration / GPU-time filters")
    rows.sort()
    t0, first = rows[0][0], rows[0][3]
    for t, _, _, i in rows:
        if t - t0 > MAX_TIME:
            raise WorkloadError(p, i, tcol, t, f"{t - t0:.0f} s after the first job (line {first}); a trace may "
                                f"span at most {MAX_TIME:.0f} s")
    return RawTrace([(t - t0, d, g, i) for t, d, g, i in rows], t0, tcol)


def job_from_trace(models: PerfModels, job_id: str, t: float, d: float, g: int, draw: int, *, gpu_type: str = "t4",
                   gpus_per_node: int = 4, cache: dict[tuple[str, int], float]) -> JobSpec:
    """One traced `(submit time t, duration d, GPUs g)` job as an application job (module docstring); `cache`
    keeps the run time of each (application, GPUs) for the caller's whole trace."""
    app_name = application_for(d * g / 3600.0, draw)
    app = models.app(app_name)
    batch = int(min(max(app.init_batch_size * g, app.init_batch_size), app.max_batch_size))
    g = min(g, app.max_batch_size // app.min_local_bsz)  # the profile cannot spread further
    key = (app_name, g)
    if key not in cache:
        cache[key] = app.run_seconds(gpu_type, g, batch, gpus_per_node)
    return JobSpec(job_id=job_id, submit_time=float(t), application=app_name, num_gpus=g, batch_size=batch,
                   min_gpus=g, max_gpus=g, work_scale=d / cache[key], duration=d)


def load_raw_trace(path: str | Path | None, models: PerfModels, *, seed: int = 0, min_duration: float = 60.0,
                   max_gpu_hours: float = 1000.0, start: float | None = None, end: float | None = None,
                   sample: int | None = None, gpu_type: str = "t4", gpus_per_node: int = 4,
                   max_gpus: int | None = None, name: str | None = None) -> Workload:
    """Load `timestamp|time,duration,num_gpus[,gpu_time]` rows; times are rebased to start at 0."""
    path = Path(path) if path is not None else bundled_philly()
    p = str(path)
    trace = read_trace(path, min_duration=min_duration, max_gpu_hours=max_gpu_hours)
    rows = trace.rows
    if start is not None or end is not None:
        lo, hi = start or 0.0, end if end is not None else float("inf")
        rows = [(t - lo, d, g, i) for t, d, g, i in rows if lo <= t < hi]
    rng = np.random.default_rng(seed)
    if sample is not None and sample < len(rows):
        keep = np.sort(rng.choice(len(rows), size=sample, replace=False))
        rows = [rows[k] for k in keep]
    draws = rng.integers(0, 1 << 30, size=len(rows))
    cache: dict[tuple[str, int], float] = {}
    prefix = path.name.split(".")[0]
    jobs = [(line, job_from_trace(models, f"{prefix}-{line - 2}", t, d, min(g, max_gpus) if max_gpus is not None
                                  else g, int(draw), gpu_type=gpu_type, gpus_per_node=gpus_per_node, cache=cache))
            for (t, d, g, line), draw in zip(rows, draws, strict=True)]
    if not jobs:
        raise WorkloadError(p, 1, trace.time_column, None, "no job in the chosen time window")
    return finish(p, name or prefix, jobs, file_digest(path), keep_order=True)
