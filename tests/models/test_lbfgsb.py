"""`models.lbfgsb`: the fits' L-BFGS-B driven directly ends where `scipy.optimize.minimize` ends, bit for bit, for
Pollux's objective (scipy's default tolerances) and Sia's (`tol=1e-5`), with and without pinned parameters."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy
import scipy.optimize

from elastisched.models.lbfgsb import compiled_step, minimize_bounded
from elastisched.models.throughput import artifact_fit_start
from elastisched.policies.pollux.goodput import _fit_constants, _objective
from elastisched.policies.sia.goodput import _loss_grad

Problem = tuple[list[float], list[float], list[float], tuple[Any, ...]]


def _observations(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Random (nodes, replicas, atomic batch, accum time, step time) of 1–14 runs."""
    k = int(rng.integers(1, 15))
    nodes = rng.integers(1, 4, k).astype(float)
    reps = np.where(rng.random(k) < 0.4, 1.0, nodes * rng.integers(1, 5, k))
    bsz = rng.choice([16.0, 32, 64, 128], k)
    accum = rng.uniform(0.01, 0.5, k)
    return nodes, reps, bsz, accum, accum + rng.uniform(0.0, 0.3, k)


def _pollux_problem(rng: np.random.Generator) -> Problem:
    nodes, reps, bsz, accum, step = _observations(rng)
    x0, lower, upper = artifact_fit_start(nodes, reps, bsz, accum)
    return x0, lower, upper, _fit_constants(nodes, reps, bsz, accum, step)


def _sia_problem(rng: np.random.Generator) -> Problem:
    nodes, reps, bsz, accum, step = _observations(rng)
    x0, lower, upper = artifact_fit_start(nodes, reps, bsz, accum)
    return x0, lower, upper, (nodes, reps, bsz, np.log(accum), np.log(step))


def test_the_direct_path_runs_wherever_scipy_has_the_compiled_routine() -> None:
    major, minor = (int(p) for p in scipy.__version__.split(".")[:2])
    assert (compiled_step() is not None) == ((major, minor) >= (1, 15))


@pytest.mark.parametrize(("objective", "problem", "tol"), [(_objective, _pollux_problem, None),
                                                          (_loss_grad, _sia_problem, 1e-5),
                                                          (_objective, _pollux_problem, 1e-2)],
                         ids=["pollux", "sia", "coarse"])  # coarse: stops on the projected gradient too
@pytest.mark.parametrize("seed", range(3))
def test_direct_lbfgsb_takes_scipys_steps_bit_for_bit(objective: Any, problem: Any, tol: float | None,
                                                       seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(50):
        x0, lower, upper, args = problem(rng)
        want = scipy.optimize.minimize(objective, np.array(x0), args=args, jac=True, method="L-BFGS-B",
                                       bounds=list(zip(lower, upper, strict=True)), tol=tol).x
        assert np.array_equal(minimize_bounded(objective, x0, lower, upper, args, tol=tol), want)


def test_a_scipy_whose_routine_changed_falls_back_to_minimize(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled step is not used where scipy is older, where driving it fails, or where it steps elsewhere
    than `minimize` (here: one correction fewer): the fits go through `minimize` then, with its results."""
    import elastisched.models.lbfgsb as lb

    rng = np.random.default_rng(7)
    x0, lower, upper, args = _pollux_problem(rng)
    want = scipy.optimize.minimize(_objective, np.array(x0), args=args, jac=True, method="L-BFGS-B",
                                   bounds=list(zip(lower, upper, strict=True))).x

    def broken(*a: Any) -> np.ndarray:
        raise TypeError("setulb() takes 16 positional arguments")

    changes = [(scipy, "__version__", "1.14.1"), (lb, "_drive", broken), (lb, "CORRECTIONS", lb.CORRECTIONS - 1)]
    for target, name, value in changes:
        with monkeypatch.context() as m:
            m.setattr(target, name, value)
            compiled_step.cache_clear()
            try:
                assert compiled_step() is None, name
                assert np.array_equal(minimize_bounded(_objective, x0, lower, upper, args), want)
            finally:
                compiled_step.cache_clear()
    assert compiled_step() is not None
