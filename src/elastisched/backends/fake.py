"""Fake backend: nodes that exist only in the service, jobs that "run" by the performance model's clock.

The role KWOK plays for Kubernetes: the whole live service (API, store, daemon, engine, policy) runs for real
against a cluster of any size without a GPU or a worker process. A generation "starts" the moment an action
launches it (`JobStarted` with no PIDs), and finishes when the job's performance model says its work is done:
the fake keeps one `engine.jobstate.JobState` per job and calls the very methods the simulator calls (`apply`
when an action takes effect, `advance` before any change, `finish_time` for the completion instant), so a job
here takes as long as it would in `sim run` on the same placements, restart cost included. Progress survives a
stop (a resize, a preemption, a hold): the training library checkpoints on the stop signal, and so does this.

Readings where the live service and the model part ways (written down so that none is a surprise):
- a job whose application has no profile of the GPU types it holds, but that gives `duration_s`, needs
  `duration_s × requested GPUs` GPU-seconds and runs at one per GPU held (linear scaling), from the end of
  the restart window (`restart_s`); with neither a model nor a duration it runs until it is cancelled;
- `mtbf_s` makes generations fail: each running generation fails after an exponential time of that mean
  (seeded), reported as a failed generation, which the daemon retries from the checkpoint (the progress made
  up to the failure is kept, as with a checkpoint at every step);
- nothing survives a service restart (the nodes live in the service): `recover` reports the generations the
  daemon still wants as lost (the daemon relaunches them; their progress starts again from zero) and the
  others as stopped;
- servers on loan are the service's virtual `loan-<type>-<k>` nodes: their GPU type is read from the name.

Completions are kept in a heap keyed by the time each job's current generation ends, so a poll costs the
generations that ended, not the jobs that run.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from elastisched.backends.base import BackendBase, BackendEvent, GenerationEnded, GenerationRecord, JobStarted
from elastisched.core.enums import GenerationOutcome
from elastisched.core.events import Action, ActionKind
from elastisched.core.types import NO_ALLOCATION, Allocation, JobId, JobSpec, NodeView
from elastisched.engine.jobstate import INF, JobState, new_state

DONE, FAIL = GenerationOutcome.SUCCEEDED, GenerationOutcome.FAILED


@dataclass(slots=True)
class _Run:
    """One job as the fake runs it: its engine bookkeeping (progress survives a stop), its live generation
    (0: none), the GPU-seconds of work left when it has no model, and the instant its generation fails."""

    state: JobState
    generation: int = 0
    work_left: float = INF  # GPU-seconds (a job with a duration and no model); INF: not counted this way
    work_at: float = 0.0  # when work_left was last brought up to date
    fail_at: float = INF
    version: int = 0  # bumps at every change; a heap entry of an older version is stale


class FakeBackend(BackendBase):
    """Launch, resize, suspend, cancel, finish and fail by the performance model; no process, no file."""

    def __init__(self, nodes: Sequence[NodeView], models: Any = None, *, now: Callable[[], float] = time.time,
                 mtbf_s: float | None = None, seed: int = 0, restart_s: float = 0.0) -> None:
        if mtbf_s is not None and not mtbf_s > 0:
            raise ValueError(f"mtbf_s: {mtbf_s} must be a positive number of seconds")
        self.types = {n.node_id: n.gpu_type for n in nodes}
        self.models = models  # models.registry.PerfModels (or anything with `in` and `app(name)`), or None
        self.now = now
        self.mtbf_s = mtbf_s
        self.restart_s = restart_s  # restart window of a job without a model
        self.rng = random.Random(seed)
        self.runs: dict[JobId, _Run] = {}
        self._heap: list[tuple[float, int, JobId, int]] = []  # (generation's end, tie-break, job, run version)
        self._seq = 0
        self._pending: list[BackendEvent] = []
        self.counts = {"launched": 0, "resized": 0, "suspended": 0, "finished": 0, "failed": 0, "cancelled": 0}

    # ------------------------------------------------------------------ the Backend protocol
    def apply(self, actions: Sequence[Action]) -> None:
        now = self.now()
        for a in actions:
            if a.kind is ActionKind.SUSPEND:
                self._stop(a.job_id, now, GenerationOutcome.STOPPED)
                continue
            if a.launch is None:
                raise ValueError(f"job {a.job_id}: {a.kind.value} action without a launch spec")
            run = self.runs.get(a.job_id)
            if run is not None and run.generation and self._done_by(run, now):
                # its work was done before the stop reached it: the new generation is the one that finished
                self._pending.append(GenerationEnded(now, a.job_id, run.generation, DONE, (0,)))
                self._end(a.job_id, run, a.launch.generation, DONE, now)
                continue
            if run is not None and run.generation:
                self._pending.append(GenerationEnded(now, a.job_id, run.generation, GenerationOutcome.STOPPED))
            self._start(a.job_id, a.allocation, a.launch.generation, a.launch.job, now)
            self.counts["resized" if a.kind is ActionKind.RESIZE else "launched"] += 1

    def cancel(self, job_id: JobId) -> None:
        run = self.runs.pop(job_id, None)
        if run is not None and run.generation:
            self._pending.append(GenerationEnded(self.now(), job_id, run.generation, GenerationOutcome.CANCELLED))
            self.counts["cancelled"] += 1

    def poll(self) -> list[BackendEvent]:
        now = self.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, _, jid, version = heapq.heappop(heap)
            run = self.runs.get(jid)
            if run is None or run.version != version or not run.generation:
                continue  # superseded by a later change
            failed = run.fail_at <= t
            self._end(jid, run, run.generation, FAIL if failed else DONE, t)
        out, self._pending = self._pending, []
        return out

    def recover(self, generations: Sequence[GenerationRecord]) -> list[BackendEvent]:
        """The nodes lived in the previous service: every generation it had is gone."""
        now = self.now()
        return [GenerationEnded(now, g.job_id, g.generation,
                                GenerationOutcome.LOST if g.keep else GenerationOutcome.STOPPED,
                                reason="the fake backend's nodes live in the service, which restarted")
                for g in generations]

    def close(self) -> None:
        self.runs.clear()
        self._heap.clear()

    def set_batch(self, job_id: JobId, batch_size: int) -> None:
        """An in-place batch change on the same GPUs (no restart): the rate follows the new batch from now."""
        run = self.runs.get(job_id)
        if run is None or not run.generation:
            return
        now = self.now()
        st = run.state
        st.advance(now)
        alloc = replace(st.allocation, batch_size=batch_size)
        st.apply(alloc, now, self._node_types(alloc), 0.0)
        self._schedule(job_id, run)

    # ------------------------------------------------------------------ runs
    def _start(self, job_id: JobId, alloc: Allocation, generation: int, spec: JobSpec | None, now: float) -> None:
        run = self.runs.get(job_id)
        if run is None:
            if spec is None:
                raise ValueError(f"job {job_id}: the fake backend needs the job's spec in its launch (LaunchSpec.job)")
            app = self.models.app(spec.application) if self.models is not None and spec.application in self.models \
                else None
            run = self.runs[job_id] = _Run(new_state(spec, app, now))
            if spec.duration:
                run.work_left, run.work_at = float(spec.duration) * spec.num_gpus, now
        st = run.state
        self._count_work(run, now)
        st.advance(now)
        cost = st.app.restart_cost if st.app is not None else self.restart_s
        st.apply(alloc, now, self._node_types(alloc), cost)
        run.generation = generation
        run.fail_at = now + self.rng.expovariate(1.0 / self.mtbf_s) if self.mtbf_s else INF
        self._pending.append(JobStarted(now, job_id, generation))
        self._schedule(job_id, run)

    def _stop(self, job_id: JobId, now: float, outcome: str) -> None:
        run = self.runs.get(job_id)
        if run is None or not run.generation:
            return
        if self._done_by(run, now):
            self._end(job_id, run, run.generation, DONE, now)
            return
        self._count_work(run, now)
        run.state.advance(now)
        run.state.apply(NO_ALLOCATION, now, {}, 0.0)
        self._pending.append(GenerationEnded(now, job_id, run.generation, outcome))
        run.generation, run.fail_at = 0, INF
        run.version += 1
        self.counts["suspended"] += 1

    def _end(self, job_id: JobId, run: _Run, generation: int, outcome: str, t: float) -> None:
        """The generation ends by itself at `t`: the job finished its work, or the generation failed (the job
        keeps its progress for the daemon's retry)."""
        reason = "" if outcome == DONE else f"fake failure (mean time between failures {self.mtbf_s:g} s)"
        self._pending.append(GenerationEnded(t, job_id, generation, outcome, (0,) if outcome == DONE else (1,),
                                             reason))
        if outcome == DONE:
            del self.runs[job_id]
            self.counts["finished"] += 1
            return
        self._count_work(run, t)
        run.state.advance(t)
        run.state.apply(NO_ALLOCATION, t, {}, 0.0)
        run.generation, run.fail_at = 0, INF
        run.version += 1
        self.counts["failed"] += 1

    def _schedule(self, job_id: JobId, run: _Run) -> None:
        run.version += 1
        end = min(self._finish_time(run), run.fail_at)
        if end < INF:
            self._seq += 1
            heapq.heappush(self._heap, (end, self._seq, job_id, run.version))

    @staticmethod
    def _finish_time(run: _Run) -> float:
        """When the running generation completes the job's work if nothing changes (INF: never by itself)."""
        st = run.state
        if st.modelled:
            return st.finish_time()
        gpus = st.allocation.gpus
        if run.work_left == INF or not gpus:
            return INF
        return max(run.work_at, st.restart_until) + run.work_left / gpus

    def _count_work(self, run: _Run, now: float) -> None:
        """GPU-seconds done since `work_at` by a job that runs by its duration (no model)."""
        st = run.state
        if run.work_left < INF and not st.modelled and st.allocation.gpus:
            busy = max(0.0, now - max(run.work_at, st.restart_until))
            run.work_left = max(0.0, run.work_left - busy * st.allocation.gpus)
        run.work_at = now

    def _done_by(self, run: _Run, now: float) -> bool:
        return self._finish_time(run) <= now and self._finish_time(run) < run.fail_at

    def _node_types(self, alloc: Allocation) -> Mapping[str, str]:
        return {n: self.types.get(n) or _loan_type(n) for n in alloc.nodes}


def _loan_type(node_id: str) -> str:
    """The GPU type of a virtual loaned server, `loan-<type>-<k>` (service/routes/cluster.py names them)."""
    parts = node_id.split("-")
    return parts[1] if len(parts) >= 3 and parts[0] == "loan" else ""
