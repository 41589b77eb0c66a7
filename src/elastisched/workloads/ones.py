"""ONES trace loader: `time,model,task,epoch_size,patience,batch_size,lr,max_lr,target_acc,num_gpus`
(ones.md §3.2; mapping and readings in docs/ones.md "Workload").

Each row becomes a `JobSpec` on a measured Pollux profile:

| trace model / task                           | Pollux application (T4 profile)   |
|----------------------------------------------|-----------------------------------|
| resnet18, vgg16, googlenet / cifar           | cifar10 (ResNet-18 on CIFAR-10)   |
| alexnet, resnet50, vgg16, inception_v3 / imagenet | imagenet (ResNet-50 on ImageNet) |
| bert / cola, mrpc, sst2                      | bert (BERT fine-tuning)           |

Convergence: each (model, task, epoch_size) has one run in the artifact's `job_history.csv` (`HISTORY_RUN`;
the file has no model column, so runs were matched by epoch size, lr per sample of batch, initial loss and
throughput — docs/ones.md). ONES's rule (ones.md §1: counter += 1 when acc ≥ target or acc < best + 0.01,
else reset; stop at `patience`) is applied to that run's accuracy curve, held at its last value past the end
of the log, giving E convergence epochs. The job's work is E epochs; `work_scale` (in units of the
application's full run) is set so that at the historical configuration (the run's global batch on
batch/local-batch GPUs, packed 4 per node) the job takes E · epoch_size / measured samples/s, the artifact's
own measured time. At other batch sizes the simulator's statistical-efficiency model slows or speeds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from elastisched.core.types import JobSpec
from elastisched.models.registry import PerfModels
from elastisched.workloads.schema import (
    ACCURACY,
    BATCH,
    EPOCH_SIZE,
    GPUS,
    LR,
    PATIENCE,
    SUBMIT_TIME,
    RowReader,
    Workload,
    csv_rows,
    file_digest,
    finish,
    name_text,
    read_text,
    require_columns,
)

COLUMNS = ("time", "model", "task", "epoch_size", "patience", "batch_size", "lr", "max_lr", "target_acc",
           "num_gpus")
APPLICATION = {"cifar": "cifar10", "imagenet": "imagenet", "cola": "bert", "mrpc": "bert", "sst2": "bert"}
MODELS = {"cifar": ("resnet18", "vgg16", "googlenet"), "imagenet": ("alexnet", "resnet50", "vgg16", "inception_v3"),
          "cola": ("bert",), "mrpc": ("bert",), "sst2": ("bert",)}
#: (model, task, epoch_size) -> (id, epoch_size) of its run in job_history.csv (ids repeat, so both are needed)
HISTORY_RUN: dict[tuple[str, str, int], tuple[int, int]] = {
    ("resnet18", "cifar", 40000): (3, 40000), ("resnet18", "cifar", 20000): (13, 20000),
    ("googlenet", "cifar", 40000): (5, 40000), ("googlenet", "cifar", 20000): (15, 20000),
    ("vgg16", "cifar", 40000): (4, 40000), ("vgg16", "cifar", 20000): (14, 20000),
    ("alexnet", "imagenet", 20000): (6, 20000), ("alexnet", "imagenet", 10000): (16, 10000),
    ("resnet50", "imagenet", 20000): (8, 20000), ("resnet50", "imagenet", 10000): (17, 10000),
    ("inception_v3", "imagenet", 20000): (9, 20000), ("inception_v3", "imagenet", 10000): (19, 10000),
    ("vgg16", "imagenet", 20000): (7, 20000), ("vgg16", "imagenet", 10000): (18, 10000),
    ("bert", "cola", 8000): (0, 8000), ("bert", "cola", 5000): (10, 5000),
    ("bert", "mrpc", 3600): (11, 3600), ("bert", "sst2", 20000): (2, 20000), ("bert", "sst2", 10000): (12, 10000),
}
GPUS_PER_NODE = 4
CONVERGENCE_DELTA = 0.01


def convergence_epoch(acc: np.ndarray, target: float, patience: int, delta: float = CONVERGENCE_DELTA) -> int:
    """First epoch (1-based) at which ONES's early-stop counter reaches `patience`; past the end of the curve
    the accuracy is held at its last value (a plateau), so the rule always fires."""
    best, count = 0.0, 0
    n = len(acc)
    for e in range(1, n + patience + 1):
        a = float(acc[min(e, n) - 1])
        if a >= target or a < best + delta:
            count += 1
        else:
            count, best = 0, a
        if count >= patience:
            return e
    return n + patience  # unreachable: a plateau always counts


@dataclass(frozen=True, slots=True)
class HistoryRun:
    acc: tuple[float, ...]
    loss: tuple[float, ...]
    initial_loss: float
    batch_size: int  # global batch of the run
    throughput: float  # median measured samples/s
    epochs_logged: int


def history_runs(path: str | Path) -> dict[tuple[int, int], HistoryRun]:
    """Runs of `job_history.csv` keyed by (id, epoch_size); a run is a block of consecutive epochs."""
    h = pd.read_csv(path)
    block = (h["epoch"].diff() != 1).cumsum()
    out: dict[tuple[int, int], HistoryRun] = {}
    for _, g in h.groupby(block, sort=True):
        key = (int(g["id"].iloc[0]), int(g["epoch_size"].iloc[0]))
        out.setdefault(key, HistoryRun(tuple(g["acc"].astype(float)), tuple(g["loss"].astype(float)),
                                       float(g["initial_loss"].iloc[0]), int(g["batch_size"].iloc[-1]),
                                       float(g["throughput"].median()), len(g)))
    return out


def ones_batch(local_bs: int, lr: float, max_lr: float | None, n: int) -> tuple[int, float]:
    """(global batch, lr) on n GPUs: linear scaling until lr·n > max_lr, then a fixed global batch (§1)."""
    if max_lr is None or lr * n <= max_lr:
        return local_bs * n, lr * n
    return max(n, (int(local_bs * max_lr / lr) // n) * n), max_lr


def _seconds_per_unit(models: PerfModels, app_name: str, gpus: int, batch: int) -> float:
    """Simulated seconds for one full application run (work_scale 1) at a fixed configuration."""
    app = models.app(app_name)
    return app.run_seconds(app.gpu_types[0], gpus, batch, GPUS_PER_NODE)


def load_ones_csv(path: str | Path, history: str | Path | Mapping[tuple[int, int], HistoryRun], models: PerfModels,
                  num_jobs: int | None = None, name: str | None = None) -> Workload:
    """The first `num_jobs` rows (all when None) of an ONES trace as `JobSpec`s (see module docstring).
    `history` is `job_history.csv`, or its runs already read by `history_runs` (to load many traces)."""
    path = Path(path)
    p = str(path)
    runs = history if isinstance(history, Mapping) else history_runs(history)
    scale_cache: dict[tuple[str, int, int], float] = {}
    jobs: list[tuple[int, JobSpec]] = []
    header, reader = csv_rows(p, read_text(path))
    require_columns(p, header, COLUMNS)
    for i, row in reader:
        if num_jobs is not None and len(jobs) >= num_jobs:
            break
        r = RowReader(p, i, row)
        t = r.get("time", SUBMIT_TIME)
        task = r.get("task", name_text).lower()
        if task not in APPLICATION:
            raise r.fail("task", f"unknown task; known: {', '.join(sorted(APPLICATION))}")
        model = r.get("model", name_text).lower()
        if model not in MODELS[task]:
            raise r.fail("model", f"unknown model for task {task}; known: {', '.join(MODELS[task])}")
        es = r.get("epoch_size", EPOCH_SIZE)
        key = HISTORY_RUN.get((model, task, es))
        if key is None or key not in runs:
            raise r.fail("epoch_size", f"no run of {model}/{task} with this epoch size in job_history.csv")
        patience = r.get("patience", PATIENCE)
        bs = r.get("batch_size", BATCH)
        lr = r.get("lr", LR)
        max_lr = r.get("max_lr", LR, None)
        if max_lr is not None and max_lr < lr:
            raise r.fail("max_lr", f"must be >= lr ({lr})")
        target = r.get("target_acc", ACCURACY)
        gpus = r.get("num_gpus", GPUS)
        run = runs[key]
        app_name = APPLICATION[task]
        epochs = convergence_epoch(np.array(run.acc), target, patience)
        hist_gpus = max(1, run.batch_size // bs)
        ck = (app_name, hist_gpus, run.batch_size)
        if ck not in scale_cache:
            scale_cache[ck] = _seconds_per_unit(models, app_name, hist_gpus, run.batch_size)
        seconds = epochs * es / run.throughput
        work_scale = seconds / scale_cache[ck]
        app = models.app(app_name)
        attrs: dict[str, Any] = {
            "model": model, "task": task, "epoch_size": es, "patience": patience, "local_batch": bs,
            "lr": lr, "max_lr": max_lr, "target_acc": target, "convergence_epochs": epochs,
            "epoch_work": work_scale * app.total_work / epochs, "initial_loss": run.initial_loss,
            "acc_curve": run.acc, "loss_curve": run.loss, "history_run": key,
            "history_gpus": hist_gpus, "history_batch": run.batch_size, "history_throughput": run.throughput}
        jobs.append((i, JobSpec(job_id=f"ones-{i - 2:04d}", submit_time=t, application=app_name, num_gpus=gpus,
                                batch_size=ones_batch(bs, lr, max_lr, gpus)[0], min_gpus=1, elastic=False,
                                work_scale=work_scale, category=f"{model}/{task}", attrs=attrs)))
    return finish(p, name or path.stem, jobs, file_digest(path))

