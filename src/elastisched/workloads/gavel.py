"""Gavel / Shockwave tab-separated traces (7-, 10- or 12-column rows).

Columns used: `job_type` ("ResNet-50 (batch size 64)"), `total_steps`, `scale_factor` (GPUs) and
`arrival_time`. Gavel's models are mapped to the nearest measured Pollux application (our reading; Gavel's
own throughputs are for K80/P100/V100 and carry no convergence data):
ResNet-18 → cifar10, ResNet-50 → imagenet, Recommendation → ncf, Transformer and LM → bert,
CycleGAN → yolov3, A3C → deepspeech2. The job's work is its `total_steps` at its batch size, converted to
reference-batch progress with the application's first-epoch gain.
"""

from __future__ import annotations

import re
from pathlib import Path

from elastisched.core.errors import WorkloadError
from elastisched.core.types import JobSpec
from elastisched.models.registry import PerfModels
from elastisched.workloads.schema import (
    BATCH,
    GPUS,
    STEPS,
    SUBMIT_TIME,
    RowReader,
    Workload,
    file_digest,
    finish,
    read_text,
)

GAVEL_APPS = {"ResNet-18": "cifar10", "ResNet-50": "imagenet", "Recommendation": "ncf", "Transformer": "bert",
              "LM": "bert", "CycleGAN": "yolov3", "A3C": "deepspeech2"}
LAYOUTS = {7: {"job_type": 0, "total_steps": 4, "arrival_time": 5, "scale_factor": 6},
           10: {"job_type": 0, "total_steps": 5, "scale_factor": 6, "arrival_time": 9},
           12: {"job_type": 0, "total_steps": 5, "scale_factor": 6, "arrival_time": 11}}


def _job_type(v: str) -> tuple[str, int]:
    m = re.fullmatch(r"(.+?)(?: \(batch size ([0-9]{1,12})\))?", v.strip())
    if not m or m.group(1) not in GAVEL_APPS:
        raise ValueError(f"expected '<model> [(batch size N)]' with model in {sorted(GAVEL_APPS)}")
    return m.group(1), BATCH(m.group(2)) if m.group(2) else 0


def load_gavel_tsv(path: str | Path, models: PerfModels, name: str | None = None) -> Workload:
    path = Path(path)
    p = str(path)
    jobs: list[tuple[int, JobSpec]] = []
    for i, line in enumerate(re.split(r"\r\n|\r|\n", read_text(path)), start=1):
        if not line.strip():
            continue
        cells = line.split("\t")
        layout = LAYOUTS.get(len(cells))
        if layout is None:
            raise WorkloadError(p, i, "row", len(cells), "expected 7, 10 or 12 tab-separated columns")
        r = RowReader(p, i, {k: cells[v] for k, v in layout.items()})
        model, bs = r.get("job_type", _job_type)
        app = models.app(GAVEL_APPS[model])
        steps = r.get("total_steps", STEPS)
        gpus = r.get("scale_factor", GPUS)
        t = r.get("arrival_time", SUBMIT_TIME)
        bs = int(min(max(bs, app.init_batch_size), app.max_batch_size))
        work = steps * app.efficiency.gain(bs, 0)
        jobs.append((i, JobSpec(job_id=f"{app.name}-{i - 1}", submit_time=t, application=app.name, num_gpus=gpus,
                                batch_size=max(bs, gpus * app.min_local_bsz), min_gpus=gpus, max_gpus=gpus,
                                work_scale=work / app.total_work, attrs={"gavel_model": model})))
    return finish(p, name or path.stem, jobs, file_digest(path))
