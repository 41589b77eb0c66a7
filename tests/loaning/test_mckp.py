"""Multiple-choice knapsack of Lyra's phase 2 (lyra.md §2.2) on cases whose optimum is known."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from elastisched.policies._mckp import solve_dp, solve_greedy, solve_reference, upper_bound

SOLVERS = (solve_reference, solve_dp, solve_greedy)


def arr(*x: float) -> np.ndarray:
    return np.array(x)


@pytest.mark.parametrize("solve", SOLVERS)
def test_textbook_instance(solve) -> None:  # type: ignore[no-untyped-def]
    # job A: +1 GPU saves 10 s, +2 GPUs 15 s; job B: +1 saves 8 s, +2 saves 14 s; 2 GPUs free
    w = [np.arange(3), np.arange(3)]
    v = [arr(0, 10, 15), arr(0, 8, 14)]
    s = solve(w, v, 2)
    assert s.choice == (1, 1) and s.value == 18 and s.weight == 2


@pytest.mark.parametrize("solve", SOLVERS)
def test_zero_capacity_picks_the_free_items(solve) -> None:  # type: ignore[no-untyped-def]
    s = solve([np.arange(3), np.arange(2)], [arr(0, 5, 9), arr(0, 1)], 0)
    assert s.choice == (0, 0) and s.value == 0


@pytest.mark.parametrize("solve", (solve_reference, solve_dp))
def test_exact_solvers_take_a_non_concave_jump(solve) -> None:  # type: ignore[no-untyped-def]
    # A only pays off at +3 (value 30); B is concave 9, 12, 13.  Capacity 3: best is A+3 = 30 > 13.
    s = solve([np.arange(4), np.arange(4)], [arr(0, 0, 0, 30), arr(0, 9, 12, 13)], 3)
    assert s.choice == (3, 0) and s.value == 30


@pytest.mark.parametrize("solve", SOLVERS)
def test_penalised_current_item_is_kept(solve) -> None:  # type: ignore[no-untyped-def]
    # a running job holds +2 extras; every other size pays a 30 s restart penalty
    v = arr(0, 20, 40, 50) - np.array([30, 30, 0, 30])
    s = solve([np.arange(4)], [v], 3)
    assert s.choice == (2,) and s.value == 40


@pytest.mark.parametrize("solve", SOLVERS)
def test_weights_in_multi_gpu_steps(solve) -> None:  # type: ignore[no-untyped-def]
    w = [np.array([0, 4, 8]), np.array([0, 2])]
    v = [arr(0, 10, 16), arr(0, 7)]
    s = solve(w, v, 6)
    assert s.choice == (1, 1) and s.value == 17 and s.weight == 6


def test_bad_groups_are_rejected() -> None:
    with pytest.raises(ValueError, match="first weight 0"):
        solve_dp([np.array([1, 2])], [arr(1, 2)], 3)


def test_exact_matches_brute_force_and_greedy_bounded() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        groups = int(rng.integers(1, 5))
        w = [np.arange(int(rng.integers(1, 5))) * int(rng.choice([1, 2])) for _ in range(groups)]
        v = [np.concatenate([[0.0], rng.uniform(-5, 40, len(x) - 1)]) for x in w]
        cap = int(rng.integers(0, 10))
        best = max((sum(v[g][i] for g, i in enumerate(c)), c) for c in itertools.product(*(range(len(x)) for x in w))
                   if sum(w[g][i] for g, i in enumerate(c)) <= cap)[0]
        ref, dp, gr = solve_reference(w, v, cap), solve_dp(w, v, cap), solve_greedy(w, v, cap)
        assert ref.value == pytest.approx(best) and dp.value == pytest.approx(best)
        assert gr.weight <= cap and gr.value <= best + 1e-9
        assert upper_bound(w, v, cap) >= best - 1e-9


def test_greedy_near_exact_on_diminishing_returns_at_scale() -> None:
    rng = np.random.default_rng(1)
    w = [np.arange(int(rng.integers(1, 17))) for _ in range(400)]
    v = [rng.uniform(10, 1e4) * x / (x + rng.integers(1, 8)) for x in w]
    for cap in (10, 200, 1500):
        exact, heur = solve_dp(w, v, cap), solve_greedy(w, v, cap)
        assert heur.value >= 0.98 * exact.value
        assert heur.value <= exact.value * (1 + 1e-9)
        assert exact.value <= upper_bound(w, v, cap) * (1 + 1e-9)
