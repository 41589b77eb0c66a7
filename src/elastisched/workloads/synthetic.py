"""Seeded synthetic workloads: Poisson arrivals, applications drawn uniformly, sizes from a real distribution.

GPU counts are drawn from the empirical distribution of the bundled Philly trace's GPU requests (the same
data as `traces.py`), so synthetic jobs are no more or less parallel than real ones. Batch size is the
application's initial batch times the GPU count, clamped to the profiled range.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from elastisched.core.errors import ConfigError
from elastisched.core.types import JobSpec
from elastisched.models.registry import PerfModels
from elastisched.workloads.schema import MAX_TIME, NUM_JOBS, RATE, SEED, Workload, finish

#: GPU-count histogram of the Philly jobs that run >= 60 s and < 1000 GPU-hours (bundled philly.csv).
PHILLY_GPU_COUNTS = {1: 70447, 2: 461, 4: 1789, 8: 1506, 16: 144, 32: 62}


def synthetic(models: PerfModels, *, num_jobs: int = 100, rate_per_hour: float = 20.0, seed: int = 0,
              apps: tuple[str, ...] | None = None, work_scale: tuple[float, float] = (0.05, 0.5),
              max_gpus: int = 16) -> Workload:
    for key, f, v in (("num_jobs", NUM_JOBS, num_jobs), ("rate", RATE, rate_per_hour), ("seed", SEED, seed)):
        try:
            f.check(float(v))
        except (ValueError, TypeError, OverflowError) as e:
            raise ConfigError(f"synthetic:{key}", v, str(e)) from None
    rng = np.random.default_rng(seed)
    names = apps or tuple(sorted(models.apps))
    counts = np.array([c for c in PHILLY_GPU_COUNTS if c <= max_gpus])
    weights = np.array([PHILLY_GPU_COUNTS[c] for c in counts], float)
    times = np.cumsum(rng.exponential(3600.0 / rate_per_hour, size=num_jobs))
    times -= times[0]
    if times[-1] > MAX_TIME:
        raise ConfigError("synthetic:rate", rate_per_hour, f"{num_jobs} jobs would span {times[-1]:.3g} s, more "
                          f"than the {MAX_TIME:.0f} s a workload may cover")
    jobs: list[tuple[int, JobSpec]] = []
    for i, t in enumerate(times):
        app = models.app(names[int(rng.integers(len(names)))])
        g = int(rng.choice(counts, p=weights / weights.sum()))
        g = min(g, app.max_batch_size // app.min_local_bsz)
        bs = int(min(app.init_batch_size * g, app.max_batch_size))
        ws = float(rng.uniform(*work_scale))
        jobs.append((i, JobSpec(job_id=f"{app.name}-{i}", submit_time=float(round(t, 3)), application=app.name,
                                num_gpus=g, batch_size=bs, min_gpus=g, max_gpus=g, work_scale=ws)))
    cfg = {"num_jobs": num_jobs, "rate_per_hour": rate_per_hour, "seed": seed, "apps": names,
           "work_scale": work_scale, "max_gpus": max_gpus}
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]
    # the same range checks as a file (a high rate with many jobs stays in range; a tiny rate may not)
    return finish(f"synthetic:{json.dumps(cfg, sort_keys=True)}", f"synthetic-{seed}", jobs, digest, keep_order=True)
