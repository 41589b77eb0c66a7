"""The daemon's side of running workers: it is the single writer of the jobs and generations tables.

Before a backend acts, an action that starts workers becomes a planned generation in the store — number,
cause, placement, batch and a fresh launch token, in one transaction with the job's row — and the action
carries it as its `LaunchSpec`. The backend reports facts (`JobStarted` with the PIDs, `GenerationEnded`
with how); this module records them and decides what follows: a failed generation is retried from its
checkpoint up to `max_retries` times, an interrupted or lost one resumes from its checkpoint, a launch that
could not start fails its job with the reason. After a restart, `records` tells the backend which
generations the store knows and whether each is still wanted (a cancelled or held job's, or a superseded
one's, is stopped, never relaunched).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elastisched.backends._faults import pause
from elastisched.backends.base import GenerationEnded, GenerationRecord, JobStarted
from elastisched.core.enums import Cause, ChangeKind, GenerationOutcome, GenerationState, LoanState
from elastisched.core.events import Action, ActionKind, LaunchSpec
from elastisched.core.types import NO_ALLOCATION, Allocation, JobPhase, PendingReason
from elastisched.engine.jobstate import change_kind
from elastisched.service.store import ACTIVE, Store
from elastisched.service.submission import job_spec


def in_place(a: Action) -> bool:
    """A batch-only change on the same GPUs: not a restart (the engine's rule, as in the simulator). The live
    job keeps running; the daemon hands the new batch to the backend (`set_batch`: the local backend writes
    `batch-target.json` in the job's checkpoint dir, which the training library applies at a step boundary)."""
    return a.kind is ActionKind.RESIZE and change_kind(a.previous, a.allocation) is ChangeKind.RECONFIGURE


def _placement(p: Any) -> tuple[tuple[str, int], ...]:
    return tuple((str(n), int(k)) for n, k in p or ())


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the daemon does about a generation that ended: `job_state` (a terminal state, or None) with its
    `message`, and `relaunch` (an action to hand the backend, or None)."""

    job_state: str | None = None
    message: str | None = None
    relaunch: Action | None = None
    note: str | None = None  # event kind to record ("retried", "resumed")


class Launches:
    def __init__(self, store: Store, max_retries: int = 2) -> None:
        self.store = store
        self.max_retries = max_retries

    def prepare(self, actions: list[Action], grad: Mapping[str, tuple[float, float] | None] | None = None
                ) -> list[Action]:
        """Persist what each action starts or stops; LAUNCH / RESIZE come back with their launch spec. A RESIZE
        that only changes the batch on the same GPUs (`engine.jobstate.change_kind` "reconfigure") starts no
        generation: the target batch is recorded and the action is left out (see `in_place`). Its event says
        which gradient statistics the policy saw (`grad`: the job's measured ones, from its hints, or None).
        All of it is one transaction (with the caller's, if one is open), committed before any backend acts."""
        with self.store.tx():
            return self._prepare(actions, grad)

    def _prepare(self, actions: list[Action], grad: Mapping[str, tuple[float, float] | None] | None) -> list[Action]:
        out = []
        starts = [a.job_id for a in actions if a.kind in (ActionKind.LAUNCH, ActionKind.RESIZE) and a.launch is None]
        rows = self.store.jobs_by_id(starts) if starts else {}  # one query for the round's launches
        for a in actions:
            if in_place(a):
                row = self.store.get_job(a.job_id)
                stats = (grad or {}).get(a.job_id)
                self.store.update_job(a.job_id, batch_size=a.allocation.batch_size)
                self.store.add_event(a.job_id, ChangeKind.RECONFIGURE, {
                    "batch_size": a.allocation.batch_size, "previous": a.previous.batch_size,
                    "generation": None if row is None else row["generation"],
                    "grad_stats": None if stats is None else list(stats), "source": "hints" if stats else "model"})
                continue
            if a.kind in (ActionKind.LAUNCH, ActionKind.RESIZE) and a.launch is None:
                planned = self.plan(a, row=rows.get(a.job_id))
                if planned is not None:
                    out.append(planned)
                continue
            if a.kind is ActionKind.SUSPEND:
                self.stopping(a.job_id)
            out.append(a)
        return out

    def stopping(self, job_id: str) -> None:
        """The job's live generations are about to be stopped (a restart after a crash in between must not
        resume them as if they had been lost)."""
        self.store.update_generation(job_id, None, state=GenerationState.STOPPING)

    def plan(self, a: Action, cause: str | None = None, row: dict[str, Any] | None = None) -> Action | None:
        """Record the generation `a` starts (`row`: the job's whole row if the caller has read it)."""
        row = row if row is not None else self.store.get_job(a.job_id)
        if row is None or row["state"] not in ACTIVE:
            return None
        gen = int(row["generation"]) + 1
        if cause is None:
            cause = Cause.LAUNCH if a.kind is ActionKind.LAUNCH else Cause.RESIZE
            if cause == Cause.LAUNCH and gen > 1:
                cause = Cause.RESUME  # a suspended (preempted / reclaimed) job continues from its checkpoint
        job = job_spec(row["id"], row["name"], row["submit_time"], row["spec"], row["resize_to"])
        batch = job.batch_for(a.allocation)
        placement = [[n, k] for n, k in a.allocation.placement]
        token = secrets.token_hex(16)
        with self.store.tx() as c:
            if a.kind is ActionKind.RESIZE:
                self.store.update_generation(a.job_id, None, conn=c, state=GenerationState.STOPPING)
            self.store.add_generation(c, a.job_id, gen, cause=cause, placement=placement, batch_size=batch,
                                      token=token)
            self.store.update_job(a.job_id, conn=c, generation=gen, placement=placement, batch_size=batch,
                                  restarts=int(row["restarts"]) + (cause != Cause.LAUNCH),
                                  state=JobPhase.RESTARTING.value)
            self.store.add_event(a.job_id, cause, {"generation": gen, "placement": placement, "batch_size": batch},
                                 conn=c)
        spec = LaunchSpec(script=row["script"], args=tuple(row["args"]), generation=gen, cause=cause, token=token,
                          batch_size=batch, env=dict(row["spec"].get("env") or {}), user=row.get("owner"), job=job)
        return Action(a.kind, a.job_id, a.allocation, a.previous, spec)

    def started(self, e: JobStarted) -> None:
        fields: dict[str, Any] = {"state": GenerationState.RUNNING, "pids": [list(p) for p in e.pids],
                                  "devices": list(e.devices) if e.devices else None}
        if not e.adopted:
            fields |= {"started_at": e.time, "port": e.port}
        self.store.update_generation(e.job_id, e.generation, **fields)
        if e.adopted:
            self.store.add_event(e.job_id, "adopted", {"generation": e.generation, "pids": fields["pids"]})

    def ended(self, e: GenerationEnded, row: dict[str, Any]) -> Outcome:
        self.store.update_generation(e.job_id, e.generation, state=GenerationState.EXITED,
                                     exit_codes=list(e.exit_codes), outcome=e.outcome, ended_at=e.time)
        pause("ended", f"{e.job_id}:{e.generation}:{e.outcome}")  # crash-test hook (backends/_faults.py)
        stopped = e.outcome in (GenerationOutcome.STOPPED, GenerationOutcome.CANCELLED)
        if e.generation != int(row["generation"]) or stopped:
            return Outcome()  # a superseded generation, or a stop we asked for
        if e.outcome == GenerationOutcome.SUCCEEDED:
            return Outcome(JobPhase.SUCCEEDED.value)
        if e.outcome == GenerationOutcome.LAUNCH_FAILED or row["cancel_requested"] or row["held"]:
            failed = e.outcome == GenerationOutcome.LAUNCH_FAILED
            return Outcome(JobPhase.FAILED.value if failed else None, e.reason or None)
        alloc = Allocation(placement=_placement(row["placement"]), batch_size=row["batch_size"])
        if not alloc.placement:
            return Outcome()
        if e.outcome == GenerationOutcome.FAILED:
            if int(row["retries"]) >= self.max_retries:
                return Outcome(JobPhase.FAILED.value, e.reason or f"generation {e.generation} failed")
            self.store.update_job(e.job_id, retries=int(row["retries"]) + 1)
            act = self.plan(Action(ActionKind.LAUNCH, e.job_id, alloc, NO_ALLOCATION), cause=Cause.RETRY)
            return Outcome(relaunch=act, note="retried", message=e.reason)
        act = self.plan(Action(ActionKind.LAUNCH, e.job_id, alloc, NO_ALLOCATION), cause=Cause.RESUME)
        return Outcome(relaunch=act, note="resumed", message=e.reason)

    def unsettled(self) -> list[GenerationEnded]:
        """Ends recorded whose consequence a crash cut off: the job still holds its placement while its current
        generation has EXITED, and nothing was relaunched (no generation is live, so `records` skips it and
        the job would stay running forever). Replayed at startup through `ended`, which is idempotent but for
        a failed generation's retry count (it may count that failure twice)."""
        latest: dict[str, dict[str, Any]] = {}
        for g in self.store.generations():
            if int(g["generation"]) >= int(latest.get(g["job_id"], {"generation": 0})["generation"]):
                latest[g["job_id"]] = g
        out = []
        for row in self.store.list_jobs(ACTIVE):
            g = latest.get(row["id"])
            if g is not None and g["state"] == GenerationState.EXITED and g["outcome"] and row["placement"] \
                    and int(g["generation"]) == int(row["generation"]):
                out.append(GenerationEnded(float(g["ended_at"] or 0.0), row["id"], int(g["generation"]), g["outcome"],
                                           tuple(g["exit_codes"] or ()), "ended before a crash"))
        return out

    def nodes_lost(self, lost: set[str]) -> list[Action]:
        """Nodes left the cluster (a backend's `NodesChanged`): every job placed on one is down. Each is marked
        suspended (requeued, reason Preempted) and comes back as a SUSPEND action whose stop frees what is left
        of its generation; the engine then places it again, from its last checkpoint."""
        out = []
        for row in self.store.active_light():
            place = _placement(row["placement"])
            if lost & {n for n, _ in place}:
                self.stopping(row["id"])
                with self.store.tx() as c:
                    self.store.update_job(row["id"], conn=c, state=JobPhase.SUSPENDED.value, placement=[],
                                          reason=PendingReason.PREEMPTED.value)
                    self.store.add_event(row["id"], "node_lost", {"nodes": sorted(lost & {n for n, _ in place}),
                                                                  "generation": row.get("generation")}, conn=c)
                prev = Allocation(placement=place, batch_size=row["batch_size"])
                out.append(Action(ActionKind.SUSPEND, row["id"], NO_ALLOCATION, prev))
        with self.store.tx() as c:
            for loan in self.store.list_loans((LoanState.LOANED,)):
                if loan["node_id"] in lost:  # a loaned server that died is not coming back
                    self.store.update_loan(loan["node_id"], conn=c, state=LoanState.RETURNED, returned_at=time.time())
        return out

    def records(self) -> list[GenerationRecord]:
        """The generations the store says were planned or running, each with whether it is still wanted."""
        out = []
        for g in self.store.generations(live=True):
            row = self.store.get_job(g["job_id"])
            keep = (row is not None and row["state"] in ACTIVE and not row["cancel_requested"] and not row["held"]
                    and int(row["generation"]) == int(g["generation"]) and bool(row["placement"])
                    and g["state"] != GenerationState.STOPPING)  # a stop we asked for and a crash cut off: finish it
            alloc = Allocation(placement=_placement(g["placement"]), batch_size=g["batch_size"])
            out.append(GenerationRecord(g["job_id"], int(g["generation"]), g.get("token") or "", alloc, g["state"],
                                        tuple((int(p), t) for p, t in g["pids"] or ()), tuple(g["devices"] or ()),
                                        keep))
        return out
