"""Hand-checked cases for the ONES search operators (src/elastisched/policies/ones/ops.py, ones.md §2.6–§2.8)."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.policies.ones import ops
from elastisched.policies.ones.online_throughput import EPS_THROUGHPUT, interp_throughput

E = ops.EMPTY


class FixedRng:
    """Stands in for np.random.Generator: `random` returns the given arrays in turn."""

    def __init__(self, *draws: np.ndarray) -> None:
        self.draws = list(draws)

    def random(self, shape: tuple[int, ...]) -> np.ndarray:
        d = np.asarray(self.draws.pop(0), dtype=float)
        assert d.shape == tuple(shape)
        return d


def test_trim_to_caps_keeps_genes_left_to_right() -> None:
    pop = np.array([[0, 0, 1, 0, 1, E], [1, 1, 1, 2, E, 0]])
    caps = np.array([2, 1, 0])
    assert ops.trim_to_caps(pop, caps).tolist() == [[0, 0, 1, E, E, E], [1, E, E, E, E, 0]]


def test_counts() -> None:
    pop = np.array([[0, 0, 1, E], [2, 2, 2, 1]])
    assert ops.counts(pop, 3).tolist() == [[2, 1, 0], [0, 1, 3]]


def test_uniform_crossover_swaps_masked_slots_and_respects_caps() -> None:
    a = np.array([[0, 0, 1, 1]])
    b = np.array([[1, 1, 0, 0]])
    rng = FixedRng(np.array([[0.9, 0.1, 0.9, 0.1]]))  # < xi=0.5 → swap slots 1 and 3
    c1, c2 = ops.crossover(a, b, np.array([2, 2]), rng, xi=0.5)  # type: ignore[arg-type]
    assert c1.tolist() == [[0, 1, 1, 0]] and c2.tolist() == [[1, 0, 0, 1]]
    rng = FixedRng(np.array([[0.9, 0.1, 0.9, 0.1]]))
    c1, c2 = ops.crossover(a, b, np.array([1, 1]), rng, xi=0.5)  # type: ignore[arg-type]
    assert c1.tolist() == [[0, 1, E, E]] and c2.tolist() == [[1, 0, E, E]]


def test_crossover_extremes_with_a_real_rng() -> None:
    a, b = np.array([[0, 0, 1, E]]), np.array([[2, 2, 2, 2]])
    caps = np.array([4, 4, 4])
    c1, c2 = ops.crossover(a, b, caps, np.random.default_rng(0), xi=0.0)
    assert (c1 == a).all() and (c2 == b).all()
    c1, c2 = ops.crossover(a, b, caps, np.random.default_rng(0), xi=1.0)
    assert (c1 == b).all() and (c2 == a).all()


def test_mutation_drops_whole_executed_jobs_only() -> None:
    pop = np.array([[0, 0, 1, 1, 2], [0, 1, 2, 2, E]])
    executed = np.array([True, True, False])
    draws = np.array([[0.1, 0.9, 0.1], [0.9, 0.2, 0.0]])  # < θ=0.3 → drop (job 2 is protected)
    out = ops.mutate(pop, executed, FixedRng(draws), theta=0.3)  # type: ignore[arg-type]
    assert out.tolist() == [[E, E, 1, 1, 2], [0, E, 2, 2, E]]


def test_pad_three_stages() -> None:
    # jobs: 0 new, 1 new, 2 executed (short), 3 executed (long); capacity 10
    n = np.array([[0, 0, 1, 1]])
    caps = np.array([0, 0, 3, 4])
    maxs = np.array([0, 0, 4, 8])
    out = ops.pad(n, 10, new_order=np.array([0, 1]), exec_order=np.array([2, 3]), caps=caps, max_size=maxs)
    # stage 1: +1 +1 (8 used... 4), stage 2: job2 → 3, job3 → 4 (9 used), stage 3: job2 → 4 (10 used)
    assert out.tolist() == [[1, 1, 4, 4]]
    tight = ops.pad(np.array([[0, 0, 2, 0]]), 3, np.array([0, 1]), np.array([2, 3]), caps, maxs)
    assert tight.tolist() == [[1, 0, 2, 0]]  # FIFO: only the first new job fits
    srtf = ops.pad(np.array([[0, 0, 0, 0]]), 5, np.array([], dtype=int), np.array([3, 2]), caps, maxs)
    assert srtf.tolist() == [[0, 0, 1, 4]]  # job 3 is first in SRTF order and takes its cap


def test_interp_throughput_linear_extrapolation_and_clamps() -> None:
    inf = np.inf
    pts_n = np.array([[1, inf], [1, 2], [1, 2], [1, 2], [inf, inf]])
    pts_x = np.array([[100, 0], [100, 150], [100, 20], [100, 300], [0, 0]], dtype=float)
    q = np.array([[2, 4, 4, 4, 3], [0.5, 1.5, 2, 1, 1]])
    x = interp_throughput(pts_n, pts_x, q)
    assert x[0].tolist() == pytest.approx([200.0, 250.0, EPS_THROUGHPUT, 600.0, EPS_THROUGHPUT])
    assert x[1].tolist() == pytest.approx([50.0, 125.0, 20.0, 100.0, EPS_THROUGHPUT])


def test_fitness_is_remaining_gpu_time_of_predicted_jobs() -> None:
    pts_n = np.array([[1.0, 2.0], [1.0, np.inf], [1.0, np.inf]])
    pts_x = np.array([[10.0, 15.0], [5.0, 0.0], [1.0, 0.0]])
    rem = np.array([30.0, 10.0, np.nan])  # job 2 has no prediction
    n = np.array([[2, 1, 4], [1, 0, 0]])
    # row 0: 2·30/15 + 1·10/5 = 6; row 1: 1·30/10 = 3
    assert ops.fitness(n, rem, pts_n, pts_x).tolist() == pytest.approx([6.0, 3.0])


def test_select_keeps_k_lowest_stably() -> None:
    assert ops.select(np.array([3.0, 1.0, 2.0, 1.0]), 3).tolist() == [1, 3, 2]


NODES = np.repeat(np.arange(4), 4)  # 4 nodes x 4 GPUs


def test_reorder_keeps_running_jobs_in_place_and_shrinks_to_prefix() -> None:
    cur = np.array([0, 0, 0, 0, 1, 1, E, E, 2, 2, 2, 2, E, E, E, E])
    out = ops.reorder(np.array([4, 2, 2]), cur, NODES)
    assert out.tolist() == [0, 0, 0, 0, 1, 1, E, E, 2, 2, E, E, E, E, E, E]


def test_reorder_grows_after_then_before() -> None:
    cur = np.array([E, E, 0, 0, 1, E, E, E] + [E] * 8)
    out = ops.reorder(np.array([4, 3]), cur, NODES)
    assert out[:8].tolist() == [0, 0, 0, 0, 1, 1, 1, E]


def test_reorder_places_new_jobs_best_fit_node_aligned() -> None:
    cur = np.array([0, 0, E, E, 1, 1, 1, 1, E, E, E, E, E, E, E, E])
    out = ops.reorder(np.array([2, 4, 2, 4]), cur, NODES)
    assert out.tolist() == [0, 0, 2, 2, 1, 1, 1, 1, 3, 3, 3, 3, E, E, E, E]


def test_reorder_moves_nothing_when_allocation_is_unchanged() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        alloc = rng.integers(0, 4, 5)
        cur = ops.layout_from_counts(alloc, 16)
        assert (ops.reorder(alloc, cur, NODES) == cur).all()


def test_reorder_compacts_when_fragmented() -> None:
    cur = np.array([0, E, 1, E, 2, E, 3, E] + [E] * 8)
    out = ops.reorder(np.array([1, 1, 1, 1, 12]), cur, NODES)
    assert out.tolist() == [0, 1, 2, 3] + [4] * 12
    assert ops.counts(out[None, :], 5).tolist() == [[1, 1, 1, 1, 12]]


def test_scaling_limit_stops_at_the_fastest_observed_size() -> None:
    inf = np.inf
    pts_n = np.array([[1, 2, 4, 8], [1, 2, inf, inf], [1, 2, 4, inf], [inf, inf, inf, inf]])
    pts_x = np.array([[100, 190, 560, 460], [100, 190, 0, 0], [100, 190, 200, 0], [0, 0, 0, 0]], dtype=float)
    big = ops.NO_LIMIT
    assert ops.scaling_limit(pts_n, pts_x).tolist() == [4, big, big, big]  # row 2: 4 is fastest and largest
    # with a 10 % minimum gain, 190 → 200 at 2 → 4 GPUs is not worth it
    assert ops.scaling_limit(pts_n, pts_x, min_gain=0.1).tolist() == [4, big, 2, big]


def test_pad_start_sizes_for_new_jobs() -> None:
    # D1 (docs/ones.md): new jobs start at a per-job size, FIFO; the last one gets what is left
    n = np.array([[0, 0, 2]])
    caps = np.array([0, 0, 2])
    out = ops.pad(n, 8, np.array([0, 1]), np.array([2]), caps, caps, start=np.array([4, 4, 1]))
    assert out.tolist() == [[4, 2, 2]]
    ones_ = ops.pad(n, 8, np.array([0, 1]), np.array([2]), caps, caps)
    assert ones_.tolist() == [[1, 1, 2]]  # default: 1 GPU each (artifact)


def test_fitness_time_counts_left_out_jobs_at_one_gpu() -> None:
    # D4 (docs/ones.md, A1's other reading): remaining time; a job left out counts as if on 1 GPU
    pts_n = np.array([[1.0, 2.0], [1.0, np.inf], [1.0, np.inf]])
    pts_x = np.array([[10.0, 15.0], [5.0, 0.0], [1.0, 0.0]])
    rem = np.array([30.0, 10.0, np.nan])
    n = np.array([[2, 1, 4], [1, 0, 0]])
    # row 0: 30/15 + 10/5 = 4; row 1: 30/10 + 10/5 (left out: one GPU) = 5
    assert ops.fitness(n, rem, pts_n, pts_x, "time").tolist() == pytest.approx([4.0, 5.0])
    # under GPU-time, dropping job 1 lowers the score (the artifact's bias towards preemption)
    assert ops.fitness(n, rem, pts_n, pts_x)[1] < ops.fitness(np.array([[1, 1, 0]]), rem, pts_n, pts_x)[0]
