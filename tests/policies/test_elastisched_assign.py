"""The elastisched assignment (type and count per job) against the exact MILP on random instances."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp

from elastisched.policies.elastisched.assign import NEG, Assignment, Problem, greedy, solve


def _instance(rng: np.random.Generator, jobs: int, types: int, cap: int, forced: float = 0.2) -> Problem:
    """Concave-ish completion-rate values: job j on type t with k GPUs is worth s_t·k^p / W_j (p ~ U(0.3, 0.9)),
    a random job may not use some type, and some jobs must run (column 0 = −inf)."""
    values = []
    work = rng.lognormal(8, 1.5, jobs)
    p = rng.uniform(0.3, 0.9, jobs)
    must = rng.random(jobs) < forced
    for _ in range(types):
        speed = rng.uniform(0.5, 3.0)
        k = np.arange(cap + 1)
        v = speed * (k[None, :] ** p[:, None]) / work[:, None] * 3600
        v[:, 0] = np.where(must, NEG, 0.0)
        barred = rng.random(jobs) < 0.15
        v[barred, 1:] = NEG
        values.append(v)
    for j in np.flatnonzero(must):  # a job that must run can use at least one type
        if all(not np.isfinite(v[j, 1:]).any() for v in values):
            values[0][j, 1:] = 3600 * np.arange(1, cap + 1) ** p[j] / work[j]
    capacity = tuple(int(c) for c in rng.integers(cap // 2, cap * 2, types))
    return Problem(tuple(f"t{t}" for t in range(types)), tuple(values), capacity)


def _exact(p: Problem) -> float:
    """max Σ V over one (type, count) or nothing per job, capacity per type (HiGHS)."""
    cols: list[tuple[int, int, int]] = []
    obj: list[float] = []
    for t, v in enumerate(p.values):
        for j in range(v.shape[0]):
            for k in range(1, v.shape[1]):
                if np.isfinite(v[j, k]):
                    cols.append((j, t, k))
                    obj.append(float(v[j, k]))
    n = len(cols)
    a_job = np.zeros((p.jobs, n))
    a_cap = np.zeros((len(p.types), n))
    for i, (j, t, k) in enumerate(cols):
        a_job[j, i] = 1
        a_cap[t, i] = k
    must = np.array([not np.isfinite(p.values[0][j, 0]) for j in range(p.jobs)])
    cons = [LinearConstraint(a_job, np.where(must, 1, 0), 1), LinearConstraint(a_cap, 0, np.array(p.capacity))]
    r = milp(-np.array(obj), constraints=cons, integrality=np.ones(n), bounds=Bounds(0, 1))
    assert r.status == 0, r.message
    return float(-r.fun)


def _check(p: Problem, a: Assignment) -> None:
    for t in range(len(p.types)):
        assert int(a.gpus[a.gpu_type == t].sum()) <= p.capacity[t]
    for j in range(p.jobs):
        t, k = int(a.gpu_type[j]), int(a.gpus[j])
        if t < 0:
            assert k == 0 and np.isfinite(p.values[0][j, 0]), "a job that must run got nothing"
        else:
            assert np.isfinite(p.values[t][j, k])


@pytest.mark.parametrize("types", [1, 3])
def test_close_to_the_exact_optimum(types: int) -> None:
    rng = np.random.default_rng(types)
    ratios = []
    for _ in range(30):
        p = _instance(rng, jobs=int(rng.integers(4, 25)), types=types, cap=16)
        a = solve(p)
        _check(p, a)
        best = _exact(p)
        ratios.append(a.value(p) / best if best > 0 else 1.0)
    assert min(ratios) > 0.9 and float(np.mean(ratios)) > 0.98, ratios


def test_a_large_round_thins_counts_and_keeps_what_jobs_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    from elastisched.policies.elastisched import assign

    monkeypatch.setattr(assign, "LP_COLUMNS", 100)
    rng = np.random.default_rng(11)
    p = _instance(rng, jobs=60, types=3, cap=40)
    held = (np.zeros(60, dtype=np.int64), np.full(60, 37))  # an off-grid count on type 0
    coarse = assign._coarse(Problem(p.types, p.values, p.capacity, held))
    kept = np.isfinite(coarse.values[0]) & np.isfinite(p.values[0])
    assert kept[:, 37].sum() == np.isfinite(p.values[0][:, 37]).sum()  # every job's current count stays
    assert kept.sum() < 0.5 * np.isfinite(p.values[0]).sum()
    a = solve(p)
    _check(p, a)
    assert a.value(p) > 0.98 * _exact(p)


def test_the_hull_greedy_is_exact_on_concave_curves() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        p = _instance(rng, jobs=int(rng.integers(3, 12)), types=1, cap=12, forced=0.0)
        k = greedy(p.values[0], p.capacity[0], np.zeros(p.jobs, dtype=np.int64))
        a = Assignment(np.where(k > 0, 0, -1), k)
        assert a.value(p) == pytest.approx(_exact(p), rel=1e-9)


def test_a_job_that_must_run_runs_even_when_worth_little() -> None:
    v = np.array([[NEG, 0.01, 0.011], [0.0, 5.0, 9.0]])
    a = solve(Problem(("a",), (v,), (2,)))
    assert a.gpus.tolist() == [1, 1]
