"""Inference demand sources and the loanable-server timeline (lyra.md §1.1, §7 rows 1–2)."""

from __future__ import annotations

from pathlib import Path

import pytest

import elastisched.sim as sim
from elastisched.core.errors import ConfigError, WorkloadError
from elastisched.loaning.demand import DAY, DemandSeries, diurnal, from_csv, from_inference_tasks, low_stretches
from elastisched.loaning.timeline import LoanPlan, loan_plan
from elastisched.sim.simulator import SimConfig
from elastisched.workloads.schema import InferenceTask


def test_diurnal_is_seeded_and_has_long_low_stretches() -> None:
    a, b = diurnal(50, days=3, seed=4), diurnal(50, days=3, seed=4)
    assert a == b and a != diurnal(50, days=3, seed=5)
    assert max(a.busy) <= 50 and a.mean_utilisation() < 0.5
    long = [s for s in low_stretches(a, 0.4) if s[1] - s[0] >= 6 * 3600]
    assert len(long) >= 3  # at least one long (>= 6 h) stretch below 40 % per day


def test_diurnal_peaks_in_the_afternoon() -> None:
    d = diurnal(100, days=1, noise=0.0, seed=0)
    assert d.at(14 * 3600) > d.at(2 * 3600)
    assert d.at(14 * 3600) == 75 and d.at(2 * 3600) == 10


def test_csv_source(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("time,busy_servers\n100,3\n0,1\n200,3\n")
    d = from_csv(p, servers=4)
    assert d.times == (0.0, 100.0) and d.busy == (1, 3) and d.at(150) == 3


@pytest.mark.parametrize("body, col", [("x,1\n", "time"), ("5,-1\n", "busy_servers"), ("5,1.5\n", "busy_servers")])
def test_csv_bad_rows_name_line_and_column(tmp_path: Path, body: str, col: str) -> None:
    p = tmp_path / "d.csv"
    p.write_text("time,busy_servers\n0,1\n" + body)
    with pytest.raises(WorkloadError) as e:
        from_csv(p)
    assert e.value.line == 3 and e.value.column == col


def test_csv_more_busy_than_servers(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("time,busy_servers\n0,9\n")
    with pytest.raises(WorkloadError, match="exceeds"):
        from_csv(p, servers=4)


def test_inference_tasks_pack_into_servers() -> None:
    tasks = [InferenceTask("i1", 0.0, "infer-a", 1, 10.0, 5), InferenceTask("i2", 5.0, "infer-a", 4, 10.0, 5)]
    d = from_inference_tasks(tasks, servers=4, gpus_per_server=4)
    assert [d.at(t) for t in (0, 5, 10, 15, 20)] == [1, 2, 1, 0, 0]  # 1 GPU, 5 GPUs, 4 GPUs, none
    d2 = from_inference_tasks(tasks, servers=4, gpus_per_server=4, seconds_per_task=10.0)  # 50 s each
    assert d2.at(30) == 2


def test_loan_plan_lends_idle_servers_and_reclaims_ahead_of_demand() -> None:
    d = DemandSeries((0.0, 1000.0, 2000.0), (2, 7, 3), 10)
    p = loan_plan(d, headroom=1)
    assert p.steps == ((0.0, 7), (1000.0, 2), (2000.0, 6))
    assert p.reclaims() == [(1000.0, 5)]
    q = loan_plan(d, headroom=1, notice=300.0)
    assert q.steps == ((0.0, 7), (700.0, 2), (2000.0, 6))  # the reclaim is announced 300 s early
    assert q.at(699) == 7 and q.at(700) == 2
    assert p.loaned_server_seconds(3000.0) == 7 * 1000 + 2 * 1000 + 6 * 1000


def test_loan_plan_never_lends_busy_servers() -> None:
    d = diurnal(20, days=2, seed=1)
    p = loan_plan(d, headroom=2, notice=600.0)
    t = 0.0
    while t < 2 * DAY:
        assert p.at(t) + d.at(t) + 2 <= 20 or p.at(t) == 0
        t += 97.0


def test_hold_delays_lending_after_a_busy_spell() -> None:
    d = DemandSeries((0.0, 100.0, 110.0), (0, 4, 0), 4)
    assert loan_plan(d).steps == ((0.0, 4), (100.0, 0), (110.0, 4))
    assert loan_plan(d, hold=600.0).steps == ((0.0, 4), (100.0, 0), (710.0, 4))


def test_inference_tasks_overhead_and_one_gpu_per_task() -> None:
    # DeepBoot runs each inference task on one GPU whatever num_replicas says, and its pod stays on the GPU
    # for a start-up + keep-alive after the task: with overhead 36 s a 4 s task holds its GPU for 40 s.
    tasks = [InferenceTask("i0", 0.0, "infer-ncf-1", 3, 4.0, 10), InferenceTask("i1", 20.0, "infer-ncf-1", 1, 4.0, 1)]
    d = from_inference_tasks(tasks, servers=2, gpus_per_server=1, overhead=36.0, gpus_per_task=1)
    assert [d.at(t) for t in (1.0, 10.0, 25.0, 39.0, 41.0, 59.0, 61.0)] == [1, 1, 2, 2, 1, 1, 0]
    plain = from_inference_tasks(tasks, servers=2, gpus_per_server=1)
    assert [plain.at(t) for t in (1.0, 5.0, 21.0, 25.0)] == [2, 0, 1, 0]  # num_replicas 3 capped at 2 servers
    with pytest.raises(ConfigError):
        from_inference_tasks(tasks, servers=2, overhead=-1.0)


def test_the_loan_plan_is_the_one_timeline_the_simulator_takes() -> None:
    assert not hasattr(sim, "LoanTimeline") and not hasattr(sim.simulator, "LoanTimeline")  # one class, in loaning/
    d = DemandSeries((0.0, 100.0), (0, 4), servers=4)
    plan = loan_plan(d, gpus_per_server=2)
    assert SimConfig(loans=plan).loans is plan and plan.servers == 4 and plan.max_servers == 4
    hand = LoanPlan(((0.0, 1), (600.0, 0)), "t4", 2)  # a hand-written timeline: shape positional, no demand
    assert (hand.gpus_per_server, hand.servers, hand.at(300.0), hand.reclaims()) == (2, 0, 1, [(600.0, 1)])
