"""What reclaims cost a run (`_loaning_common.reclaim_losses`) on a hand-built case whose answer is known, through
the real simulator: one job evicted, one shrunk, and the GPU-hours of the restart windows that forces."""

from __future__ import annotations

import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobSpec
from elastisched.experiments._loaning_common import LOSS_DEFINITION, reclaim_losses
from elastisched.loaning.timeline import LoanPlan
from elastisched.models import PerfModels
from elastisched.policies.base import Policy, PolicyContext
from elastisched.sim import SimConfig, simulate
from elastisched.workloads.schema import Workload


class _ShrinkOneEvictOther(Policy):
    """Before the reclaim: e on 2 training + 2 loaned GPUs, v on the loaned server's other 2. At the reclaim
    round: e keeps its 2 training GPUs (shrunk), v is left out (evicted). Afterwards v waits for e's GPUs."""

    name = "shrink-one-evict-other"
    interval = None
    elastic = True

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        loaned = any(n.node_id == "loan-0" for n in snap.nodes) and not snap.reclaim_demand
        al: dict[str, Allocation] = {}
        if "e" in snap.jobs:
            al["e"] = Allocation((("t4-0", 2), ("loan-0", 2))) if loaned else Allocation((("t4-0", 2),))
        if "v" in snap.jobs:
            if loaned:
                al["v"] = Allocation((("loan-0", 2),))
            elif "e" not in snap.jobs:
                al["v"] = Allocation((("t4-0", 2),))
        return Decision(al)


def _run(models: PerfModels) -> tuple[object, Workload]:
    e = JobSpec("e", 0.0, "cifar10", 2, 512, min_gpus=2, max_gpus=4, elastic=True, work_scale=0.5)
    v = JobSpec("v", 0.0, "ncf", 2, 512, min_gpus=2, max_gpus=2, work_scale=0.5)
    wl = Workload("hand", (e, v), "test", "0")
    plan = LoanPlan(((0.0, 1), (120.0, 0)), "t4", 4)
    return simulate(wl, _ShrinkOneEvictOther(), parse_cluster("1x2:t4"), models, SimConfig(loans=plan)), wl


def test_eviction_and_shrink_are_counted_with_their_restart_windows(models: PerfModels) -> None:
    res, wl = _run(models)
    assert res.summary["n_finished"] == 2  # type: ignore[attr-defined]
    assert res.reclaims[0]["gpus"] == {"v": (2, 0), "e": (4, 2)}  # type: ignore[attr-defined]
    loss = reclaim_losses(res, wl, models)  # type: ignore[arg-type]
    assert loss["reclaim_evictions"] == 1 and loss["reclaim_shrinks"] == 1 and loss["reclaim_moves"] == 0
    # v stalls 30 s on the 2 GPUs it held when relaunched, e 30 s on the 2 it keeps
    assert loss["reclaim_gpu_hours_lost"] == pytest.approx((30 * 2 + 30 * 2) / 3600)
    # the simulator charged exactly those stalls: e its launch on 4 GPUs plus the shrink's window on 2,
    # v its launch and its relaunch, each on 2 GPUs
    jobs = res.jobs.set_index("job")  # type: ignore[attr-defined]
    assert jobs.loc["e", "restart_gpu_seconds"] == pytest.approx(30 * 4 + 30 * 2)
    assert jobs.loc["v", "restart_gpu_seconds"] == pytest.approx(30 * 2 + 30 * 2)
    fixed = reclaim_losses(res, wl, models, restart_cost=10.0)  # type: ignore[arg-type]
    assert fixed["reclaim_gpu_hours_lost"] == pytest.approx((10 * 2 + 10 * 2) / 3600)
    assert "checkpoint" in LOSS_DEFINITION and "once per event" in LOSS_DEFINITION


def test_a_run_without_reclaims_loses_nothing(models: PerfModels) -> None:
    e = JobSpec("e", 0.0, "cifar10", 2, 512, min_gpus=2, max_gpus=2, work_scale=0.01)
    wl = Workload("hand", (e,), "test", "0")
    res = simulate(wl, _ShrinkOneEvictOther(), parse_cluster("1x2:t4"), models, SimConfig())
    assert reclaim_losses(res, wl, models) == {"reclaim_evictions": 0, "reclaim_shrinks": 0, "reclaim_moves": 0,
                                                "reclaim_gpu_hours_lost": 0.0}
