"""Beta-regression progress predictor (ones.md §2.5) and the online throughput model (§2.4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import peer_data
from elastisched.policies.ones.online_throughput import OnlineThroughput
from elastisched.policies.ones.progress_predictor import BetaProgressPredictor, features, history_table


def _synthetic(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Jobs of total T epochs (T in 10..40, told by feature 4); ρ = e / T."""
    rng = np.random.default_rng(seed)
    total = rng.integers(10, 40, n).astype(float)
    e = np.floor(rng.random(n) * (total - 1)) + 1
    x = np.stack([np.full(n, np.log(2e4)), np.full(n, 6.9), e, 1 - 1 / (1 + e), total / 40], axis=1)
    return x, e / total


def test_features_use_log_epoch_size_and_clip_initial_loss() -> None:
    f = features(20000, 250.0, 3.0, 50.0, 0.4)
    assert f.tolist() == pytest.approx([np.log(20000), 100.0, 3.0, 0.5, 0.4])  # bug fix 1: log at predict too


def test_gradient_matches_finite_differences() -> None:
    x, rho = _synthetic(16)
    p = BetaProgressPredictor(epochs=1)
    p.add(x, rho)
    p.fit()
    theta = np.concatenate([p.params["w1"].ravel(), p.params["b1"], p.params["w2"], [float(p.params["b2"])]])
    from elastisched.policies.ones.progress_predictor import HIDDEN, _views

    shapes = {"w1": (5, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN,), "b2": ()}
    z = (x - p.mu) / p.sd
    g = p._grad_flat(z, x[:, 2], rho, _views(theta, shapes))

    def loss(t: np.ndarray) -> float:
        p.params = {k: np.array(v) for k, v in _views(t, shapes).items()}
        return p.nll(x, rho)

    for i in (0, 7, 5 * HIDDEN + 3, len(theta) - 2, len(theta) - 1):
        d = np.zeros_like(theta)
        d[i] = 1e-6
        assert g[i] == pytest.approx((loss(theta + d) - loss(theta - d)) / 2e-6, rel=1e-3, abs=1e-7)


def test_fit_learns_remaining_epochs() -> None:
    x, rho = _synthetic()
    p = BetaProgressPredictor(seed=1)
    p.add(x, rho)
    nll = p.fit()
    assert np.abs(p.mean(x) - rho).mean() < 0.06
    assert nll < 0.0  # a constant β would give a positive mean NLL on this data
    s = p.sample(x, np.random.default_rng(0))
    assert ((s > 0) & (s < 1)).all() and abs(s.mean() - p.mean(x).mean()) < 0.05


@peer_data.needs("ones", "traces", "job_history.csv")
def test_bootstrap_on_job_history_beats_a_constant() -> None:
    x, rho = history_table(peer_data.ONES_HISTORY)  # type: ignore[arg-type]
    assert x.shape == (590, 5)
    p = BetaProgressPredictor()
    p.add(x, rho)
    p.fit()
    err = np.abs(p.mean(x) - rho).mean()
    assert err < 0.5 * np.abs(rho.mean() - rho).mean()


def test_refit_on_completed_job_and_state_round_trip() -> None:
    x, rho = _synthetic(100)
    p = BetaProgressPredictor()
    p.add(x, rho)
    p.fit()
    p.add_job(x[:5], rho[:5] * 1000.0, 1000.0)
    assert p.x.shape[0] == 105
    p.fit()
    q = BetaProgressPredictor()
    q.load_state_dict(json.loads(json.dumps(p.state_dict())))
    assert np.allclose(q.beta(x), p.beta(x)) and q.fits == p.fits == 2


def test_bad_rows_are_rejected() -> None:
    with pytest.raises(ValueError, match="do not match"):
        BetaProgressPredictor().add(np.zeros((3, 5)), np.zeros(2))
    with pytest.raises(ValueError, match="no training rows"):
        BetaProgressPredictor().fit()


def test_online_throughput_window_interpolation_and_clamp() -> None:
    t = OnlineThroughput(window=2)
    t.observe("j", 1, 100.0)
    assert t.predict("j", [2, 4]).tolist() == pytest.approx([200.0, 400.0])  # linear through (0, 0)
    for v in (300.0, 140.0, 160.0):  # window of 2 keeps 140, 160 → mean 150
        t.observe("j", 2, v)
    assert t.predict("j", [1.5, 2, 3]).tolist() == pytest.approx([125.0, 150.0, 200.0])
    t.observe("j", 2, -5.0)  # ignored
    t.observe("k", 1, 100.0)
    t.observe("k", 2, 20.0)
    assert t.predict("k", 6)[0] == pytest.approx(1e-6)  # extrapolation below zero is clamped
    assert t.predict("none", 3)[0] == pytest.approx(1e-6)
    u = OnlineThroughput()
    u.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert u.predict("j", [3]).tolist() == t.predict("j", [3]).tolist()
