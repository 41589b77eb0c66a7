"""Multiple-choice knapsack of Lyra's phase 2 (lyra.md §2.2) on cases whose optimum is known."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from elastisched.policies.lyra.mckp import solve_dp, solve_greedy, solve_reference, upper_bound

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


def test_dp_chooses_as_the_reference_when_capacity_exceeds_every_choice() -> None:
    # solve_dp stops its table at the heaviest possible choice; the choice must be the reference's, ties included
    rng = np.random.default_rng(2)
    for _ in range(300):
        w = [np.arange(int(rng.integers(1, 6))) * int(rng.choice([1, 3])) for _ in range(int(rng.integers(0, 6)))]
        v = [np.concatenate([[0.0], rng.integers(-3, 6, len(x) - 1).astype(float)]) for x in w]  # many ties
        cap = int(rng.integers(0, 40))
        ref, dp = solve_reference(w, v, cap), solve_dp(w, v, cap)
        assert dp.choice == ref.choice and dp.value == ref.value and dp.weight == ref.weight


def test_greedy_near_exact_on_diminishing_returns_at_scale() -> None:
    rng = np.random.default_rng(1)
    w = [np.arange(int(rng.integers(1, 17))) for _ in range(400)]
    v = [rng.uniform(10, 1e4) * x / (x + rng.integers(1, 8)) for x in w]
    for cap in (10, 200, 1500):
        exact, heur = solve_dp(w, v, cap), solve_greedy(w, v, cap)
        assert heur.value >= 0.98 * exact.value
        assert heur.value <= exact.value * (1 + 1e-9)
        assert exact.value <= upper_bound(w, v, cap) * (1 + 1e-9)


def test_greedy_finds_a_value_that_comes_only_with_a_whole_server() -> None:
    # Group B is worth something only with 4 extras (a whole server of its own; fewer would sit across
    # servers and slow it). The hull order takes A's steep first GPU, then B's 4-GPU step no longer fits;
    # the best-single-gain candidate takes B's step first. Exact: B at 4 (1547.85 − 7.385 for C's stall).
    w = [np.arange(2), np.arange(5), np.arange(5)]
    v = [np.array([0.0, 7.088]), np.array([-24.644, -141.897, -375.163, -326.336, 1547.85]),
         np.array([-7.385, 1139.365, 781.208, 613.871, 826.858])]
    exact = solve_dp(w, v, 4)
    assert exact.choice == (0, 4, 0) and exact.value == pytest.approx(1540.465)
    assert solve_greedy(w, v, 4, start=[1, 0, 1]).value == pytest.approx(exact.value)


def test_greedy_repairs_a_start_choice_that_no_longer_fits() -> None:
    # A running job (group 1) is worth something only at its current 3 extras; capacity shrank by one GPU
    # since (a new base). Dropping group 0's one extra (the least value lost for one GPU) keeps group 1;
    # the hull order closes group 1 and the best-single-gain fill takes group 5's 4-GPU step instead.
    w = [np.arange(2), np.arange(4), np.arange(2), np.arange(2), np.arange(2), np.arange(5)]
    v = [arr(0, 150), arr(-214, -595, -1450, 606), arr(0, 300), arr(0, 280), arr(0, 290), arr(0, 0, 0, 0, 900)]
    exact = solve_dp(w, v, 5)
    assert exact.value == pytest.approx(1196.0) and exact.choice[1] == 3
    assert solve_greedy(w, v, 5, start=[1, 3, 1, 1, 0, 0]).value == pytest.approx(exact.value)
