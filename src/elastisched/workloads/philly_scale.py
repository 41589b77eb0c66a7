"""`philly:jobs=N`: a workload of any size with the Philly trace's jobs and its weekly rhythm (issue 22).

The bundled Philly trace (`traces.py`; 74,428 jobs after its filters, over 15 weeks) is too short for a
datacenter-scale replay, so this stretches it to N jobs, seeded and deterministic:

- **jobs**: N `(duration, GPUs)` pairs drawn with replacement from the trace's filtered jobs: the empirical
  joint distribution, heavy tail and all. Each becomes an application job by the rules of `traces.py`
  (GPU-time bucket → application, traced duration at its requested size on 4-GPU T4 nodes);
- **arrivals**: a Poisson process whose rate follows the trace's hour-of-the-week profile (168 bins: the jobs
  submitted in that hour of the week, divided by the number of times that hour occurs in the trace's span,
  with the trace's clock read as UTC as everywhere in `traces.py`), starting on a Monday at 00:00; given
  N, the N arrival instants are the order statistics of uniform draws mapped through the inverse of the
  cumulative rate (the process conditioned on its count);
- **span**: the rate is scaled so that the jobs' mean offered load, Σ duration × GPUs over the span, is
  `load` × `gpus` GPUs: by default 0.8 of the 6,742 GPUs of the Alibaba PAI composition (`--cluster pai`).
  The trace itself offers 259 GPUs on average over its 106 days, about its usual replay cluster (64x4).

Readings (ours): duration and GPUs are drawn independently of the arrival hour (the trace's jobs are not
resampled per hour); the offered load counts GPU-seconds at the traced durations, which elastic policies and
faster GPU types change; the arrival profile is the mean over the trace's weeks, although its weekly totals
vary tenfold (its first weeks ramp up).
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from elastisched.core.cluster import PAI_GPUS
from elastisched.core.errors import ConfigError
from elastisched.core.types import JobSpec
from elastisched.models.registry import PerfModels
from elastisched.workloads.schema import MAX_TIME, Workload, file_digest, finish
from elastisched.workloads.traces import BUCKETS, bundled_philly, read_trace

HOUR, WEEK_HOURS = 3600.0, 168
_MONDAY = 3 * 24  # the Unix epoch fell on a Thursday: hours from a Monday 00:00 to the epoch
DEFAULT_LOAD = 0.8


def weekly_profile(times: np.ndarray) -> np.ndarray:
    """Arrivals per hour in each of the 168 hours of the week (Monday 00:00 first) at Unix seconds `times`,
    averaged over the times each hour occurs between the first and the last arrival."""
    hours = np.floor(times / HOUR).astype(np.int64) + _MONDAY
    counts = np.bincount(hours % WEEK_HOURS, minlength=WEEK_HOURS).astype(float)
    span = np.arange(hours.min(), hours.max() + 1)
    seen = np.bincount(span % WEEK_HOURS, minlength=WEEK_HOURS).astype(float)
    return counts / np.maximum(seen, 1.0)


def arrivals(profile: np.ndarray, n: int, span: float, rng: np.random.Generator) -> np.ndarray:
    """`n` sorted arrival instants in [0, span) of a Poisson process with hourly rate shape `profile`
    (hour 0 = Monday 00:00), given that it has `n` arrivals there."""
    hours = max(1, math.ceil(span / HOUR))
    rate = profile[np.arange(hours) % WEEK_HOURS]
    widths = np.full(hours, HOUR)
    widths[-1] = span - HOUR * (hours - 1)
    cum = np.concatenate(([0.0], np.cumsum(rate * widths)))
    u = np.sort(rng.random(n)) * cum[-1]
    k = np.minimum(np.searchsorted(cum, u, side="right") - 1, hours - 1)
    return np.minimum(k * HOUR + (u - cum[k]) / rate[k], np.nextafter(span, 0.0))


def _applications(gpu_hours: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """`traces.application_for` over arrays: index into `BUCKET_APPS` of each job's application."""
    out = np.empty(len(gpu_hours), dtype=np.int64)
    lo, first = 0.0, 0
    for bound, apps in BUCKETS:
        m = (gpu_hours >= lo) & (gpu_hours < bound)
        out[m] = first + draws[m] % len(apps)
        lo, first = bound, first + len(apps)
    return out


BUCKET_APPS: tuple[str, ...] = tuple(a for _, apps in BUCKETS for a in apps)


def philly_jobs(models: PerfModels, *, jobs: int, seed: int = 0, load: float = DEFAULT_LOAD,
                gpus: int = PAI_GPUS) -> Workload:
    """`jobs` Philly-like jobs arriving over a span that offers `load` × `gpus` GPUs (module docstring)."""
    trace = read_trace(None)
    times = np.array([t for t, *_ in trace.rows]) + trace.t0
    dur = np.array([d for _, d, _, _ in trace.rows])
    gpu = np.array([g for _, _, g, _ in trace.rows], dtype=np.int64)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(dur), size=jobs)
    d, g = dur[pick], gpu[pick]
    span = float(np.sum(d * g)) / (load * gpus)
    if span > MAX_TIME:
        raise ConfigError("philly:load", load, f"{jobs} jobs at this load on {gpus} GPUs would span {span:.3g} s, "
                          f"more than the {MAX_TIME:.0f} s a workload may cover")
    t = arrivals(weekly_profile(times), jobs, span, rng)
    app = _applications(d * g / HOUR, rng.integers(0, 1 << 30, size=jobs))
    specs = _specs(models, t, d, g, app)
    cfg = {"source": file_digest(bundled_philly()), "jobs": jobs, "seed": seed, "load": load, "gpus": gpus}
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]
    return finish(f"philly:{json.dumps(cfg, sort_keys=True)}", f"philly-{jobs}-seed{seed}", specs, digest,
                  keep_order=True)


def _specs(models: PerfModels, t: np.ndarray, d: np.ndarray, g: np.ndarray, app: np.ndarray
           ) -> list[tuple[int, JobSpec]]:
    """The JobSpecs, as `traces.job_from_trace` builds them, with the per-(application, GPUs) numbers computed
    once per pair rather than once per job."""
    pairs, inverse = np.unique(np.stack([app, g]), axis=1, return_inverse=True)
    per_pair = []
    for a, n in pairs.T.tolist():
        spec_app = models.app(BUCKET_APPS[a])
        batch = int(min(max(spec_app.init_batch_size * n, spec_app.init_batch_size), spec_app.max_batch_size))
        n_run = min(n, spec_app.max_batch_size // spec_app.min_local_bsz)
        per_pair.append((spec_app.name, n_run, batch, spec_app.run_seconds("t4", n_run, batch, 4)))
    out = []
    for i, (ti, di, k) in enumerate(zip(t.tolist(), d.tolist(), inverse.ravel().tolist(), strict=True)):
        name, n_run, batch, secs = per_pair[k]
        out.append((i, JobSpec(f"job-{i}", ti, name, n_run, batch, n_run, n_run, work_scale=di / secs,
                               duration=di)))
    return out
