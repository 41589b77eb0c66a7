"""The live body's copy of the engine's bookkeeping: one `engine.jobstate.JobState` per active job.

The simulator keeps the same object per job and calls the same methods at the same moments (`apply` when an
action takes effect, `advance` when a round needs fresh progress), so attained service, progress (restart
window, slowest GPU type of a mixed placement) and restarts follow one rule in both bodies; the drift test
(`tests/engine/test_drift.py`) holds them to it. Times are the service clock's, never `time.time()`.

Live facts the simulator does not have refine the state: a generation's real start (`started`: its restart
window runs from then), measured progress and throughput from the job's hints (`hinted`), and placements the
backend set on its own (a relaunch after a failure, workers adopted after a service restart: `sync`).
Held in memory: after a service restart a job's progress comes back with its next hint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from elastisched.backends.base import JobHints
from elastisched.core.events import Action
from elastisched.core.types import NO_ALLOCATION, Allocation, JobSpec, same_gpus
from elastisched.engine.jobstate import JobState, new_state
from elastisched.models.application import Application


def _restart_cost(st: JobState) -> float:
    return st.app.restart_cost if st.app is not None else 0.0


class LiveJobs:
    def __init__(self, model_of: Callable[[JobSpec], Application | None]) -> None:
        self.model_of = model_of  # the job's own performance model, None when its application has no profile
        self.states: dict[str, JobState] = {}
        self.started: dict[str, tuple[float, bool]] = {}  # job -> (clock time its generation started, adopted)

    def sync(self, spec: JobSpec, place: tuple[tuple[str, int], ...], batch: int | None, now: float,
             types: Mapping[str, str], restarts: int) -> JobState:
        """The job's state at `now`, created on first sight and brought in line with the store's placement
        when the backend changed it on its own (from the generation's recorded start, if known)."""
        jid = spec.job_id
        st = self.states.get(jid)
        if st is None:
            began, adopted = self.started.get(jid, (now, True))
            t0 = min(began, now) if place else now
            st = self.states[jid] = new_state(spec, self.model_of(spec), t0)
            st.launches = max(0, restarts)
        elif st.spec != spec:  # an admin resize pinned its size
            st.spec = spec
            st.view = None
        if not same_gpus(st.allocation.placement, place):
            began, adopted = self.started.get(jid, (now, True))
            t = min(max(began, st.updated), now) if place else now
            st.advance(t)
            alloc = Allocation(placement=place, batch_size=batch) if place else NO_ALLOCATION
            st.apply(alloc, t, {n: types.get(n, "") for n, _ in place}, 0.0 if adopted else _restart_cost(st))
        return st

    def applied(self, action: Action, now: float, types: Mapping[str, str]) -> None:
        """An action the daemon handed to the backend takes effect now (as in the simulator)."""
        st = self.states.get(action.job_id)
        if st is None:
            return
        st.advance(now)
        alloc = action.allocation
        st.apply(alloc, now, {n: types.get(n, "") for n in alloc.nodes}, _restart_cost(st))
        self.started.pop(action.job_id, None)

    def generation_started(self, job_id: str, t: float, adopted: bool) -> None:
        """A generation's workers are live: its restart window runs from `t` (none for adopted workers)."""
        self.started[job_id] = (t, adopted)
        st = self.states.get(job_id)
        if st is not None and st.allocation.placement and not adopted and t + _restart_cost(st) > st.restart_until:
            st.restart_until = t + _restart_cost(st)  # the workers came up later than the action
            st.view = None

    def hinted(self, h: JobHints, t: float, row: Mapping[str, Any]) -> None:
        """Measured progress from a job's hints replaces the models' estimate; the measured throughput goes to
        `JobView.observed_throughput`, the measured gradient statistics to `JobView.grad_stats`."""
        st = self.states.get(h.job_id)
        if st is None:
            return
        if h.throughput:
            st.observed[h.world_size] = float(h.throughput)
            st.view = None
        if h.grad_sqr is not None and h.grad_var is not None:  # the job's own gradient statistics (Pollux)
            st.grad_stats = (float(h.grad_sqr), float(h.grad_var))
            st.view = None
        if st.app is not None:
            st.advance(max(st.updated, t))
            st.measured(h.step, int(h.global_batch or row.get("batch_size") or st.app.init_batch_size), t)

    def stop(self, job_id: str, now: float) -> None:
        """The job stops holding GPUs now (a user hold): its service is folded in and frozen."""
        st = self.states.get(job_id)
        if st is not None:
            st.advance(now)
            st.apply(NO_ALLOCATION, now, {}, 0.0)

    def forget(self, job_id: str) -> None:
        self.states.pop(job_id, None)
        self.started.pop(job_id, None)
