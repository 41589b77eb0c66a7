"""Step 1 of the calibration benchmark (`calibration.py`): the job both bodies run, and its profile.

The example MLP (`examples/linreg_elastic.py`) at one fixed global batch, profiled on this machine with
`elastisched profile` at the two points the jobs run at, written in the Pollux format the simulator and the
service's models read (`service.profiles.load_models`), with the validation and meta files they need.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "linreg_elastic.py"
APP = "linreg"
BATCH = 2048  # global batch of every job (the profile's reference batch): ~0.1 s steps, so all-reduce waits on
# two busy cores do not dominate the step time
N_SAMPLES = 16384
STEPS_PER_EPOCH = N_SAMPLES // BATCH
#: MLP large enough that two workers beat one on CPU (gloo all-reduce of 0.26 M parameters per step)
MODEL_ARGS = ["--hidden", "1024", "--dim", "256", "--n", str(N_SAMPLES), "--lr", "0.001"]  # 0.05 diverges
PROFILE_STEPS = 12
PROFILE_ROUNDS = 3
PROFILE_N = PROFILE_STEPS * BATCH  # a profiling epoch must hold --steps steps of the global batch


def write_validation(app_dir: Path, batch: int = BATCH, steps_per_epoch: int = STEPS_PER_EPOCH) -> None:
    """One epoch of progress at the reference batch (jobs set their length with work_scale = epochs).

    At the reference batch the statistical gain is 1 whatever the gradient noise (grad_var 0), so progress
    is counted in optimizer steps, as the live job counts them."""
    with open(app_dir / f"validation-{batch}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["progress", "iteration", "metric", "grad_sqr", "grad_var"])
        w.writerow([steps_per_epoch, steps_per_epoch, 0.0, 1.0, 0.0])


def write_meta(app_dir: Path, restart_cost_s: float | None, gpu_type: str = "cpu") -> None:
    (app_dir / "meta.json").write_text(json.dumps({"gpu_type": gpu_type, "restart_cost_s": restart_cost_s}))


def _profile_cmd(out: Path, workers: int, local: int, steps: int) -> list[str]:
    return [sys.executable, "-m", "elastisched.train.commands", "profile", str(SCRIPT), "--local-batches", str(local),
            "--workers", str(workers), "--steps", str(steps), "--out", str(out), *MODEL_ARGS,
            "--n", str(PROFILE_N)]  # the last --n wins


def _read_point(out: Path) -> tuple[float, float]:
    with open(out / "placements.csv", encoding="utf-8") as f:
        row = next(csv.DictReader(f))
    return float(row["step_time"]), float(row["sync_time"])


def run_profile(app_dir: Path, isolated_dir: Path, steps: int = PROFILE_STEPS,
                rounds: int = PROFILE_ROUNDS) -> list[dict[str, Any]]:
    """`elastisched profile` on the example at the two points the jobs run at (1 worker x the batch, 2 workers
    x half of it), `rounds` times round-robin, each a fresh job; the median per point is written (same
    writer, same format). On two cores shared with other work one measurement can be 2x off (a burst of
    someone else's load); interleaved repetitions spread such bursts over the points.

    The 1-worker point is measured twice per round: **co-located** (two profile jobs at once, as two 1-worker
    jobs share the 2-slot cluster live; written to `app_dir`, the models of both bodies) and **isolated**
    (alone; written to `isolated_dir`, for the comparison in the report). On CPU "GPUs" the slots share
    cores, caches and memory bandwidth, so the co-located time is what a job sees when the cluster is full."""
    from elastisched.train.profiler import ProfilePoint, write_profile

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs: dict[str, list[tuple[float, float]]] = {"colocated": [], "isolated": [], "two": []}
    for r in range(rounds):
        outs = [app_dir.parent / f".profile-r{r}-co{i}" for i in range(2)]
        procs = [subprocess.Popen(_profile_cmd(o, 1, BATCH, steps), env=env, stdout=subprocess.DEVNULL) for o in outs]
        if any(p.wait() != 0 for p in procs):
            raise SystemExit("co-located profile failed")
        runs["colocated"] += [_read_point(o) for o in outs]
        for key, workers, local in (("isolated", 1, BATCH), ("two", 2, BATCH // 2)):
            out = app_dir.parent / f".profile-r{r}-{key}"
            subprocess.run(_profile_cmd(out, workers, local, steps), check=True, env=env, stdout=subprocess.DEVNULL)
            runs[key].append(_read_point(out))

    def med(key: str) -> tuple[float, float]:
        return statistics.median(s for s, _ in runs[key]), statistics.median(c for _, c in runs[key])

    two = ProfilePoint(1, 2, BATCH // 2, *med("two"))
    for d, one in ((app_dir, "colocated"), (isolated_dir, "isolated")):
        write_profile([ProfilePoint(1, 1, BATCH, *med(one)), two], d)
        write_validation(d)
    return [{"point": k, "workers": 2 if k == "two" else 1, "local_bsz": BATCH // 2 if k == "two" else BATCH,
             "step_time_s": [x for x, _ in v], "sync_time_s": [c for _, c in v]} for k, v in runs.items()]
