"""Goodput model: throughput and efficiency against hand computations, the batch-size choice against an
independent enumeration of the artifact's candidates, the fit against measured profiles and its priors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize

from elastisched.models.throughput import PolluxParams
from elastisched.policies.pollux.goodput import (
    EPS,
    GoodputFunction,
    _fit_constants,
    _objective,
    fit_perf_params,
    speedup_table,
)

P = PolluxParams(alpha_c=0.1, beta_c=0.01, alpha_n=0.2, beta_n=0.01, alpha_r=0.05, beta_r=0.005, gamma=1.5)


def hand_step(p: PolluxParams, nodes: int, reps: int, atomic: int, accum: int) -> float:
    ta = p.alpha_c + p.beta_c * atomic
    if nodes > 1:
        tn = p.alpha_n + p.beta_n * max(reps - 2, 1e-8)
    elif reps > 1:
        tn = p.alpha_r + p.beta_r * max(reps - 2, 1e-8)
    else:
        tn = 1e-8 + 1e-8 * 1e-8
    return accum * ta + (ta**p.gamma + tn**p.gamma) ** (1 / p.gamma)


def hand_goodput(p: PolluxParams, sqr: float, var: float, m0: int, nodes: int, reps: int, atomic: int,
                 accum: int) -> float:
    m = reps * atomic * (accum + 1)
    s = m / m0
    eff = (var + sqr) / (var / s + sqr) / s
    return m / hand_step(p, nodes, reps, atomic, accum) * eff


@pytest.mark.parametrize(("nodes", "reps", "atomic", "accum"), [(1, 1, 64, 0), (1, 4, 32, 1), (2, 8, 32, 1),
                                                                  (4, 16, 128, 3)])
def test_throughput_and_goodput_match_hand_computation(nodes: int, reps: int, atomic: int, accum: int) -> None:
    fn = GoodputFunction(P, grad_sqr=2.0, grad_var=30.0, init_batch_size=64)
    tput = float(fn.throughput(np.array(nodes), np.array(reps), np.array(atomic), np.array(accum)))
    assert tput == pytest.approx(reps * atomic * (accum + 1) / hand_step(P, nodes, reps, atomic, accum), rel=1e-12)
    good = float(fn(np.array(nodes), np.array(reps), np.array(atomic), np.array(accum)))
    assert good == pytest.approx(hand_goodput(P, 2.0, 30.0, 64, nodes, reps, atomic, accum), rel=1e-12)


def test_efficiency_matches_the_profile_gain(models: object) -> None:
    """With the gradient statistics measured at batch M, efficiency(M) is the profile's gain(M) / (M / M0)."""
    app = models.app("cifar10")  # type: ignore[attr-defined]
    for batch, epoch in [(256, 3), (1024, 40), (4096, 90)]:
        sqr, var = app.efficiency.grad_stats(batch, epoch)
        fn = GoodputFunction(P, sqr, var, app.init_batch_size)
        assert float(fn.efficiency(np.array(batch))) == pytest.approx(app.efficiency.efficiency(batch, epoch),
                                                                      rel=1e-9)


def candidates(m0: int, reps: int, lo: int, hi: int, max_batch: int) -> list[tuple[int, int]]:
    """The artifact's 50 geometric candidates, computed one by one with `math`."""
    first = max(m0, lo * reps)
    out = []
    for k in range(50):
        b = first * (max_batch / first) ** (k / 49)
        local = b / reps
        accum = math.ceil(local / hi - 1e-8) - 1
        if reps == 1 and local > m0 + 1e-8:
            accum = max(accum, 1)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        out.append((atomic, accum))
    return out


@pytest.mark.parametrize("app_name", ["cifar10", "imagenet", "bert", "yolov3"])
@pytest.mark.parametrize(("nodes", "reps"), [(1, 1), (1, 3), (2, 8), (4, 16)])
def test_optimize_picks_the_best_candidate(models: object, app_name: str, nodes: int, reps: int) -> None:
    app = models.app(app_name)  # type: ignore[attr-defined]
    sqr, var = app.efficiency.grad_stats(app.init_batch_size * 4, 5)
    fn = GoodputFunction(P, sqr, var, app.init_batch_size)
    lo, hi = app.min_local_bsz, app.max_local_bsz
    good, atomic, accum = fn.optimize(nodes, reps, app.max_batch_size, (lo, hi))
    best = max((hand_goodput(P, sqr, var, app.init_batch_size, nodes, reps, a, c) if lo <= a <= hi else 0.0, a, c)
               for a, c in candidates(app.init_batch_size, reps, lo, hi, app.max_batch_size))
    assert float(good[0]) == pytest.approx(best[0], rel=1e-9)
    assert (int(atomic[0]), int(accum[0])) == (best[1], best[2]) or best[0] == 0.0
    if reps == 1 and int(atomic[0]) * (int(accum[0]) + 1) > app.init_batch_size:
        assert int(accum[0]) >= 1  # two micro-batches on a single replica above M0


def test_speedup_table_is_goodput_over_base() -> None:
    fn = GoodputFunction(P, 2.0, 30.0, 64)
    base = float(fn.optimize(1, 4, 4096, (16, 256))[0][0])
    t = speedup_table(fn, 8, 4096, (16, 256), base)
    assert t.shape == (2, 9) and t[0, 0] == 0.0 and t[1, 0] == 0.0
    assert t[0, 4] == pytest.approx(1.0)
    assert t[1, 1] == t[0, 1]  # one replica cannot span nodes
    assert t[1, 8] == pytest.approx(float(fn.optimize(2, 8, 4096, (16, 256))[0][0]) / base)
    assert t[1, 8] < t[0, 8]  # inter-node network is slower here (alpha_n > alpha_r)


def test_objective_gradient_is_exact() -> None:
    rng = np.random.default_rng(1)
    nodes, reps = np.array([1, 1, 2, 4, 1.0]), np.array([1, 4, 8, 16, 2.0])
    bsz = np.array([32, 64, 32, 128, 100.0])
    ya = rng.uniform(0.05, 0.3, 5)
    yo = ya + rng.uniform(0.01, 0.2, 5)
    x = np.array([0.05, 0.002, 0.1, 0.01, 0.05, 0.003, 1.5])
    k = _fit_constants(nodes, reps, bsz, ya, yo)
    num = scipy.optimize.approx_fprime(x, lambda v: _objective(v, *k)[0], 1e-7)
    assert np.allclose(_objective(x, *k)[1], num, rtol=1e-3, atol=1e-4)


def _objective_term_by_term(x: np.ndarray, nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray, ya: np.ndarray,
                            yo: np.ndarray) -> tuple[float, np.ndarray]:
    """The fit objective and gradient written out term by term, every power, log and mean taken where it
    appears (the form before `_fit_constants`): the reference the fast form must equal bit for bit."""
    ac, bc, an, bn, ar, br, g = x
    n = len(bsz)
    inter, intra = nodes > 1, (nodes <= 1) & (reps > 1)
    retro = np.maximum(reps - 2, EPS)
    pa = ac + bc * bsz
    pn = np.where(inter, an + bn * retro, np.where(intra, ar + br * retro, EPS + EPS * retro))
    s = pa**g + pn**g
    x1 = np.log(pa) - np.log(ya)
    z = np.log(s) / g - np.log(yo)
    e1, e2 = np.sqrt(np.mean(x1**2)), np.sqrt(np.mean(z**2))
    val = e1 + e2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    d1 = x1 / (n * e1) if e1 > 0 else np.zeros(n)
    d2 = z / (n * e2) if e2 > 0 else np.zeros(n)
    dlo_dg = (pa**g * np.log(pa) + pn**g * np.log(pn)) / (s * g) - np.log(s) / g**2
    dpa = d1 / pa + d2 * (pa ** (g - 1) / s)
    dpn = d2 * (pn ** (g - 1) / s)
    return float(val), np.array([
        dpa.sum(), (dpa * bsz).sum(),
        (dpn * inter).sum() - 2e-2 * bn**2 / an**3, (dpn * inter * retro).sum() + 2e-2 * bn / an**2,
        (dpn * intra).sum() - 2e-2 * br**2 / ar**3, (dpn * intra * retro).sum() + 2e-2 * br / ar**2,
        (d2 * dlo_dg).sum() + 2e-3 * (g - 1)])


@pytest.mark.parametrize("seed", range(4))
def test_objective_equals_the_term_by_term_form_bit_for_bit(seed: int) -> None:
    """The fit (and so every Pollux decision) is unchanged by taking each power and log once: equal values,
    not close ones, over observation sets of every kind (one replica, one node, several nodes; 1–40 points)."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        k = int(rng.integers(1, 41))
        nodes = rng.integers(1, 5, k).astype(float)
        reps = np.where(rng.random(k) < 0.3, 1.0, nodes * rng.integers(1, 5, k))
        bsz = rng.choice([16.0, 32, 64, 100, 128, 256], k)
        ya = rng.uniform(0.01, 0.5, k)
        yo = ya + rng.uniform(0.0, 0.3, k)
        x = np.array([*rng.uniform(1e-8, 0.3, 6), rng.uniform(1.0, 10.0)])
        want = _objective_term_by_term(x, nodes, reps, bsz, ya, yo)
        got = _objective(x, *_fit_constants(nodes, reps, bsz, ya, yo))
        assert got[0] == want[0]
        assert np.array_equal(got[1], want[1])


def test_fit_on_measured_profile_predicts_step_times(models: object) -> None:
    """Fitted to every measured placement of a profile, the model predicts its step times closely."""
    app = models.app("cifar10")  # type: ignore[attr-defined]
    df = app.profile.throughput["t4"].placements
    nodes, reps = df["num_nodes"].to_numpy(), df["num_replicas"].to_numpy()
    bsz, step, sync = df["local_bsz"].to_numpy(), df["step_time"].to_numpy(), df["sync_time"].to_numpy()
    p = fit_perf_params(nodes, reps, bsz, step - sync, step)
    fn = GoodputFunction(p, 1.0, 0.0, 1)
    pred = bsz * reps / fn.throughput(nodes, reps, bsz, np.zeros_like(bsz))
    assert np.sqrt(np.mean(np.log(pred / step) ** 2)) < 0.15


def test_fit_priors_pin_what_the_observations_cannot_identify() -> None:
    p = fit_perf_params([1], [1], [64], [0.1], [0.11])
    assert p.alpha_c == pytest.approx(0.05)  # one atomic batch: alpha_c = half the mean accum time
    assert p.alpha_r == pytest.approx(1e-8) and p.beta_r == pytest.approx(1e-8)  # no multi-replica run
    assert p.alpha_n >= 1.1 * p.alpha_r - 1e-15 and p.beta_n >= 1.1 * p.beta_r - 1e-15  # inter ≥ intra prior
    assert p.alpha_c + p.beta_c * 64 == pytest.approx(0.1, rel=1e-2)  # reproduces the one measurement
    q = fit_perf_params([1, 1], [1, 2], [64, 64], [0.1, 0.1], [0.11, 0.3])
    assert q.alpha_r > 1e-3  # a single-node 2-replica run identifies the intra-node term
    assert q.alpha_n >= 1.1 * q.alpha_r - 1e-12


def test_fit_recovers_known_parameters() -> None:
    true = PolluxParams(0.08, 0.004, 0.3, 0.02, 0.06, 0.01, 2.0)
    grid = [(n, r, b) for n, r in [(1, 1), (1, 2), (1, 4), (2, 8), (4, 16), (3, 12)] for b in (32, 64, 128)]
    nodes, reps, bsz = (np.array([g[i] for g in grid], dtype=float) for i in range(3))
    fn = GoodputFunction(true, 1.0, 0.0, 1)
    step = bsz * reps / fn.throughput(nodes, reps, bsz, np.zeros_like(bsz))
    accum = true.alpha_c + true.beta_c * bsz
    p = fit_perf_params(nodes, reps, bsz, accum, step)
    fit = GoodputFunction(p, 1.0, 0.0, 1)
    pred = bsz * reps / fit.throughput(nodes, reps, bsz, np.zeros_like(bsz))
    # the β/α penalty makes the fit optimistic about scaling, so it is close, not exact
    assert np.sqrt(np.mean(np.log(pred / step) ** 2)) < 0.1
    assert np.max(np.abs(np.log(pred / step)[:3])) < 1e-3  # single-replica runs: compute time only

