"""A simulation's settings (`SimConfig`): costs, scripted events, observers and what the run keeps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from elastisched.core.types import ClusterSnapshot, JobId
from elastisched.engine.jobstate import INF, RECONFIGURE_COST
from elastisched.engine.loop import RoundResult
from elastisched.loaning.timeline import LoanPlan
from elastisched.sim.length_estimate import LengthEstimate


@dataclass
class SimConfig:
    seed: int = 0
    restart_cost: float | None = None  # None = each application's own (30 s default)
    # an in-place resize (a running job keeps some of its GPUs) costs this instead; None = the restart cost
    resize_cost: float | None = None
    # a change of batch / local batch / accumulation on the very same GPUs costs this and is no restart
    # (JABAS, AdaptDL, the training library: in place; engine.jobstate.change_kind); None = as any other change
    reconfigure_cost: float | None = RECONFIGURE_COST
    check_invariants: bool = True
    max_time: float = INF
    loans: LoanPlan | None = None  # loanable inference servers over time (`loaning.timeline`)
    progress: Callable[[float, int, int], None] | None = None  # (sim time, finished, total)
    options: dict[str, Any] = field(default_factory=dict)
    failures: tuple[tuple[float, JobId], ...] = ()  # (time, job): the job fails (ends, not finished)
    admin_resizes: tuple[tuple[float, JobId, int], ...] = ()  # (time, job, GPUs): an admin resize (API)
    on_round: Callable[[ClusterSnapshot, RoundResult], None] | None = None  # observer (drift test, debugging)
    # what each job declares about its length, as the policies see it (`JobView.declared_work`); the truth ends it
    length_estimate: LengthEstimate = field(default_factory=LengthEstimate)
    # keep every finished job's `JobState` in `Simulator.done` (tests, debugging); by default a job leaves only
    # its row of jobs.csv behind, so memory does not grow with the jobs a long replay has finished
    keep_finished: bool = False
