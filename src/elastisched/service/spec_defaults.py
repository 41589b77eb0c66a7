"""A submission's defaults, decided once: its size range, whether it is elastic, its global batch. The API
stores the spec `stored_spec` builds, `submission.job_spec` reads it back with the same rule, and the CLI shows
the same batch default. Standard library only: the CLI names these at start-up.

The batch an allocation runs at when it sets none is the job's own (`JobSpec.batch_for`, one rule for both
bodies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DEFAULT_BATCH_SIZE = 64  # the global batch of a submission that names none (API and CLI)


def gpu_bounds(gpus: int, min_gpus: int | None, max_gpus: int | None) -> tuple[int, int]:
    """The one rule for a request's size range: no MIN means GPUS, no MAX means the larger of GPUS and MIN.
    The job is elastic exactly when the range is wider than one size."""
    lo = min_gpus or gpus
    return lo, max_gpus or max(gpus, lo)


def stored_spec(*, gpus: int, min_gpus: int | None, max_gpus: int | None, batch_size: int,
                adaptive: Sequence[int] | None, gpu_type: str | None, duration: float | None,
                application: str | None, work_scale: float | None, env: dict[str, str] | None = None
                ) -> dict[str, Any]:
    """The spec dict the API stores for a submission (the row `job_spec` reads back), its defaults decided here;
    `env` (the job's own variables) only when it sets some."""
    lo, hi = gpu_bounds(gpus, min_gpus, max_gpus)
    out = {"num_gpus": gpus, "min_gpus": lo, "max_gpus": hi, "elastic": hi > lo, "batch_size": batch_size,
           "adaptive": list(adaptive) if adaptive else None, "gpu_types": [gpu_type] if gpu_type else [],
           "duration": duration, "application": application, "work_scale": work_scale}
    return out | {"env": dict(env)} if env else out
