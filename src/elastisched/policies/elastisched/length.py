"""How much work a job has left, as the policy can know it (issue 21: "honest knowledge").

- A job that declared its length (`JobView.declared_work`: epochs or steps as submitted, noisy in the
  simulator when asked) has `declared − progress` left, the same way a user's `--epochs` is read.
- A job that declared none, or has run past what it declared, is predicted from its attained service
  (GPU-seconds) against the distribution of job lengths (Tiresias NSDI'19 §3.2 reads its Gittins index off that
  distribution; we take the mean residual length `E[S − a | S > a]`, which for a heavy tail grows with the
  service a job already had — the least-attained-service behaviour without knowing the length).
  The distribution is log-normal in GPU-seconds: a prior fitted to the Philly trace (the Pollux artifact's
  `traces/philly.csv`, 74,593 jobs of at least 60 s: mean of ln(GPU-seconds) 7.21, standard deviation 2.13),
  updated with the lengths of the jobs this policy saw finish (the last `WINDOW` of them), the prior counting
  as `PRIOR_WEIGHT` jobs. Readings (ours): finished jobs only (survivors are not used as censored samples, so
  early on short jobs weigh more); attained service is read in steps of ×4 from 60 GPU-seconds; GPU-seconds
  are turned into work at the model's pace at the job's reference size (progress per GPU-second).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
from scipy.special import log_ndtr

PRIOR_MEAN_LOG = 7.21  # ln GPU-seconds, Philly (module docstring)
PRIOR_STD_LOG = 2.13
PRIOR_WEIGHT = 10.0
WINDOW = 10_000
OVERRUN = 0.98  # past this fraction of its declared work a job is predicted from its service instead
SERVICE_STEP = 4.0  # attained service is read in steps of this factor (Tiresias's queues, not a continuum)
SERVICE_FLOOR = 60.0  # GPU-seconds: the first step


class LengthBelief:
    """Log-normal belief over job lengths in GPU-seconds, learned from finished jobs (module docstring)."""

    def __init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=WINDOW)  # ln GPU-seconds of finished jobs
        self._fit: tuple[float, float] | None = None

    def observe(self, gpu_seconds: float) -> None:
        if gpu_seconds > 0 and math.isfinite(gpu_seconds):
            self.samples.append(math.log(gpu_seconds))
            self._fit = None

    def params(self) -> tuple[float, float]:
        """(mean, standard deviation) of ln GPU-seconds: the prior and the observed lengths, pooled."""
        if self._fit is None:
            n = len(self.samples)
            if n == 0:
                self._fit = (PRIOR_MEAN_LOG, PRIOR_STD_LOG)
            else:
                x = np.fromiter(self.samples, float, n)
                w = PRIOR_WEIGHT
                mu = (w * PRIOR_MEAN_LOG + float(x.sum())) / (w + n)
                var = (w * (PRIOR_STD_LOG**2 + (PRIOR_MEAN_LOG - mu) ** 2) + float(((x - mu) ** 2).sum())) / (w + n)
                self._fit = (mu, max(math.sqrt(var), 0.05))
        return self._fit

    def residual(self, attained: np.ndarray) -> np.ndarray:
        """E[S − a | S > a] in GPU-seconds for each attained service a (vectorised; the mean for a = 0), with a read
        in geometric steps (`quantised`): a job's prediction then changes a few times in its life, not every round,
        so the allocations it drives do not churn (Tiresias discretises its priorities into queues for the same
        reason, NSDI'19 §3.2)."""
        mu, sigma = self.params()
        a = np.maximum(quantised(np.asarray(attained, dtype=float)), 1e-9)
        la = np.log(a)
        # E[S | S > a] = exp(mu + sigma²/2) · Φ((mu + sigma² − ln a)/sigma) / Φ((mu − ln a)/sigma), in logs
        log_tail_mean = (mu + sigma**2 / 2 + log_ndtr((mu + sigma**2 - la) / sigma) - log_ndtr((mu - la) / sigma))
        return np.maximum(np.exp(log_tail_mean) - a, 0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"samples": list(self.samples)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.samples = deque((float(x) for x in state.get("samples", [])), maxlen=WINDOW)
        self._fit = None


def quantised(attained: np.ndarray) -> np.ndarray:
    """Attained service rounded down to the steps SERVICE_FLOOR · SERVICE_STEP^i (0 below the first step)."""
    a = np.asarray(attained, dtype=float)
    with np.errstate(divide="ignore"):
        steps = np.floor(np.log(np.maximum(a, 1e-300) / SERVICE_FLOOR) / np.log(SERVICE_STEP))
    return np.where(a >= SERVICE_FLOOR, SERVICE_FLOOR * SERVICE_STEP**steps, 0.0)


def predicted_total(declared: float | None, progress: float, residual_gpu_s: float, pace: float) -> float:
    """The work (progress units) a job is predicted to do in all: its declared work while it has not run past
    it; otherwise what it has done plus its residual GPU-seconds at `pace` (progress per GPU-second at its
    reference size, from its model: a measured pace would move with every restart and make predictions of jobs
    in the same service step differ by noise, which the allocation would then chase)."""
    if declared is not None and progress < OVERRUN * declared:
        return declared
    return progress + max(residual_gpu_s * pace, 1e-9)
