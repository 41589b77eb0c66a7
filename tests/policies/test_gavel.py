"""The `gavel` policy: its LPs against hand computations, the round mechanism (time sharing by priority),
and rigid allocations on mixed GPU types."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView, PendingReason
from elastisched.models.registry import PerfModels
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.policies.gavel import GavelPolicy, solve_allocation


def test_las_by_hand() -> None:
    # three jobs, one GPU of type a and one of b; job 0 runs 2× faster on b. Proportional shares: job 0 → 1.5,
    # jobs 1, 2 → 1. At the max-min optimum all three get z: jobs 1 and 2 fill a and take 2z − 1 of b, job 0
    # gets the rest of b: (4/3)(2 − 2z) = z → z = 8/11.
    tput = np.array([[1.0, 2.0], [1.0, 1.0], [1.0, 1.0]])
    x = solve_allocation(tput, np.ones(3), np.array([1.0, 1.0]), "las")
    norm = (x * tput).sum(axis=1) / np.array([1.5, 1.0, 1.0])
    assert norm.min() == pytest.approx(8 / 11, abs=1e-4)
    assert (x.sum(axis=1) <= 1 + 1e-9).all() and (x.sum(axis=0) <= 1 + 1e-9).all()
    assert x[0, 0] == pytest.approx(0.0, abs=1e-4)  # job 0 only uses the type it is fast on


def test_max_sum_throughput_by_hand() -> None:
    tput = np.array([[3.0, 1.0], [2.0, 2.0]])
    x = solve_allocation(tput, np.ones(2), np.array([1.0, 1.0]), "max_sum_throughput")
    assert float((x * tput).sum()) == pytest.approx(5.0, abs=1e-4)  # job 0 on a, job 1 on b
    assert x[0, 0] == pytest.approx(1.0, abs=1e-4) and x[1, 1] == pytest.approx(1.0, abs=1e-4)


def test_scale_factor_counts_gpus_and_ties_spread() -> None:
    # two identical 2-GPU jobs on 2 GPUs: each gets half the time (spread tie-break), never more than fits
    x = solve_allocation(np.array([[1.0], [1.0]]), np.array([2.0, 2.0]), np.array([2.0]), "max_sum_throughput")
    assert x[:, 0] == pytest.approx([0.5, 0.5], abs=1e-4)
    # a type the job cannot use (throughput 0) gets no time
    x = solve_allocation(np.array([[0.0, 1.0]]), np.ones(1), np.array([4.0, 4.0]), "las")
    assert x[0, 0] == 0.0 and x[0, 1] == pytest.approx(1.0, abs=1e-4)


def _view(jid: str, node: str | None, phase: JobPhase = JobPhase.PENDING) -> JobView:
    spec = JobSpec(jid, 0.0, "cifar10", 1, 128)
    alloc = Allocation(((node, 1),)) if node else Allocation()
    return JobView(spec, JobPhase.RUNNING if node else phase, alloc)


def test_rounds_time_share_one_gpu(models: PerfModels) -> None:
    """Two identical jobs, one GPU: priority = share / time received, so they alternate every round."""
    pol = GavelPolicy(interval=360.0)
    nodes = (NodeView("t4-0", "t4", 1),)
    ctx = PolicyContext(perf=models)
    holder: str | None = None
    ran = []
    for k in range(4):
        jobs = {j: _view(j, "t4-0" if j == holder else None) for j in ("j0", "j1")}
        d = pol.schedule(ClusterSnapshot(360.0 * (k + 1), nodes, jobs), ctx)
        assert len(d.allocations) == 1
        holder = next(iter(d.allocations))
        other = "j1" if holder == "j0" else "j0"
        assert d.reasons[other] == PendingReason.RESOURCES
        ran.append(holder)
    assert ran == ["j0", "j1", "j0", "j1"]


def test_rigid_sizes_and_state_round_trip(models: PerfModels) -> None:
    nodes = (NodeView("t4-0", "t4", 4), NodeView("t4-1", "t4", 4))
    jobs = {f"j{i}": JobView(JobSpec(f"j{i}", 0.0, "cifar10", g, 128 * g), JobPhase.PENDING, Allocation())
            for i, g in enumerate((4, 2, 2, 1))}
    pol = make_policy("gavel")
    snap = ClusterSnapshot(360.0, nodes, jobs)
    d = pol.schedule(snap, PolicyContext(perf=models))
    assert all(a.num_gpus == jobs[j].spec.num_gpus for j, a in d.allocations.items())
    assert sum(a.num_gpus for a in d.allocations.values()) <= 8
    state = pol.state_dict()
    again = make_policy("gavel")
    again.load_state_dict(state)
    assert again.state_dict() == state
    assert dict(again.schedule(snap, PolicyContext(perf=models)).allocations) == dict(
        pol.schedule(snap, PolicyContext(perf=models)).allocations)


def test_mixed_types_prefer_the_faster_type(models: PerfModels) -> None:
    root = Path(__file__).resolve().parents[2] / ".." / "shared" / "peer-data" / "sia" / "traces"
    if not root.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"Sia artifact data missing at {root} (required under CI=true)")
        pytest.skip("Sia artifact data not found")
    from elastisched.experiments.sia import sia_models

    sm = sia_models(root)
    nodes = (NodeView("t4-0", "t4", 4), NodeView("a100-0", "a100", 8))
    jobs = {"big": JobView(JobSpec("big", 0.0, "imagenet", 8, 1600), JobPhase.PENDING, Allocation())}
    d = GavelPolicy(objective="max_sum_throughput").schedule(ClusterSnapshot(360.0, nodes, jobs),
                                                             PolicyContext(perf=sm))
    assert d.allocations["big"].gpu_type == "a100"  # 8 GPUs only fit the A100 node (T4 has 4)
    jobs = {"s": JobView(JobSpec("s", 0.0, "bert", 1, 12), JobPhase.PENDING, Allocation())}
    d = GavelPolicy(objective="max_sum_throughput").schedule(ClusterSnapshot(360.0, nodes, jobs),
                                                             PolicyContext(perf=sm))
    app = sm.app("bert")
    cfg = app.batch_config(1, 12)
    faster = min(("t4", "a100"), key=lambda t: app.iteration_time(t, (1,), cfg))
    assert d.allocations["s"].gpu_type == faster


def test_ties_take_the_centre_of_the_optimal_face_like_an_interior_point_solver() -> None:
    # three identical jobs, two GPUs: every split with x1 + x2 + x3 = 2 is optimal. The analytic centre gives
    # each 2/3 (what ECOS returns in the artifact); the bare simplex vertex gives two jobs everything.
    tput, scale, cap = np.ones((3, 1)), np.ones(3), np.array([2.0])
    x = solve_allocation(tput, scale, cap, "max_sum_throughput")
    assert x[:, 0] == pytest.approx([2 / 3] * 3, abs=1e-4)
    v = solve_allocation(tput, scale, cap, "max_sum_throughput", center=False)
    assert sorted(np.round(v[:, 0], 6)) == [0.0, 1.0, 1.0]
    # the centre is still optimal
    assert float(x.sum()) == pytest.approx(2.0, abs=1e-4)
