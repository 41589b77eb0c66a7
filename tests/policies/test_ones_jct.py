"""Hand-checked cases for the tuned preset's completion-time fitness (src/elastisched/policies/ones/jct.py, D5)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView
from elastisched.policies.base import PolicyContext
from elastisched.policies.ones import deploy as dep
from elastisched.policies.ones import jct
from elastisched.policies.ones.policy import OnesPolicy


def test_time_table_uses_predictions_and_the_attained_service_prior() -> None:
    # job 0: 600 samples left, 10 samples/s on 1 GPU, 15 on 2; job 1: no throughput reading, prior 120 GPU-s;
    # job 2: no prediction (rem NaN), prior 40 GPU-s
    xtab = np.array([[1e-6, 1e-6, 1e-6], [10.0, 1e-6, 1e-6], [15.0, 1e-6, 1e-6]])
    rem = np.array([600.0, 50.0, np.nan])
    t = jct.time_table(rem, xtab, np.array([True, False, False]), np.array([5.0, 120.0, 40.0]))
    assert t.ravel().tolist() == pytest.approx([60.0, 120.0, 40.0, 60.0, 120.0, 40.0, 40.0, 60.0, 20.0])


def test_fitness_counts_queued_jobs_behind_the_gpu_time_served() -> None:
    # capacity 4; L needs 1,000 s on 4 GPUs, M 100 s on 4 GPUs (times on n GPUs = GPU-s / n)
    ttab = np.array([[4000.0, 400.0], [4000.0, 400.0], [2000.0, 200.0], [4000 / 3, 400 / 3], [1000.0, 100.0]])
    size = np.array([4, 4])
    rows = np.array([[4, 0], [0, 4], [2, 2]])
    # L runs, M waits behind L's 4,000 GPU-s: 1,000 + (4,000 / 4 + 100) = 2,100
    # M runs, L waits behind M's 400 GPU-s: 100 + (400 / 4 + 1,000) = 1,200
    # both on 2 GPUs: 2,000 + 200
    assert jct.fitness(rows, ttab, size, 4).tolist() == pytest.approx([2100.0, 1200.0, 2200.0])


def test_fitness_serves_queued_jobs_shortest_gpu_time_first() -> None:
    # capacity 2; job 0 runs (100 s on 2 GPUs); jobs 1 (300 GPU-s) and 2 (100 GPU-s) wait, each on 1 GPU
    ttab = np.array([[200.0, 300.0, 100.0], [200.0, 300.0, 100.0], [100.0, 150.0, 50.0]])
    out = jct.fitness(np.array([[2, 0, 0]]), ttab, np.array([2, 1, 1]), 2)
    # job 2 first: (200 + 0) / 2 + 100 = 200; then job 1: (200 + 100) / 2 + 300 = 450; plus 100 served
    assert out.tolist() == pytest.approx([750.0])


def test_preempting_pays_only_beyond_the_restart_charge() -> None:
    # swap gain g (T_L − T_M) / C = 4 · (1,000 − 100) / 4 = 900 s: worth a 30 s restart, not a 1,000 s one
    ttab = np.array([[4000.0, 400.0], [4000.0, 400.0], [2000.0, 200.0], [4000 / 3, 400 / 3], [1000.0, 100.0]])
    rows, size = np.array([[4, 0], [0, 4]]), np.array([4, 4])
    running = np.array([True, False])
    for cost, preempt in ((30.0, True), (1000.0, False)):
        score = jct.fitness(rows, ttab, size, 4) + dep.move_cost(rows, np.array([4, 0]), running, cost, 8.0, "time")
        assert bool(score[1] < score[0]) is preempt


def _view(jid: str, gpus: int, epochs: float, epoch_size: float, attrs: dict[str, Any] | None = None) -> JobView:
    spec = JobSpec(jid, 0.0, "cifar10", 4, 1024, attrs={"epoch_work": 10.0, "epoch_size": epoch_size,
                                                         "local_batch": 256, **(attrs or {})})
    alloc = Allocation((("n0", gpus),)) if gpus else Allocation()
    return JobView(spec, JobPhase.RUNNING if gpus else JobPhase.PENDING, alloc, progress=epochs * 10.0,
                   total_work=1e9, run_time=500.0 if gpus else 0.0, start_time=0.0 if gpus else None,
                   attained_service=2000.0 if gpus else 0.0, observed_throughput={4: 100.0} if gpus else {})


@pytest.mark.parametrize(("fitness", "log", "preempts"), [("mixed", False, True), ("time", False, False),
                                                          ("mixed", True, False)])
def test_tuned_preempts_a_long_job_for_a_queued_one_only_without_a_progress_log(fitness: str, log: bool,
                                                                                 preempts: bool) -> None:
    # one 4-GPU node; "long" has run 5 epochs of 1M samples (ρ = 0.5 without a predictor: 5M samples left,
    # 50,000 s at 100 samples/s); "new" waits for the same 4 GPUs (prior 600 s). Without a progress log, the
    # completion-time fitness swaps them (gain 4 · (50,000 − 600) / 4 s ≫ 30 s restart); D4 ("time") never
    # does, and neither does "mixed" for a job that has a loss/accuracy log (it keeps D4 for it)
    extra = {"acc_curve": [0.1] * 10, "loss_curve": [2.0] * 10, "initial_loss": 2.5} if log else None
    snap = ClusterSnapshot(1000.0, (NodeView("n0", "t4", 4),),
                           {"long": _view("long", 4, 5.0, 1e6, extra), "new": _view("new", 0, 0.0, 1e6, extra)})
    pol = OnesPolicy("tuned", bootstrap=False, fitness=fitness, prior_s=600.0)
    started = False
    for _ in range(5):
        dec = pol.schedule(snap, PolicyContext(seed=0))
        started = started or "new" in dec.allocations
    assert started is preempts
    if preempts:
        assert "long" not in dec.allocations


def test_unique_rows_matches_numpy_unique_up_to_order() -> None:
    a = np.random.default_rng(3).integers(0, 3, (40, 5))
    uniq, inv = jct.unique_rows(a)
    ref = np.unique(a, axis=0)
    assert (uniq[inv] == a).all() and len(uniq) == len(ref)
    assert sorted(map(tuple, uniq.tolist())) == sorted(map(tuple, ref.tolist()))


def test_admit_whole_starts_whole_jobs_and_backfills() -> None:
    # capacity 8, 5 GPUs used: the 4-GPU head job does not fit, the 2-GPU job behind it does
    counts = np.array([[5, 0, 0], [0, 0, 0]])
    out = jct.admit_whole(counts, 8, np.array([1, 2]), np.array([0, 4, 2]))
    assert out.tolist() == [[5, 0, 2], [0, 4, 2]]


def test_pack_moves_a_straddling_start_onto_one_node() -> None:
    from elastisched.policies.ones.layout import pack

    node_of = np.repeat(np.arange(3), 4)
    e = -1
    # job 0 runs on node 0 (slots 0-1) and must not move; job 1 starts on slots 2-5 (nodes 0 and 1) while node 2
    # is free: it moves to node 2; job 2 (2 GPUs, node 1) already sits on one node
    best = np.array([0, 0, 1, 1, 1, 1, 2, 2, e, e, e, e])
    out = pack(best, node_of, np.array([True, False, False]))
    assert out.tolist() == [0, 0, e, e, e, e, 2, 2, 1, 1, 1, 1]
    # nowhere better: unchanged
    full = np.array([0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3])
    assert pack(full, node_of, np.zeros(4, dtype=bool)).tolist() == full.tolist()


def test_mixed_decides_as_time_when_every_job_has_a_progress_log() -> None:
    log = {"acc_curve": [0.1] * 10, "loss_curve": [2.0] * 10, "initial_loss": 2.5}
    jobs = {"long": _view("long", 4, 5.0, 1e6, log), "mid": _view("mid", 4, 3.0, 1e4, log),
            "new": _view("new", 0, 0.0, 1e6, log), "new2": _view("new2", 0, 0.0, 1e5, log)}
    jobs["mid"] = JobView(jobs["mid"].spec, JobPhase.RUNNING, Allocation((("n1", 4),)), progress=30.0,
                          total_work=1e9, run_time=300.0, start_time=0.0, observed_throughput={4: 80.0})
    snap = ClusterSnapshot(1000.0, (NodeView("n0", "t4", 4), NodeView("n1", "t4", 4)), jobs)
    pols = {f: OnesPolicy("tuned", bootstrap=False, fitness=f, quiet_s=0.0) for f in ("time", "mixed", "jct")}
    decs: dict[str, list[Any]] = {f: [] for f in pols}
    for _ in range(4):
        for f, pol in pols.items():
            decs[f].append(dict(pol.schedule(snap, PolicyContext(seed=1)).allocations))
    assert decs["mixed"] == decs["time"]
    assert decs["jct"] != decs["time"]  # the scenario tells the fitnesses apart


def test_explore_is_optimistic_above_the_largest_observed_size_for_jobs_without_a_log() -> None:
    # job 0: 4 GPUs → 560 samples/s (140 per GPU), 8 → 464; job 1 the same but with a progress log
    pts_n = np.array([[4.0, 8.0], [4.0, 8.0]])
    pts_x = np.array([[560.0, 464.0], [560.0, 464.0]])
    xtab = np.full((17, 2), 300.0)
    out, limit = jct.explore(xtab, np.array([4, 4]), pts_n, pts_x, np.array([True, False]))
    assert out[16, 0] == 16 * 140.0 and out[8, 0] == 300.0 and (out[:, 1] == 300.0).all()
    assert limit is not None and limit[0] > 64 and limit[1] == 4
    assert (xtab == 300.0).all()  # the cached table is not modified
