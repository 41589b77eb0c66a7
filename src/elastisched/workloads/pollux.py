"""Pollux / Sia / DeepBoot workload CSV: `name,time,application,num_replicas,batch_size[,category][,duration,num_task]`.

Rows whose application starts with `infer-` (DeepBoot) are inference tasks, kept apart in
`Workload.inference`; everything else is a training job that requests `num_replicas` GPUs and the global
batch `batch_size`. Field ranges: `schema.FIELDS`. A row without a `category` is read as "adaptive": these are
AdaptDL jobs, whose GPU count and batch the scheduler may change — the Pollux artifact scales every one, and Sia's
artifact marks the exceptions "rigid" (our reading; `min_gpus = max_gpus = num_replicas` stays the request, and a
policy that honours only `elastic` sees no change). DeepBoot writes `-1` for `duration` / `num_task` on
training rows (they apply to inference tasks only): read as absent there (our reading of its CSVs).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

from elastisched.core.types import JobSpec
from elastisched.workloads.schema import (
    BATCH,
    DURATION,
    GPUS,
    NUM_TASK,
    SUBMIT_TIME,
    Field,
    InferenceTask,
    RowReader,
    Workload,
    csv_rows,
    file_digest,
    finish,
    name_text,
    read_text,
    require_columns,
)

REQUIRED = ("name", "time", "application", "num_replicas", "batch_size")
UNSET = ("-1", "-1.0")  # DeepBoot writes -1 in the inference-only columns of training rows


def _unset_or(f: Field) -> Callable[[str], float | int | None]:
    """DeepBoot's -1 ("not applicable") on a training row reads as absent; anything else must be in range."""
    def conv(v: str) -> float | int | None:
        return None if v.strip() in UNSET else f(v)
    return conv

CATEGORIES = ("adaptive", "rigid", "scale-gpus")
ADAPTIVE = "adaptive"  # a row without a category: an AdaptDL job (module docstring)


def load_pollux_csv(path: str | Path, known_apps: Collection[str] | None = None,
                    name: str | None = None) -> Workload:
    path = Path(path)
    p = str(path)
    jobs: list[tuple[int, JobSpec]] = []
    infer: list[InferenceTask] = []
    header, rows = csv_rows(p, read_text(path))
    require_columns(p, header, REQUIRED)
    for line, row in rows:
        r = RowReader(p, line, row)
        job_name = r.get("name", name_text)
        t = r.get("time", SUBMIT_TIME)
        app = r.get("application", name_text)
        reps = r.get("num_replicas", GPUS)
        bs = r.get("batch_size", BATCH)
        if app.startswith("infer-"):
            infer.append(InferenceTask(job_name, t, app, reps, r.get("duration", DURATION),
                                       r.get("num_task", NUM_TASK, 1)))
            continue
        if known_apps is not None and app not in known_apps:
            raise r.fail("application", f"unknown application; known: {', '.join(sorted(known_apps))}")
        cat = r.get("category", str, ADAPTIVE)
        if cat not in CATEGORIES:
            raise r.fail("category", f"must be one of {CATEGORIES}")
        dur = r.get("duration", _unset_or(DURATION), None)
        r.get("num_task", _unset_or(NUM_TASK), None)  # not used by a training job, but still a valid value
        jobs.append((line, JobSpec(job_id=job_name, submit_time=t, application=app, num_gpus=reps,
                                   batch_size=bs, min_gpus=reps, max_gpus=reps, duration=dur, category=cat)))
    return finish(p, name or path.stem, jobs, file_digest(path), infer)
