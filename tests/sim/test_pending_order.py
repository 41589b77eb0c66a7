"""The simulator's `ClusterSnapshot.pending` (kept incrementally, re-sorted on demand) is exactly the jobs
without GPUs in submission order, every round, also after a reclaim stops jobs and sends them back to the
queue (FIFO) and under a preemptive policy (Tiresias), and FIFO decides the same with it as without it."""

from __future__ import annotations

import dataclasses

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import ClusterSnapshot, JobSpec
from elastisched.engine.loop import RoundResult
from elastisched.loaning.timeline import LoanPlan
from elastisched.models import PerfModels
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.sim import SimConfig, simulate
from elastisched.workloads.schema import Workload


def _check(name: str, models: PerfModels, loans: LoanPlan | None, jobs: list[JobSpec], cluster: str) -> int:
    checked = [0]
    stopped = [0]
    twin = make_policy(name)  # decides from the derived pending jobs (no `pending` in the snapshot)

    def obs(snap: ClusterSnapshot, res: RoundResult) -> None:
        running = snap.running_jobs()
        assert list(snap.pending_jobs()) == [j for j in snap.jobs if j not in running]
        stopped[0] += sum(1 for a in res.actions if a.kind.name == "SUSPEND")
        if name == "fifo":
            bare = dataclasses.replace(snap, pending=None)
            d = twin.schedule(bare, PolicyContext(perf=models))
            assert dict(d.allocations) == dict(res.decision.allocations) and d.reasons == res.decision.reasons
        checked[0] += 1

    wl = Workload("hand", tuple(jobs), "test", "0")
    r = simulate(wl, make_policy(name), parse_cluster(cluster), models, SimConfig(loans=loans, on_round=obs))
    assert r.summary["n_finished"] == len(jobs) and checked[0] > 3
    return stopped[0] + int(r.summary["reclaim_preemptions"])


def test_fifo_after_reclaim(models: PerfModels) -> None:
    # j1, j2, j4, j5 run on loaned servers and are stopped at 600 s while j6 and j7, younger, wait
    jobs = [JobSpec(f"j{i}", 10.0 * i, "ncf", 1, 256, work_scale=2.0) for i in range(8)]
    loans = LoanPlan(((0.0, 2), (600.0, 0), (1200.0, 2)), "t4", 2)
    assert _check("fifo", models, loans, jobs, "1x2:t4") >= 4


def test_tiresias_preempts(models: PerfModels) -> None:
    jobs = [JobSpec(f"j{i}", 30.0 * i, "ncf", 1 + i % 2, 256, work_scale=0.3) for i in range(10)]
    _check("tiresias", models, None, jobs, "1x2:t4")
