"""Pollux / Sia / DeepBoot workload CSV: `name,time,application,num_replicas,batch_size[,category][,duration,num_task]`.

Rows whose application starts with `infer-` (DeepBoot) are inference tasks, kept apart in
`Workload.inference`; everything else is a training job that requests `num_replicas` GPUs and the global
batch `batch_size`.
"""

from __future__ import annotations

import csv
from collections.abc import Collection
from pathlib import Path

from elastisched.core.types import JobSpec
from elastisched.workloads.schema import (
    InferenceTask,
    RowReader,
    Workload,
    check_sorted_unique,
    file_digest,
    nonempty,
    nonneg_float,
    positive_float,
    positive_int,
    require_columns,
)

REQUIRED = ("name", "time", "application", "num_replicas", "batch_size")
CATEGORIES = ("adaptive", "rigid", "scale-gpus")


def load_pollux_csv(path: str | Path, known_apps: Collection[str] | None = None,
                    name: str | None = None) -> Workload:
    path = Path(path)
    p = str(path)
    jobs: list[JobSpec] = []
    infer: list[InferenceTask] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        require_columns(p, list(reader.fieldnames or []), REQUIRED)
        for i, row in enumerate(reader, start=2):
            r = RowReader(p, i, row)
            job_name = r.get("name", nonempty)
            t = r.get("time", nonneg_float)
            app = r.get("application", nonempty)
            reps = r.get("num_replicas", positive_int)
            if app.startswith("infer-"):
                infer.append(InferenceTask(job_name, t, app, reps, r.get("duration", positive_float),
                                           r.get("num_task", positive_int, 1)))
                continue
            if known_apps is not None and app not in known_apps:
                raise r.fail("application", f"unknown application; known: {', '.join(sorted(known_apps))}")
            bs = r.get("batch_size", positive_int)
            cat = r.get("category", str, None)
            if cat is not None and cat not in CATEGORIES:
                raise r.fail("category", f"must be one of {CATEGORIES}")
            dur = r.get("duration", positive_float, None)
            jobs.append(JobSpec(job_id=job_name, submit_time=t, application=app, num_gpus=reps,
                                batch_size=bs, min_gpus=reps, max_gpus=reps, duration=dur, category=cat))
    return Workload(name or path.stem, tuple(check_sorted_unique(p, jobs)), p, file_digest(path),
                    tuple(sorted(infer, key=lambda x: (x.submit_time, x.name))))
