"""Pollux / Sia / DeepBoot workload CSV: `name,time,application,num_replicas,batch_size[,category][,duration,num_task]`.

Rows whose application starts with `infer-` (DeepBoot) are inference tasks, kept apart in
`Workload.inference`; everything else is a training job that requests `num_replicas` GPUs and the global
batch `batch_size`. Field ranges: `schema.FIELDS`.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from elastisched.core.types import JobSpec
from elastisched.workloads.schema import (
    BATCH,
    DURATION,
    GPUS,
    NUM_TASK,
    SUBMIT_TIME,
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
CATEGORIES = ("adaptive", "rigid", "scale-gpus")


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
        if app.startswith("infer-"):
            infer.append(InferenceTask(job_name, t, app, reps, r.get("duration", DURATION),
                                       r.get("num_task", NUM_TASK, 1)))
            continue
        if known_apps is not None and app not in known_apps:
            raise r.fail("application", f"unknown application; known: {', '.join(sorted(known_apps))}")
        bs = r.get("batch_size", BATCH)
        cat = r.get("category", str, None)
        if cat is not None and cat not in CATEGORIES:
            raise r.fail("category", f"must be one of {CATEGORIES}")
        dur = r.get("duration", DURATION, None)
        jobs.append((line, JobSpec(job_id=job_name, submit_time=t, application=app, num_gpus=reps,
                                   batch_size=bs, min_gpus=reps, max_gpus=reps, duration=dur, category=cat)))
    return finish(p, name or path.stem, jobs, file_digest(path), infer)
