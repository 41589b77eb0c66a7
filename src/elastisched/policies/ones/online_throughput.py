"""Online per-job throughput model of ONES (ones.md §2.4, docs/ones.md "Throughput model").

No offline profile: for each job, the samples/s observed at each GPU count are kept in a moving window of the
last 5 readings; x(n) is the window mean where n was observed, otherwise linear interpolation/extrapolation
through (0, 0) and the observed means. The extrapolation is clamped to [1e-6, n · best observed per-GPU
rate] (A12: the artifact's `interp1d` has no clamp and can go negative — bug fix 3 in docs/ones.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

WINDOW = 5  # config.num_monitored_throughputs
EPS_THROUGHPUT = 1e-6  # A12: clamp of the interpolated throughput (samples/s)


def interp_throughput(pts_n: np.ndarray, pts_x: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Piecewise-linear throughput through (0, 0) and each job's observed points (§2.4), vectorized.

    `pts_n`, `pts_x`: (J, M) observed GPU counts (ascending, padded with +inf) and samples/s; `query`: (..., J)
    GPU counts. Beyond the largest observed count the last segment is extrapolated, then clamped to
    [EPS_THROUGHPUT, n · best observed per-GPU rate] (A12; the artifact has no clamp).
    """
    j = pts_n.shape[0]
    n0 = np.concatenate([np.zeros((j, 1)), pts_n], axis=1)
    x0 = np.concatenate([np.zeros((j, 1)), pts_x], axis=1)
    cnt = np.isfinite(n0).sum(axis=1)  # points incl. origin
    q = np.asarray(query, dtype=float)
    pos = (n0 <= q[..., None]).sum(axis=-1)  # index of first point > q
    hi = np.minimum(np.maximum(pos, 1), cnt - 1)
    hi = np.maximum(hi, 1)
    lo = hi - 1
    jj = np.broadcast_to(np.arange(j), q.shape)
    nl, nh = n0[jj, lo], n0[jj, hi]
    xl, xh = x0[jj, lo], x0[jj, hi]
    single = cnt < 2  # nothing observed: unknown
    nh = np.where(single | ~np.isfinite(nh), 1.0, nh)
    xh = np.where(single | ~np.isfinite(xh), 0.0, xh)
    slope = (xh - xl) / np.maximum(nh - nl, 1e-12)
    x = xl + slope * (q - nl)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_gpu = np.where(np.isfinite(pts_n), pts_x / pts_n, 0.0).max(axis=1, initial=0.0)
    return np.clip(x, EPS_THROUGHPUT, np.maximum(q * per_gpu[jj], EPS_THROUGHPUT))


class OnlineThroughput:
    """Samples/s per (job, GPU count), learned only from observations."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._obs: dict[str, dict[int, deque[float]]] = {}
        self._pts: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # `points` per job until its next reading

    def observe(self, job: str, gpus: int, samples_per_s: float) -> None:
        """Record one per-epoch reading (summed over workers) at `gpus` GPUs; non-positive readings are ignored."""
        if gpus <= 0 or not samples_per_s > 0 or not np.isfinite(samples_per_s):
            return
        per = self._obs.setdefault(job, {})
        per.setdefault(int(gpus), deque(maxlen=self.window)).append(float(samples_per_s))
        self._pts.pop(job, None)

    def forget(self, job: str) -> None:
        self._obs.pop(job, None)
        self._pts.pop(job, None)

    def points(self, job: str) -> tuple[np.ndarray, np.ndarray]:
        """Observed GPU counts (ascending) and their window means."""
        hit = self._pts.get(job)
        if hit is not None:
            return hit
        per = self._obs.get(job, {})
        ns = sorted(per)
        out = np.array(ns, dtype=float), np.array([float(np.mean(per[n])) for n in ns])
        if job in self._obs:
            self._pts[job] = out
        return out

    def predict(self, job: str, gpus: float | np.ndarray) -> np.ndarray:
        """x(n) in samples/s (clamped positive)."""
        n, x = self.points(job)
        if n.size == 0:
            n, x = np.array([np.inf]), np.array([0.0])
        q = np.atleast_1d(np.asarray(gpus, dtype=float))
        return interp_throughput(n[None, :], x[None, :], q[:, None])[:, 0]

    def tables(self, jobs: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """(J, M) padded arrays of observed counts (+inf padding) and means, for `interp_throughput`."""
        pts = [self.points(j) for j in jobs]
        m = max((p[0].size for p in pts), default=0) or 1
        ns = np.full((len(pts), m), np.inf)
        xs = np.zeros((len(pts), m))
        for i, (n, x) in enumerate(pts):
            ns[i, :n.size] = n
            xs[i, :x.size] = x
        return ns, xs

    def state_dict(self) -> dict[str, Any]:
        return {"window": self.window,
                "obs": {j: {str(n): list(d) for n, d in per.items()} for j, per in self._obs.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.window = int(state.get("window", WINDOW))
        self._pts = {}
        self._obs = {j: {int(n): deque(v, maxlen=self.window) for n, v in per.items()}
                     for j, per in state.get("obs", {}).items()}
