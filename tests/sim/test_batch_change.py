"""Issue 13 item 2: a batch-size change on the same GPUs is applied in place (no restart, no stall); a change
of GPUs costs the restart. One rule (`engine.jobstate.change_kind`) for the simulator and the live service."""

from __future__ import annotations

from elastisched.core.cluster import parse_cluster
from elastisched.core.events import Action, ActionKind
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobSpec
from elastisched.engine.jobstate import change_kind
from elastisched.models import PerfModels
from elastisched.policies.base import Policy, PolicyContext
from elastisched.service.launches import in_place
from elastisched.sim import SimConfig
from elastisched.sim.simulator import Simulator
from elastisched.workloads.schema import Workload

A = (("t4-0", 2),)
B = (("t4-1", 2),)


class _Plan(Policy):
    """Job "a" on a fixed (placement, batch) per time window: `plan` = ((from_time, placement, batch), ...)."""

    name = "plan-batch"
    interval = 10.0
    elastic = True

    def __init__(self, plan: tuple[tuple[float, tuple[tuple[str, int], ...], int], ...]) -> None:
        self.plan = plan

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        if "a" not in snap.jobs:
            return Decision({})
        _, place, batch = [p for p in self.plan if p[0] <= snap.now][-1]
        return Decision({"a": Allocation(place, batch_size=batch)})


def _run(models: PerfModels, plan: tuple[tuple[float, tuple[tuple[str, int], ...], int], ...],
         **cfg: float | None) -> Simulator:
    spec = JobSpec("a", 0.0, "cifar10", 2, 512, work_scale=0.05)
    sim = Simulator(Workload("hand", (spec,), "test", "0"), _Plan(plan), parse_cluster("2x4:t4"), models,
                    SimConfig(**cfg))  # type: ignore[arg-type]
    sim.run()
    return sim


def test_change_kind() -> None:
    none = Allocation(())
    assert change_kind(none, Allocation(A)) == "launch"
    assert change_kind(Allocation(A, batch_size=512), Allocation(A, batch_size=1024)) == "reconfigure"
    assert change_kind(Allocation(A), Allocation((("t4-0", 4),))) == "resize"
    assert change_kind(Allocation(A), Allocation(B)) == "restart"
    assert change_kind(Allocation(A), none) == "stop"


def test_batch_change_on_same_gpus_is_no_restart(models: PerfModels) -> None:
    sim = _run(models, ((0.0, A, 512), (40.0, A, 1024), (80.0, A, 512)))
    job = sim.done[0]
    assert max(job.launches - 1, 0) == 0  # two batch changes, no restart
    assert job.run_time > 80.0  # it was still running through both changes
    # the old rule (a batch change charged as a restart) counts both and ends later
    old = _run(models, ((0.0, A, 512), (40.0, A, 1024), (80.0, A, 512)), reconfigure_cost=None).done[0]
    assert max(old.launches - 1, 0) == 2
    assert old.end_time > job.end_time + 40.0  # two 30 s restarts lost


def test_gpu_change_costs_the_restart(models: PerfModels) -> None:
    base = _run(models, ((0.0, A, 512),)).done[0]
    moved = _run(models, ((0.0, A, 512), (40.0, B, 512))).done[0]
    assert max(moved.launches - 1, 0) == 1
    restart = models.app("cifar10").restart_cost
    assert abs((moved.end_time - base.end_time) - restart) < 10.0 + 1e-6  # the restart, up to the 10 s tick


def test_live_service_keeps_a_batch_change_in_place() -> None:
    old, new = Allocation(A, batch_size=512), Allocation(A, batch_size=1024)
    assert in_place(Action(ActionKind.RESIZE, "a", new, old))
    assert not in_place(Action(ActionKind.RESIZE, "a", Allocation(B, batch_size=512), old))
    assert not in_place(Action(ActionKind.LAUNCH, "a", new, Allocation(())))


def test_mean_batch_is_time_weighted_and_reported_against_the_request(models: PerfModels) -> None:
    """Issue 21's guard rail: jobs.csv's `mean_batch` is the global batch weighted by the seconds it was held
    (restart windows included), the summary's `mean_batch_vs_request` its ratio to the batch asked for."""
    from elastisched.sim.metrics import collect

    sim = _run(models, ((0.0, A, 512), (40.0, A, 1024)))
    job = sim.done[0]
    expected = (40.0 * 512 + (job.run_time - 40.0) * 1024) / job.run_time
    assert abs(job.batch_seconds / job.run_time - expected) < 1e-6 * expected
    res = collect(sim, 0.0)
    row = res.jobs.iloc[0]
    assert abs(row["mean_batch"] - expected) < 1e-6 * expected and row["requested_batch"] == 512
    assert abs(res.summary["mean_batch_vs_request"] - expected / 512) < 1e-6
    steady = _run(models, ((0.0, A, 512),)).done[0]
    assert steady.batch_seconds == 512 * steady.run_time
