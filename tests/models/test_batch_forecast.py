"""GBS forecaster: GP + simple exponential smoothing ensemble (jabas.md §2(e))."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.policies.jabas.batch_forecast import (
    fit_gp,
    fit_ses,
    forecast_gbs,
    next_epoch_trajectory,
    prediction_steps,
)


def test_ses_is_least_squares():
    rng = np.random.default_rng(1)
    y = 1000 + np.cumsum(rng.normal(0, 20, size=30))
    fit = fit_ses(y)

    def sse(alpha: float, l0: float) -> float:
        lv, err = l0, 0.0
        for v in y:
            err += (v - lv) ** 2
            lv = alpha * v + (1 - alpha) * lv
        return err

    best = min(sse(a, l0) for a in np.linspace(0, 1, 101) for l0 in np.linspace(900, 1100, 81))
    assert sse(fit.alpha, fit.initial_level) <= best + 1e-6
    assert np.allclose(fit.forecast(4), fit.level)


def test_ses_constant_and_trend():
    assert fit_ses([512, 512, 512]).level == pytest.approx(512)
    up = fit_ses([1, 2, 3, 4, 5])
    assert up.alpha == pytest.approx(1.0) and up.level == pytest.approx(5.0)
    with pytest.raises(ValueError):
        fit_ses([])


def test_gp_interpolates_and_is_deterministic():
    x = [100.0 * i for i in range(1, 16)]
    y = [256 * 1.1**i for i in range(1, 16)]
    a = fit_gp(x, y, seed=0)
    b = fit_gp(x, y, seed=0)
    assert a == b
    assert np.allclose(a.predict(x), y, rtol=1e-3)
    assert all(-np.inf < t < np.inf for t in a.theta)
    with pytest.raises(ValueError):
        fit_gp([], [])


def test_prediction_steps_follow_release():
    steps = prediction_steps(5005, 1_281_167, 256, 100)
    assert len(steps) == 50 and steps[0] == 5105 and steps[-1] == 5005 + 5000
    assert prediction_steps(0, 1000, 256, 100) == []


def test_flat_history_gives_flat_forecast():
    pts = [(100 * i, 512.0) for i in range(1, 11)]
    pred = forecast_gbs(pts, [p[1] for p in pts], [1100, 1200, 1300])
    assert np.allclose(pred, 512.0, rtol=1e-6)


def test_ensemble_weights_and_trajectory():
    pts = [(100 * i, 256.0 * 1.1**i) for i in range(1, 11)]
    hist = [p[1] for p in pts]
    steps = [1100, 1200]
    gp_only = forecast_gbs(pts, hist, steps, weights=(1.0, 0.0))
    ses_only = forecast_gbs(pts, hist, steps, weights=(0.0, 1.0))
    both = forecast_gbs(pts, hist, steps)
    assert np.allclose(both, 0.5 * gp_only + 0.5 * ses_only)
    with pytest.raises(ValueError):
        forecast_gbs(pts, hist, steps, weights=(0.7, 0.7))
    traj = next_epoch_trajectory(600, pts, hist, sync_step=1000, dataset_size=600 * 300, bounds=(256, 4096))
    assert traj[0] == 600 and len(traj) == 1 + 3
    assert all(isinstance(g, int) and 256 <= g <= 4096 for g in traj)
