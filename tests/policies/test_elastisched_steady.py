"""The steady shortcut (`policies.elastisched.steady`) decides exactly what the full round decides: whole runs
with it and without it produce the same jobs, byte for byte, on real Philly jobs, and it is taken often enough
that the comparison means something."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import Allocation
from elastisched.loaning.timeline import LoanPlan
from elastisched.models import PerfModels
from elastisched.policies.base import make_policy
from elastisched.policies.elastisched import steady
from elastisched.policies.elastisched.policy import ElastischedPolicy
from elastisched.sim import SimConfig, simulate
from elastisched.workloads import load_workload
from elastisched.workloads.schema import Workload

MODELS = PerfModels.load()


def _run(wl: Workload, cluster: str, shortcut: bool, monkeypatch: pytest.MonkeyPatch,
         loans: LoanPlan | None = None) -> tuple[str, int, int]:
    """(jobs.csv text, rounds, steady rounds) of one run."""
    taken = 0
    real = steady.steady_allocations

    def counted(*args: Any, **kwargs: Any) -> dict[str, Allocation] | None:
        nonlocal taken
        out = real(*args, **kwargs)
        taken += out is not None
        return out

    monkeypatch.setattr("elastisched.policies.elastisched.policy.steady_allocations", counted)
    pol = make_policy("elastisched")
    assert isinstance(pol, ElastischedPolicy)
    pol.steady_path = shortcut
    config = SimConfig(seed=1, loans=loans) if loans else SimConfig(seed=1)
    result = simulate(wl, pol, parse_cluster(cluster), MODELS, config)
    monkeypatch.undo()
    return result.jobs.to_csv(index=False), result.summary["rounds"], taken


def test_a_philly_sample_runs_the_same_with_and_without_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    wl = load_workload("philly:sample=300,seed=3", MODELS)
    fast, rounds, taken = _run(wl, "16x4:t4", True, monkeypatch)
    full, _, never = _run(wl, "16x4:t4", False, monkeypatch)
    assert never == 0 and taken > rounds // 4  # the shortcut ran on many rounds here and on none there
    assert fast == full


def test_two_types_and_loans_run_the_same_with_and_without_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster of two types of which the jobs' models know one (so each job may use only its own type), and an
    inference side that lends servers and takes them back while jobs run on them (rounds with returned or
    closing servers are never steady); the Philly arrivals are packed 200x closer so the loans matter."""
    wl = load_workload("philly:sample=60,seed=4", MODELS)
    wl = Workload(wl.name, tuple(dataclasses.replace(j, submit_time=j.submit_time / 200) for j in wl.jobs),
                  wl.source, wl.digest)
    loans = LoanPlan(tuple((h * 3600.0, (0, 2, 4, 1)[h % 4]) for h in range(48)))
    fast, rounds, taken = _run(wl, "8x4:t4,1x8:a100", True, monkeypatch, loans)
    full, _, _ = _run(wl, "8x4:t4,1x8:a100", False, monkeypatch, loans)
    assert 0 < taken < rounds
    assert fast == full
