"""Expected half-batch gradient similarity and the adaptive-batching step rule (jabas.md §2(a))."""

from __future__ import annotations

import math

import numpy as np
import pytest

from elastisched.policies.jabas.similarity import (
    AdaptiveBatchingConfig,
    AdaptiveBatchingState,
    GradStats,
    adaptive_step,
    batch_for_similarity,
    bundled_pollux_grad_trace,
    expected_cosine_similarity,
    load_pollux_grad_trace,
    lr_modifier,
    similarity_target_batch,
    simulate_adjustments,
)


def test_expected_cosine_matches_monte_carlo():
    rng = np.random.default_rng(0)
    d, batch = 4000, 64
    g = rng.normal(size=d) * 0.05
    scales = rng.uniform(0.5, 1.5, size=d)  # anisotropic per-sample covariance, diag(scales²)
    trace = float((scales**2).sum())
    cos = []
    for _ in range(200):
        halves = [g + (rng.normal(size=(batch // 2, d)) * scales).mean(axis=0) for _ in range(2)]
        cos.append(halves[0] @ halves[1] / np.linalg.norm(halves[0]) / np.linalg.norm(halves[1]))
    stats = GradStats(grad_sqr=float(g @ g), grad_var=trace / 32.0, reference_batch=32.0)
    assert expected_cosine_similarity(stats, batch) == pytest.approx(float(np.mean(cos)), abs=0.01)


def test_similarity_properties():
    s = GradStats(grad_sqr=2.0, grad_var=3.0, reference_batch=100.0)  # tr(Σ) = 300, B_noise = 150
    assert s.noise_scale == pytest.approx(150.0)
    assert expected_cosine_similarity(s, 300.0) == pytest.approx(0.5)
    assert expected_cosine_similarity(s, 1e9) == pytest.approx(1.0, abs=1e-6)
    assert expected_cosine_similarity(s, 600) > expected_cosine_similarity(s, 300)
    b = batch_for_similarity(s, 0.1)
    assert expected_cosine_similarity(s, b) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        expected_cosine_similarity(s, 0)


def test_pollux_trace_loader_and_interpolation(tmp_path):
    tr = bundled_pollux_grad_trace("cifar10")
    assert tr.batch_sizes == (128, 256, 512, 1024, 2048, 4096)
    assert tr.reference_batch == 128
    s = tr.stats(128, 0)
    assert (s.grad_sqr, s.grad_var) == pytest.approx((8.947307535897329, 5.066593295150894))
    mid = tr.stats(192, 0)  # halfway between the 128 and 256 files
    assert mid.grad_sqr == pytest.approx((8.947307535897329 + 17.379458169870425) / 2)
    assert s.trace_cov == pytest.approx(5.066593295150894 * 128)
    own = load_pollux_grad_trace(tr_dir := _write_trace(tmp_path), reference_batch=64)
    assert own.reference_batch == 64 and own.num_epochs == 2 and tr_dir.name == "toy"
    with pytest.raises(ValueError):
        tr.stats(128, 10_000)


def _write_trace(tmp_path):
    d = tmp_path / "toy"
    d.mkdir()
    for b in (64, 128):
        (d / f"validation-{b}.csv").write_text(
            "progress,iteration,metric,grad_sqr,grad_var\n1,1,0.1,1.0,2.0\n2,2,0.2,0.5,2.5\n")
    return d


CFG = AdaptiveBatchingConfig(similarity_target=0.1, lower_bound=256, upper_bound=32768, adjust_interval=100)


def _resolver(unit=16):
    def resolve(target: float, gbs: int):
        w = round(target / unit)
        w = w + (w % 2) if target > gbs else w - (w % 2)
        new = w * unit
        return None if new == gbs else (unit, new)
    return resolve


def test_step_rule_direction_bounds_and_lr():
    assert similarity_target_batch(1000, 0.05, CFG) == pytest.approx(1100)
    assert similarity_target_batch(1000, 0.2, CFG) == pytest.approx(900)
    assert similarity_target_batch(1000, 0.1, CFG) == 1000
    assert similarity_target_batch(300, 0.5, CFG) == 270
    assert similarity_target_batch(260, 0.5, CFG) == 256  # clamped to the lower bound
    assert similarity_target_batch(32000, 0.0, CFG) == 32768
    assert lr_modifier(1024, CFG) == pytest.approx(2.0)


def test_adaptive_step_only_every_p_steps():
    st = AdaptiveBatchingState(gbs=1024, lbs=32, sim_step=1)
    for _ in range(98):
        st = adaptive_step(st, CFG, 0.0, _resolver())
    assert st.gbs == 1024 and st.sim_step == 99
    st = adaptive_step(adaptive_step(st, CFG, 0.0, _resolver()), CFG, 0.0, _resolver())
    assert st.sim_step == 101 and st.gbs > 1024 and st.trajectory == ((100, st.gbs),)
    assert st.lr_modifier == pytest.approx(math.sqrt(st.gbs / 256))


def test_adaptive_step_rejects_too_few_workers_and_no_solution():
    st = AdaptiveBatchingState(gbs=1024, lbs=32, sim_step=100)
    assert adaptive_step(st, CFG, 0.0, lambda t, g: None).gbs == 1024
    assert adaptive_step(st, CFG, 0.0, lambda t, g: (512, 1024 + 512), world_size=8).gbs == 1024


def test_controller_converges_to_similarity_target():
    stats = GradStats(grad_sqr=1.0, grad_var=20.0, reference_batch=256)  # B_noise = 5120
    target_b = batch_for_similarity(stats, 0.1)  # ≈ 1138
    st = AdaptiveBatchingState(gbs=256, lbs=32)
    st = simulate_adjustments(st, CFG, lambda b: expected_cosine_similarity(stats, b), _resolver(), 5000)
    assert st.sim_step == 5001 and len(st.trajectory) == 50
    late = [g for _, g in st.trajectory[-10:]]
    assert min(late) <= target_b * 1.25 and max(late) >= target_b * 0.75


def test_simulate_matches_step_loop():
    stats = GradStats(grad_sqr=1.0, grad_var=20.0, reference_batch=256)
    f = lambda b: expected_cosine_similarity(stats, b)  # noqa: E731
    a = b = AdaptiveBatchingState(gbs=512, lbs=32, sim_step=37)
    for _ in range(777):
        a = adaptive_step(a, CFG, f, _resolver())
    b = simulate_adjustments(b, CFG, f, _resolver(), 777)
    assert a == b


def test_config_validation():
    with pytest.raises(ValueError):
        AdaptiveBatchingConfig(similarity_target=0.1, lower_bound=512, upper_bound=256)
    with pytest.raises(ValueError):
        AdaptiveBatchingConfig(similarity_target=0.1, lower_bound=1, upper_bound=2, adjust_rate=1.5)
