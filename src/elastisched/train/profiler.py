"""Measure a real training script on a grid of (workers, local batch) and write a simulator profile.

Output is exactly the Pollux artifact format the simulator's models read (peer-data/adaptdl-pollux/
traces/<model>/): `placements.csv` (placement,local_bsz,step_time,sync_time) where placement is the
per-node GPU counts as a digit string ("2" = two workers on one node), and `scalability.csv`
(num_nodes,num_replicas,local_bsz,step_time,sync_time). step_time is the wall time of one synchronous
step without accumulation, sync_time the part spent in the gradient all-reduce (median after warm-up).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elastisched.train.contract import PROFILE_OUT, PROFILE_STEPS
from elastisched.train.launcher import start_workers


@dataclass(frozen=True, slots=True)
class ProfilePoint:
    num_nodes: int
    num_replicas: int
    local_bsz: int
    step_time: float
    sync_time: float

    @property
    def placement(self) -> str:
        """Per-node worker counts as digits; local profiling is one node."""
        return str(self.num_replicas)


def profile(script: str | os.PathLike[str], args: Sequence[str] = (), *, local_batches: Sequence[int],
            workers: Sequence[int], out: str | os.PathLike[str], steps: int = 12, timeout: float = 300.0,
            progress: Callable[[str], None] | None = None) -> list[ProfilePoint]:
    """Run every grid point as its own short job (fresh checkpoint dir) and write the two CSVs."""
    if any(w > 9 for w in workers):
        raise ValueError(f"workers={list(workers)}: the placement string holds one digit per node (max 9)")
    points: list[ProfilePoint] = []
    with tempfile.TemporaryDirectory(prefix="elastisched-profile-") as tmp:
        for w in workers:
            for b in local_batches:
                res = Path(tmp) / f"w{w}-b{b}.json"
                group = start_workers(script, args, nproc=w, local_batch=b, accum=[1] * w,
                                      job_id=f"profile-w{w}-b{b}", checkpoint_dir=str(Path(tmp) / f"ck{w}-{b}"),
                                      extra_env={PROFILE_STEPS: str(steps), PROFILE_OUT: str(res)},
                                      stdout=subprocess.DEVNULL)
                codes = group.wait(timeout=timeout)
                if any(c is None for c in codes):
                    group.stop(grace=5.0)
                if not res.exists():
                    raise RuntimeError(f"profiling {script} with {w} workers, local batch {b} produced no "
                                       f"measurement (exit codes {group.poll()}); does one epoch hold "
                                       f"{steps} steps?")
                m = json.loads(res.read_text())
                pt = ProfilePoint(1, w, b, float(m["step_time"]), float(m["sync_time"]))
                points.append(pt)
                if progress is not None:
                    progress(f"workers={w} local_bsz={b} step_time={pt.step_time:.4f}s "
                             f"sync_time={pt.sync_time:.4f}s")
    write_profile(points, out)
    return points


def write_profile(points: Sequence[ProfilePoint], out: str | os.PathLike[str]) -> None:
    """placements.csv and scalability.csv in the Pollux column order."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / "placements.csv", "w", newline="", encoding="utf-8") as f:
        wr = csv.writer(f)
        wr.writerow(["placement", "local_bsz", "step_time", "sync_time"])
        for p in points:
            wr.writerow([p.placement, p.local_bsz, p.step_time, p.sync_time])
    with open(d / "scalability.csv", "w", newline="", encoding="utf-8") as f:
        wr = csv.writer(f)
        wr.writerow(["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])
        for p in points:
            wr.writerow([p.num_nodes, p.num_replicas, p.local_bsz, p.step_time, p.sync_time])
