"""Pollux's narrowed search on a large idle cluster (issue 22): which nodes it keeps, that moving states onto
them keeps every objective, and that a whole run on a big cluster searches fewer nodes and still finishes."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.models import PerfModels
from elastisched.policies.base import make_policy
from elastisched.policies.pollux import policy as pollux_policy
from elastisched.policies.pollux.ga import AllocationProblem
from elastisched.policies.pollux.population import Population, from_cells, take
from elastisched.policies.pollux.search_space import kept_nodes, onto_kept
from elastisched.sim import SimConfig, simulate
from elastisched.workloads import Workload, load_workload


def _cluster(seed: int) -> tuple[AllocationProblem, np.ndarray]:
    """40 nodes of 4 GPUs (class 0) and 6 of 8 (class 1); 5 jobs, two of them running; job 0 only on class 0."""
    rng = np.random.default_rng(seed)
    caps = np.array([4] * 40 + [8] * 6)
    node_class = np.array([0] * 40 + [1] * 6)
    jobs = 5
    table = np.cumsum(rng.random((jobs, 2, 41)), axis=2)
    table[:, :, 0] = 0
    base = from_cells(np.zeros(3, dtype=np.intp), np.array([0, 1, 1]), np.array([5, 5, 41]),
                      np.array([2, 2, 8]), 1, (jobs, len(caps)))
    allowed = np.array([[True, False], [True, True], [True, True], [False, True], [True, True]])
    problem = AllocationProblem(table, base, caps, node_class, allowed, np.array([3, 12, 2, 40, 1]),
                                np.zeros(jobs, dtype=np.int64), rng.random(jobs), 0.25, max_nodes=4)
    return problem, allowed


def test_kept_nodes_are_the_busy_ones_and_as_many_empty_ones_as_jobs_can_span() -> None:
    p, allowed = _cluster(0)
    kept = kept_nodes(p.base, p.node_caps, p.node_class, allowed, p.max_replicas, p.max_nodes)
    # class 0: jobs 0, 1, 2, 4 span min(max replicas, 4) = 3 + 4 + 2 + 1 = 10 empty nodes at most;
    # class 1: jobs 1, 2, 3, 4 span 4 + 2 + 4 + 1 = 11 > its 5 empty nodes, so all of them stay
    empty0 = [n for n in range(40) if n != 5][:10]
    assert kept.keep.tolist() == sorted([5, *empty0, *range(40, 46)])
    assert not kept.everything
    busy_only = kept_nodes(p.base, p.node_caps, p.node_class, np.zeros_like(allowed), p.max_replicas, p.max_nodes)
    assert busy_only.keep.tolist() == [5, 41]


def _feasible_states(p: AllocationProblem, seed: int, n: int = 40) -> Population:
    """States the search itself makes: the current allocation, mutated and repaired a few times."""
    rng = np.random.default_rng(seed)
    pop = take(p.base, np.zeros(n, dtype=np.intp))
    for _ in range(4):
        pop = p.repair(p.mutate(pop, rng), rng)
    return pop


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_states_moved_onto_the_kept_nodes_keep_their_objectives(seed: int) -> None:
    p, allowed = _cluster(seed)
    states = _feasible_states(p, seed)
    assert len(np.unique(states.node)) > 20  # the mutation spread them over many of the empty nodes
    kept = kept_nodes(p.base, p.node_caps, p.node_class, allowed, p.max_replicas, p.max_nodes)
    narrow = AllocationProblem(p.speedup, onto_kept(p.base, kept, p.num_jobs), p.node_caps[kept.keep],
                               p.node_class[kept.keep], allowed, p.max_replicas, p.min_replicas, p.restart_factor,
                               p.scale, p.max_nodes)
    moved = onto_kept(states, kept, p.num_jobs)
    assert len(moved.job) == len(states.job)  # feasible states never need more nodes than were kept
    np.testing.assert_allclose(narrow.evaluate(moved), p.evaluate(states))
    back = Population(moved.ptr, moved.job, kept.keep[moved.node], moved.count)  # as the policy decides
    np.testing.assert_allclose(p.evaluate(back), p.evaluate(states))
    again = narrow.repair(moved, np.random.default_rng(0))  # still feasible: the repair changes nothing
    assert (again.ptr == moved.ptr).all() and (again.count == moved.count).all()


def test_a_large_idle_cluster_is_searched_narrowly(models: PerfModels, monkeypatch: pytest.MonkeyPatch) -> None:
    searched: list[int] = []
    real = pollux_policy.search

    def spy(problem: AllocationProblem, *args: object, **kw: object) -> object:
        searched.append(problem.num_nodes)
        return real(problem, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(pollux_policy, "search", spy)
    full = load_workload("pollux:workload-6", models)
    wl = Workload(full.name + "-first6", full.jobs[:6], full.source, full.digest)
    cluster, config = parse_cluster("24x4:t4"), SimConfig(seed=0, max_time=4 * 3600.0)
    narrow = simulate(wl, make_policy("pollux", generations=15, narrow_above=16), cluster, models, config)
    assert searched and min(searched) < 24  # few jobs need few of the empty nodes
    assert narrow.summary["n_finished"] >= 1  # decisions on the kept nodes map back onto real ones
    searched.clear()
    simulate(wl, make_policy("pollux", generations=15), cluster, models, config)
    assert searched and set(searched) == {24}  # at most 64 nodes: the whole cluster, as the artifact


def test_narrow_above_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="narrow_above"):
        make_policy("pollux", narrow_above=-1)
