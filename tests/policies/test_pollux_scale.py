"""Pollux at cluster scale (issue 22): sparse states against the dense artifact formulas, the mutation's law,
the vectorised goodput tables, the time budget and quiet rounds."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView
from elastisched.models.throughput import PolluxParams
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.policies.pollux.beliefs import FitKey, PolluxBeliefs
from elastisched.policies.pollux.ga import P_NORM, AllocationProblem
from elastisched.policies.pollux.goodput import GoodputFunction, optimize_many
from elastisched.policies.pollux.nsga import search
from elastisched.policies.pollux.population import concat, from_cells, from_dense, hashes, take, to_dense
from elastisched.sim import SimConfig, simulate
from elastisched.workloads import Workload, load_workload


def _random_problem(seed: int, jobs: int = 9, nodes: int = 6) -> tuple[AllocationProblem, np.ndarray]:
    rng = np.random.default_rng(seed)
    table = np.cumsum(rng.random((jobs, 2, 17)), axis=2)
    table[:, :, 0] = 0
    caps = rng.choice([4, 8], nodes)
    cap = np.where(rng.random((jobs, nodes)) < 0.8, caps[None, :], 0)
    base = np.zeros((jobs, nodes), dtype=int)
    for j in range(jobs):
        n = int(rng.integers(nodes))
        base[j, n] = 1 if cap[j, n] else 0
    p = AllocationProblem.from_dense(table, base, caps, cap, rng.integers(1, 12, jobs), (rng.random(jobs) < 0.2) * 2,
                                     rng.random(jobs), 0.7, max_nodes=3)
    return p, cap


def _dense_objectives(p: AllocationProblem, states: np.ndarray, base: np.ndarray) -> np.ndarray:
    """The artifact's objectives on dense (P, J, N) states, written out directly."""
    reps = states.sum(axis=2)
    multi = (np.count_nonzero(states, axis=2) > 1).astype(int)
    sp = p.speedup[np.arange(states.shape[1])[None, :], multi, np.minimum(reps, p.speedup.shape[2] - 1)]
    scaled = sp * p.scale
    scaled = np.where((states != base).any(axis=2), scaled * p.restart_factor, scaled)
    mean = np.mean((scaled + 1e-3) ** P_NORM, axis=1) ** (1.0 / P_NORM)
    total = (states.any(axis=1) * p.node_caps).sum(axis=1)
    util = np.where(total > 0, sp.sum(axis=1) / np.maximum(total, 1), 0.0)
    return np.column_stack([-mean, -util])


def test_population_operations_keep_states_and_fingerprints_ignore_order() -> None:
    rng = np.random.default_rng(0)
    dense = rng.integers(0, 3, (5, 4, 6)) * (rng.random((5, 4, 6)) < 0.4)
    pop = from_dense(dense)
    assert (to_dense(pop, 4, 6) == dense).all()
    assert (to_dense(take(pop, np.array([3, 0, 3])), 4, 6) == dense[[3, 0, 3]]).all()
    assert (to_dense(concat(pop, take(pop, np.array([1]))), 4, 6) == np.concatenate([dense, dense[[1]]])).all()
    st, job, node, count = pop.state, pop.job, pop.node, pop.count
    rev = np.arange(len(job))[::-1]  # the same cells in the opposite order
    again = from_cells(st[rev], job[rev], node[rev], count[rev], len(pop), (4, 6))
    assert (hashes(again, 6) == hashes(pop, 6)).all()
    h = hashes(pop, 6)
    distinct = {d.tobytes() for d in dense}
    assert len(set(h.tolist())) == len(distinct)


@pytest.mark.parametrize("seed", range(4))
def test_sparse_objectives_equal_the_dense_formula(seed: int) -> None:
    p, cap = _random_problem(seed)
    rng = np.random.default_rng(seed + 10)
    states = np.minimum(rng.integers(0, 4, (50, *cap.shape)) * (rng.random((50, *cap.shape)) < 0.3), cap)
    base = to_dense(p.base, *cap.shape)[0]
    assert p.evaluate(from_dense(states)) == pytest.approx(_dense_objectives(p, states, base), rel=1e-12)


def test_mutation_raises_free_cells_with_the_artifact_probabilities() -> None:
    """One free 4-GPU node, A = 5 jobs allowed on it, two of them on it already: a job not on the node is
    raised with p1 = 1/5, one on it with p1 + p2 − p1·p2 (p2 = 1/2); the node's other neighbours never."""
    jobs, nodes = 5, 2
    table = np.tile(np.arange(9, dtype=float), (jobs, 2, 1))
    base = np.zeros((jobs, nodes), dtype=int)
    base[0, 0] = base[1, 0] = 1  # node 0: 2 of 4 GPUs used by jobs 0 and 1
    base[2:, 1] = [3, 0, 0]
    caps = np.array([4, 4])
    p = AllocationProblem.from_dense(table, base, caps, np.tile(caps, (jobs, 1)), np.full(jobs, 8), np.zeros(jobs),
                                     np.ones(jobs), 1.0)
    k = 20000
    start = np.repeat(base[None], k, axis=0)
    # raise step alone: the reset/lose steps would change the base rows
    out = to_dense(p._raise_free(from_dense(start), np.random.default_rng(3)), jobs, nodes)
    changed = out[:, :, 0] != start[:, :, 0]
    up = out[:, :, 0] > start[:, :, 0]
    assert (out >= start).all() and (out[:, :, 0] <= 4).all()
    p1, p2 = 1 / 5, 1 / 2
    # a raised cell lands on a uniform draw between its value and 4: it changes with probability
    # (4 - value) / (5 - value); a new cell (value 0) ends above 0 with probability 4/5
    assert up[:, 2].mean() == pytest.approx(p1 * 4 / 5, abs=0.01)
    assert changed[:, 0].mean() == pytest.approx((p1 + p2 - p1 * p2) * 3 / 4, abs=0.01)


def test_optimize_many_equals_the_per_job_optimisation(models: object) -> None:
    rng = np.random.default_rng(0)
    fns, apps = [], []
    for name in ("cifar10", "bert", "imagenet", "yolov3"):
        app = models.app(name)  # type: ignore[attr-defined]
        perf = PolluxParams(*(rng.random(6) * 0.1 + 1e-3), 1.0 + rng.random())
        fns.append(GoodputFunction(perf, rng.random(), rng.random() * 10, app.init_batch_size))
        apps.append(app)
    q = [(k, n, r) for k in range(len(fns)) for n in (1, 2) for r in range(1, 33)]
    good, atomic, accum = optimize_many(fns, apps, np.array([x[0] for x in q]), np.array([float(x[1]) for x in q]),
                                        np.array([float(x[2]) for x in q]))
    for i, (k, n, r) in enumerate(q):
        a = apps[k]
        g1, a1, c1 = fns[k].optimize(n, r, a.max_batch_size, (a.min_local_bsz, a.max_local_bsz))
        assert (g1[0], a1[0], c1[0]) == (good[i], atomic[i], accum[i])


def _fns(models: object, rng: np.random.Generator, names: tuple[str, ...]) -> tuple[list[GoodputFunction], list]:
    fns, apps = [], []
    for name in names:
        app = models.app(name)  # type: ignore[attr-defined]
        perf = PolluxParams(*(rng.random(6) * 0.1 + 1e-3), 1.0 + rng.random())
        fns.append(GoodputFunction(perf, rng.random(), rng.random() * 10, app.init_batch_size))
        apps.append(app)
    return fns, apps


def test_speedup_tables_keep_their_batch_candidates_across_new_statistics(models: object) -> None:
    """A job whose fit and size are unchanged keeps its batch candidates (only the statistics' part is redone);
    every table equals the per-job optimisation, whichever jobs reused theirs."""
    rng = np.random.default_rng(3)
    fns, apps = _fns(models, rng, ("cifar10", "bert", "imagenet", "yolov3", "cifar10"))
    ids = [f"j{k}" for k in range(len(fns))]
    jobs = [SimpleNamespace(job_id=j) for j in ids]
    beliefs = PolluxBeliefs()
    for j in ids:
        beliefs.belief(j)
    maxr = np.array([8, 16, 4, 32, 12])
    beliefs.speedups(jobs, dict(zip(ids, apps, strict=True)), dict(zip(ids, fns, strict=True)), maxr, 1, 3)  # type: ignore[arg-type]
    kept = [beliefs.jobs[j].cand for j in ids]
    new = list(fns)
    new[0] = GoodputFunction(fns[0].perf, rng.random(), rng.random() * 10, fns[0].init_batch_size)  # statistics
    new[1] = GoodputFunction(fns[1].perf, rng.random(), rng.random() * 10, fns[1].init_batch_size)
    new[2] = _fns(models, rng, ("imagenet",))[0][0]  # a new fit
    maxr[3] = 20  # another size
    table = beliefs.speedups(jobs, dict(zip(ids, apps, strict=True)), dict(zip(ids, new, strict=True)), maxr, 2, 5)  # type: ignore[arg-type]
    assert [beliefs.jobs[j].cand is c for j, c in zip(ids, kept, strict=True)] == [True, True, False, False, True]
    for i, (fn, a) in enumerate(zip(new, apps, strict=True)):
        limits = (a.min_local_bsz, a.max_local_bsz)
        base = fn.optimize(2, 5, a.max_batch_size, limits)[0][0]
        for r in range(1, int(maxr[i]) + 1):
            one = fn.optimize(1, r, a.max_batch_size, limits)[0][0]
            more = fn.optimize(2, r, a.max_batch_size, limits)[0][0] if r >= 2 else one
            assert (table[i, 0, r], table[i, 1, r]) == (one / base, more / base)


def test_fit_keys_hash_once_and_match_their_tuples() -> None:
    obs = tuple(((1, r, 32), (0.1 * r, 0.2 * r)) for r in range(1, 200))
    key = FitKey(("cifar10", obs))
    assert key == ("cifar10", obs) and hash(key) == hash(("cifar10", obs)) == hash(key)
    assert {("cifar10", obs): "fit"}[key] == "fit" and key[0] == "cifar10"
    assert FitKey(("bert", obs)) != key
    assert key._hash == hash(("cifar10", obs))  # kept from the first hash on


def test_a_search_out_of_budget_returns_its_best_so_far() -> None:
    p, _ = _random_problem(5, jobs=40, nodes=30)
    init = p.base
    stats: dict[str, float | str] = {}
    _, values = search(p, init, np.random.default_rng(0), 100, 100, budget_s=1e-9, stats=stats)
    assert stats["stopped"] == "budget" and stats["generations"] == 2  # the one brood every round breeds
    assert values[:, 0].min() <= p.evaluate(p.repair(init, np.random.default_rng(1)))[:, 0].min() + 1e-12
    free: dict[str, float | str] = {}
    _, v2 = search(p, init, np.random.default_rng(0), 100, 100, patience=10, stats=free)
    assert free["stopped"] == "patience" and v2[:, 0].min() <= values[:, 0].min()


def _prefix(models: object, n: int) -> Workload:
    wl = load_workload("pollux:workload-6", models)  # type: ignore[arg-type]
    return Workload(wl.name + f"-first{n}", wl.jobs[:n], wl.source, wl.digest)


def test_a_budget_that_never_binds_changes_no_decision(models: object) -> None:
    wl, nodes = _prefix(models, 10), parse_cluster("4x4:t4")
    runs = [simulate(wl, make_policy("pollux", generations=15, **kw), nodes, models,  # type: ignore[arg-type]
                     SimConfig(seed=3, max_time=4 * 3600.0)) for kw in ({}, {"budget_s": 1e6})]
    assert runs[0].jobs.to_csv() == runs[1].jobs.to_csv()


def test_quiet_rounds_keep_every_allocation_until_something_changes(models: object) -> None:
    wl, nodes = _prefix(models, 6), parse_cluster("4x4:t4")
    pol = make_policy("pollux", quiet_s=600.0)
    searched: list[float] = []
    inner = pol.schedule

    def spy(snap, ctx):  # type: ignore[no-untyped-def]
        before = pol._last
        d = inner(snap, ctx)
        if pol._last is not before:
            searched.append(snap.now)
        else:  # a quiet round: every job keeps its GPUs (its batch may follow its goodput)
            assert all(d.allocations[j].placement == v.allocation.placement
                       for j, v in snap.jobs.items() if v.allocation.placement)
            assert not any(j in d.allocations for j, v in snap.jobs.items() if not v.allocation.placement)
        return d

    pol.schedule = spy  # type: ignore[method-assign]
    r = simulate(wl, pol, nodes, models, SimConfig(seed=0, max_time=6 * 3600.0))  # type: ignore[arg-type]
    assert 0 < len(searched) < r.summary["rounds"]  # some rounds were quiet, the others searched
    with pytest.raises(ValueError, match="quiet_s"):
        make_policy("pollux", quiet_s=0)


def test_a_round_after_a_search_is_quiet_while_every_job_is_where_it_was_put(models: object) -> None:
    """The last search's own moves and in-place batch changes are not news; a job elsewhere is. (A job without a
    model: nothing to measure or fit, so only where it runs can make a round search.)"""
    nodes = parse_cluster("2x1:t4")
    spec = JobSpec("a", 0.0, "custom", 1, 128)
    pol = make_policy("pollux", pop_size=20, generations=5, quiet_s=600.0)
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    pending = JobView(spec, JobPhase.PENDING, Allocation(), updated_at=60.0)
    given = pol.schedule(ClusterSnapshot(60.0, nodes, {"a": pending}), ctx).allocations["a"]
    assert given.placement
    searched = pol._last  # type: ignore[attr-defined]

    def running(now: float, placement: tuple[tuple[str, int], ...]) -> ClusterSnapshot:
        alloc = Allocation(placement=placement, batch_size=256)  # its batch changed in place
        view = JobView(spec, JobPhase.RUNNING, alloc, updated_at=now, start_time=60.0, batch_size=256)
        return ClusterSnapshot(now, nodes, {"a": view})

    pol.schedule(running(120.0, given.placement), ctx)
    assert pol._last is searched  # type: ignore[attr-defined]
    other = next(n.node_id for n in nodes if n.node_id != given.placement[0][0])
    pol.schedule(running(180.0, ((other, 1),)), ctx)
    assert pol._last is not searched  # type: ignore[attr-defined]


def test_a_new_measurement_ends_the_quiet(models: object) -> None:
    nodes = parse_cluster("1x1:t4")
    app = models.app("cifar10")  # type: ignore[attr-defined]
    spec = JobSpec("a", 0.0, "cifar10", 1, 128)
    pol = make_policy("pollux", pop_size=20, generations=5, quiet_s=600.0)
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))  # type: ignore[arg-type]

    def running(now: float, batch: int) -> ClusterSnapshot:
        view = JobView(spec, JobPhase.RUNNING, Allocation(placement=(("t4-0", 1),), batch_size=batch),
                       updated_at=now, start_time=0.0, batch_size=batch, model=app)
        return ClusterSnapshot(now, nodes, {"a": view})

    pol.schedule(running(600.0, 128), ctx)  # measured at batch 128, then searched
    searched = pol._last  # type: ignore[attr-defined]
    pol.schedule(running(660.0, 128), ctx)
    assert pol._last is searched  # type: ignore[attr-defined]  # nothing new
    pol.schedule(running(720.0, 64), ctx)  # the same GPU at another batch: a new observation to fit
    assert pol._last is not searched  # type: ignore[attr-defined]
