"""Adaptive batch size: the JABAS similarity rule, the Pollux noise estimate and goodput rule, LR rules."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from elastisched.train.adaptive import (
    AdaScale,
    GoodputRule,
    LinearScale,
    NoiseEstimate,
    SimilarityRule,
    SqrtScale,
    StepTiming,
    halves_stats,
)
from elastisched.train.contract import LaunchEnv


def _halves(mu: torch.Tensor, sigma: float, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample gradients mu + sigma·ε summed over two halves of n samples each."""
    g = torch.Generator().manual_seed(seed)
    per = mu + sigma * torch.randn(2 * n, mu.numel(), generator=g, dtype=torch.float64)
    return per[:n].sum(0), per[n:].sum(0)


def test_similarity_rule_raises_batch_when_gradients_are_noisy() -> None:
    mu = torch.full((500,), 0.01, dtype=torch.float64)
    e, o = _halves(mu, sigma=1.0, n=8, seed=0)  # noise dominates: halves nearly orthogonal
    s = halves_stats(e, o, 8, 8)
    assert s is not None and s.similarity < 0.1
    rule = SimilarityRule(gamma=0.1)
    assert rule.propose(100, NoiseEstimate(), s, None, 16, 1000, 64) == 110
    assert rule.propose(990, NoiseEstimate(), s, None, 16, 1000, 64) == 1000  # clamped to the bound


def test_similarity_rule_lowers_batch_when_gradients_agree() -> None:
    mu = torch.ones(500, dtype=torch.float64)
    e, o = _halves(mu, sigma=0.1, n=8, seed=1)  # signal dominates: halves point the same way
    s = halves_stats(e, o, 8, 8)
    assert s is not None and s.similarity > 0.9
    rule = SimilarityRule(gamma=0.1)
    assert rule.propose(100, NoiseEstimate(), s, None, 16, 1000, 64) == 90
    assert rule.propose(17, NoiseEstimate(), s, None, 16, 1000, 64) == 16  # clamped to the bound
    assert rule.propose(5, NoiseEstimate(), s, None, 4, 1000, 64) == 4  # always moves by >= 1 sample


def test_noise_estimate_recovers_known_signal_and_variance() -> None:
    d, sigma = 400, 2.0
    mu = torch.full((d,), 0.5, dtype=torch.float64)  # |μ|² = 100, tr(Σ) = d σ² = 1600
    est = NoiseEstimate(theta=0.95)
    for seed in range(200):
        e, o = _halves(mu, sigma, n=32, seed=seed)
        s = halves_stats(e, o, 32, 32)
        assert s is not None
        est.update(s)
    assert est.grad_sqr() == pytest.approx(100.0, rel=0.1)
    assert est.grad_var() == pytest.approx(1600.0, rel=0.1)
    assert est.noise_scale() == pytest.approx(16.0, rel=0.15)


def test_halves_need_two_nonempty_halves() -> None:
    assert halves_stats(torch.ones(3), torch.zeros(3), 4, 0) is None


def test_lr_scaling_rules() -> None:
    est = NoiseEstimate()
    assert SqrtScale().factor(4.0, est, 32) == 2.0
    assert LinearScale().factor(4.0, est, 32) == 4.0
    assert AdaScale().factor(4.0, est, 32) == 1.0  # no statistics yet: do not scale
    from elastisched.train.adaptive import GradStats

    est.update(GradStats(0.0, sqr=1e-9, var=32.0, n_even=8, n_odd=8))  # pure noise → linear
    assert AdaScale().factor(4.0, est, 32) == pytest.approx(4.0, rel=1e-3)
    est2 = NoiseEstimate()
    est2.update(GradStats(1.0, sqr=1.0, var=1e-9, n_even=8, n_odd=8))  # no noise → no scaling
    assert AdaScale().factor(4.0, est2, 32) == pytest.approx(1.0, rel=1e-6)


def test_goodput_rule_prefers_larger_batch_for_larger_noise() -> None:
    from elastisched.train.adaptive import GradStats

    timing = StepTiming(step_time=0.1, sync_time=0.05, global_batch=64)

    def pick(var: float) -> int:
        est = NoiseEstimate()
        est.update(GradStats(0.0, sqr=1.0, var=var, n_even=8, n_odd=8))
        return GoodputRule().propose(64, est, GradStats(0.0, 1.0, var, 8, 8), timing, 16, 4096, 64)

    low, high = pick(10.0), pick(10000.0)
    assert 16 <= low < high <= 4096


def _run_inproc(y_noise: float, signal_scale: float) -> list[int]:
    """World of one, 4 micro-batches per step (parity halves within the rank), stats every step."""
    import elastisched.train as et

    torch.manual_seed(0)
    ctx = et.init(env=LaunchEnv(accum_steps=4, local_batch=8, global_batch=32), stats_interval=1)
    n, d = 1024, 128
    x = (0.1 if signal_scale else 1.0) * torch.randn(n, d)
    # signal: a constant offset the zero model misses by far (every sample pulls the bias the same way);
    # noise: zero-mean targets the zero model already fits on average (samples pull every which way).
    y = signal_scale + y_noise * torch.randn(n, 1)
    net = nn.Linear(d, 1)
    nn.init.zeros_(net.weight)  # zero model: the optimum for pure-noise targets, far off otherwise
    nn.init.zeros_(net.bias)
    opt = torch.optim.SGD(net.parameters(), lr=1e-6)  # stay where we are: the gradient regime is fixed
    loader = et.ElasticDataLoader(TensorDataset(x, y), batch_size=32, ctx=ctx)
    loader.autoscale_batch_size(256, rule="similarity", min_batch_size=8, local_bsz_bounds=(2, 8))
    model = et.ElasticDataParallel(net, opt, ctx=ctx)
    sizes = []
    for _ in ctx.remaining_epochs_until(1):
        for xb, yb in loader:
            nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            if not loader.accumulating:
                sizes.append(loader.current_batch_size)
            if len(sizes) >= 12:
                return sizes
    return sizes


def test_similarity_end_to_end_raises_on_noise(inproc_ctx: None) -> None:
    sizes = _run_inproc(y_noise=5.0, signal_scale=0.0)  # model at the optimum, targets pure noise
    moves = [b - a for a, b in itertools.pairwise(sizes) if b != a]
    # Halves of 16 samples are a noisy probe: demand the trend, not every single move.
    assert sizes[-1] >= 48 and sum(m > 0 for m in moves) >= 2 * sum(m < 0 for m in moves)


def test_similarity_end_to_end_lowers_on_agreement(inproc_ctx: None) -> None:
    sizes = _run_inproc(y_noise=0.0, signal_scale=10.0)  # far from a noise-free optimum
    assert sizes[0] == 32 and sizes[-1] <= 16 and sizes == sorted(sizes, reverse=True)
    assert math.isfinite(sizes[-1])
