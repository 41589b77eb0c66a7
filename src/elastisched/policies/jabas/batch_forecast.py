"""JABAS global-batch-size forecaster: 0.5 × Gaussian process + 0.5 × simple exponential smoothing.

At each epoch end JABAS predicts the GBS at the next epoch's adjustment points and feeds
``[GBS_cur] + forecast`` to the epoch-time estimator (:mod:`elastisched.policies.jabas.autoscale`) [code:
JABAS ``jabas/config/model/global_batch_size/{gaussian_process,exponential_smoothing,ensemble_method}.py``,
``jabas/train/trainer.py`` ``_predict_global_batch_size``; digest §2(e)].  Re-implemented with numpy/scipy:

* GP: kernel ``c · exp(−2 sin²(π|x−x'|/p) / l²)`` (sklearn ``ConstantKernel(1, (1, 1e6)) ×
  ExpSineSquared(1, 3, periodicity_bounds=(1e-2, 10))``, length-scale bounds (1e-5, 1e5)), ``alpha=1e-10``,
  ``normalize_y`` (zero mean, unit std), hyper-parameters by maximising the log marginal likelihood with
  L-BFGS-B in log space from the initial values plus 9 restarts drawn log-uniformly within the bounds.
  Trained on the **current epoch's** ``(sync_step, GBS)`` points only.  The release draws restarts from an
  unseeded RNG; ours are seeded (default 0) so runs are reproducible.
* SES: statsmodels ``ExponentialSmoothing(seasonal=None)`` = level-only smoothing, α and the initial level
  chosen by least squares of the one-step-ahead errors; flat forecast.  Trained on **all** GBS values so far.
  (The release's ``x // 100`` index assumes p = 100; the forecast is flat, so we drop the index.)
* Prediction points: ``sync_step + p·i`` for ``i = 1 .. (|D| // GBS_cur) // p``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from elastisched.policies.jabas.autoscale import best_server_set, estimate_epoch_time

__all__ = [
    "GPFit",
    "SESFit",
    "best_server_set",
    "estimate_epoch_time",
    "fit_gp",
    "fit_ses",
    "forecast_gbs",
    "next_epoch_trajectory",
    "prediction_steps",
]

# log-space bounds of (constant, length_scale, periodicity) and the initial values (sklearn / release)
_BOUNDS = np.log(np.array([[1.0, 1e6], [1e-5, 1e5], [1e-2, 10.0]]))
_THETA0 = np.log(np.array([1.0, 1.0, 3.0]))
_JITTER = 1e-10


def _kernel(theta: np.ndarray, xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
    c, length, period = np.exp(theta)
    d = np.abs(xa[:, None] - xb[None, :])
    return c * np.exp(-2.0 * (np.sin(np.pi * d / period) / length) ** 2)


def _neg_lml(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    k = _kernel(theta, x, x) + _JITTER * np.eye(len(x))
    try:
        from scipy.linalg import cho_factor

        cf = cho_factor(k, lower=True)
    except np.linalg.LinAlgError:
        return 1e25
    from scipy.linalg import cho_solve

    alpha = cho_solve(cf, y)
    return float(0.5 * y @ alpha + np.log(np.diag(cf[0])).sum() + 0.5 * len(x) * np.log(2 * np.pi))


@dataclass(frozen=True, slots=True)
class GPFit:
    """A fitted GP: training data, normalisation and log hyper-parameters (c, l, p)."""

    x: tuple[float, ...]
    y_norm: tuple[float, ...]
    y_mean: float
    y_std: float
    theta: tuple[float, float, float]

    def predict(self, x_pred: Sequence[float]) -> np.ndarray:
        x = np.asarray(self.x, dtype=float)
        th = np.asarray(self.theta)
        k = _kernel(th, x, x) + _JITTER * np.eye(len(x))
        from scipy.linalg import cho_factor, cho_solve

        alpha = cho_solve(cho_factor(k, lower=True), np.asarray(self.y_norm))
        ks = _kernel(th, np.asarray(x_pred, dtype=float), x)
        return ks @ alpha * self.y_std + self.y_mean


def fit_gp(x: Sequence[float], y: Sequence[float], *, n_restarts: int = 9, seed: int = 0) -> GPFit:
    """Fit the release's periodic GP (see module docstring); at least one point is needed."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    if xa.ndim != 1 or xa.shape != ya.shape or len(xa) == 0:
        raise ValueError(f"need equal-length, non-empty x and y, got {xa.shape} and {ya.shape}")
    mean = float(ya.mean())
    std = float(ya.std())
    std = std if std > 0 else 1.0
    yn = (ya - mean) / std
    rng = np.random.default_rng(seed)
    starts = [_THETA0] + [rng.uniform(_BOUNDS[:, 0], _BOUNDS[:, 1]) for _ in range(n_restarts)]
    best_theta, best_val = _THETA0, _neg_lml(_THETA0, xa, yn)
    for t0 in starts:
        from scipy.optimize import minimize

        res = minimize(_neg_lml, t0, args=(xa, yn), method="L-BFGS-B", bounds=_BOUNDS)
        if np.isfinite(res.fun) and res.fun < best_val:
            best_theta, best_val = res.x, float(res.fun)
    th = tuple(float(v) for v in best_theta)
    return GPFit(tuple(xa.tolist()), tuple(yn.tolist()), mean, std, (th[0], th[1], th[2]))


@dataclass(frozen=True, slots=True)
class SESFit:
    """Simple exponential smoothing: smoothing level α, initial and final level; flat forecast."""

    alpha: float
    initial_level: float
    level: float

    def forecast(self, horizon: int) -> np.ndarray:
        return np.full(horizon, self.level)


def _ses_levels(y: np.ndarray, alpha: float, l0: float) -> np.ndarray:
    lv = np.empty(len(y) + 1)
    lv[0] = l0
    for t, v in enumerate(y):
        lv[t + 1] = alpha * v + (1.0 - alpha) * lv[t]
    return lv


def fit_ses(y: Sequence[float]) -> SESFit:
    """Least-squares SES: for a given α the SSE is quadratic in the initial level, solved exactly."""
    ya = np.asarray(y, dtype=float)
    if len(ya) == 0:
        raise ValueError("SES needs at least one observation")
    if len(ya) == 1:
        return SESFit(1.0, float(ya[0]), float(ya[0]))

    def l0_and_sse(alpha: float) -> tuple[float, float]:
        # one-step prediction ŷ_t = l_{t−1} = (1−α)^t·l0 + r_t, with r_t the prediction from l0 = 0
        r = _ses_levels(ya, alpha, 0.0)[:-1]
        c = (1.0 - alpha) ** np.arange(len(ya))
        denom = float(c @ c)
        l0 = float(c @ (ya - r) / denom) if denom > 0 else float(ya[0])
        return l0, float(((ya - r - c * l0) ** 2).sum())

    from scipy.optimize import minimize_scalar

    res = minimize_scalar(lambda a: l0_and_sse(a)[1], bounds=(0.0, 1.0), method="bounded")
    alpha = float(res.x)
    l0, sse = l0_and_sse(alpha)
    for edge in (0.0, 1.0):  # the bounded search never evaluates the end points
        l0e, ssee = l0_and_sse(edge)
        if ssee < sse:
            alpha, l0, sse = edge, l0e, ssee
    return SESFit(alpha, l0, float(_ses_levels(ya, alpha, l0)[-1]))


def prediction_steps(sync_step: int, dataset_size: int, current_gbs: int, interval: int = 100) -> list[int]:
    """Steps of the next epoch's adjustment points: ``sync_step + p·i``, ``i = 1..(|D|//GBS)//p``."""
    n = (dataset_size // current_gbs) // interval
    return [sync_step + interval * i for i in range(1, n + 1)]


def forecast_gbs(
    epoch_points: Sequence[tuple[int, float]],
    history: Sequence[float],
    pred_steps: Sequence[int],
    *,
    weights: tuple[float, float] = (0.5, 0.5),
    seed: int = 0,
) -> np.ndarray:
    """Ensemble forecast at ``pred_steps``: ``w0·GP(current epoch) + w1·SES(all history)``.

    ``epoch_points`` are this epoch's recorded ``(sync_step, GBS)``; ``history`` all GBS values recorded so
    far (including this epoch's).  With no point in this epoch the GP part falls back to the SES level.
    """
    if abs(sum(weights) - 1.0) > 1e-9:
        raise ValueError(f"ensemble weights must sum to 1, got {weights}")
    if not pred_steps:
        return np.zeros(0)
    hist = list(history) or [g for _, g in epoch_points]
    if not hist:
        raise ValueError("no GBS observation to forecast from")
    ses = fit_ses(hist).forecast(len(pred_steps))
    if epoch_points:
        xs, ys = zip(*epoch_points, strict=True)
        gp = fit_gp(xs, ys, seed=seed).predict(pred_steps)
    else:
        gp = ses
    return weights[0] * gp + weights[1] * ses


def next_epoch_trajectory(
    current_gbs: int,
    epoch_points: Sequence[tuple[int, float]],
    history: Sequence[float],
    *,
    sync_step: int,
    dataset_size: int,
    interval: int = 100,
    bounds: tuple[int, int] | None = None,
    seed: int = 0,
) -> list[int]:
    """``[GBS_cur] + forecast`` rounded to integers and (optionally, our reading) clamped to ``bounds``."""
    steps = prediction_steps(sync_step, dataset_size, current_gbs, interval)
    pred = forecast_gbs(epoch_points, history, steps, seed=seed)
    if bounds is not None:
        pred = np.clip(pred, bounds[0], bounds[1])
    return [int(current_gbs)] + [max(1, round(float(v))) for v in pred]
