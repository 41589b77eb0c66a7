"""Tiresias (NSDI'19) 2D-LAS with two queues, as configured in the Pollux artifact (`simulator/tiresias.py`).

- Jobs enter queue 0 in arrival order; a running job whose attained service (GPU-seconds) reaches the
  threshold (16 GPU-hours, the artifact's `_queue_threshold = 3600 * 16`) is demoted to the end of queue 1.
- Each round, jobs are admitted in queue order (queue 0, then 1) while their requested GPUs fit; a job that
  does not fit is skipped (later, smaller jobs may still run) and loses its GPUs if it had them.
- Starvation handling is off (the artifact's `_solve_starvation = 0`).
- Pending reasons (ours): RESOURCES for a job skipped because its GPUs are not free, INFEASIBLE for a job
  that can never fit (more GPUs than any type it may use has in the cluster; skipped like the others).
  Once no GPU is left the round stops, as the artifact's does: the jobs after that wait for PRIORITY (no
  reason), which keeps a round O(admitted jobs) on a long queue.
- Cost (ours): the decision is a `KeptAllocations` (running jobs kept as they are, the stopped ones
  `released`), so the placer looks only at the changes; demotions are found by the walk where it meets the
  job in queue 0 rather than by a pass over every running job; and where the body reports what changed
  (`ClusterSnapshot.changed`: the simulator), the queues are kept as blocks (`index.py`) and a stretch of
  running jobs that all fit is added up as a whole, so a round costs O(blocks + changes), not O(running
  jobs) (tests/policies/test_tiresias_walk.py checks both against the plain rules, round by round).
Reading: the artifact counts service by integer wall seconds since the job's last status change times its
GPU count; we use the engine's attained GPU-seconds, which is the same quantity without rounding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from typing import Any, ClassVar

from elastisched.core.types import (
    Allocation,
    ClusterSnapshot,
    Decision,
    JobSpec,
    JobView,
    KeptAllocations,
    NodeView,
    PendingReason,
)
from elastisched.policies._common import can_ever_fit, fits, node_types
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.tiresias.index import SPECIAL, TOL, Group, QueueIndex, Sums, part_of

INF = float("inf")
Static = tuple[JobView, int, bool, str | None, tuple[tuple[str, int], ...]]


@register
class TiresiasPolicy(Policy):
    name = "tiresias"
    description = "Tiresias 2D-LAS: two priority queues by attained GPU-time, preemptive, skips jobs that don't fit."
    interval = 60.0
    needs_progress = False

    option_help: ClassVar[dict[str, str]] = {
        "threshold_gpu_seconds": "attained GPU-seconds after which a job drops from the high- to the low-priority "
            "queue (2D-LAS)",
    }

    def __init__(self, threshold_gpu_seconds: float = 3600.0 * 16) -> None:
        self.threshold = threshold_gpu_seconds
        self._q0: dict[str, None] = {}
        self._q1: dict[str, None] = {}
        self._fit_for: tuple[NodeView, ...] | None = None  # node set that `_fit` was computed for
        self._fit: dict[tuple[tuple[str, ...], int], bool] = {}  # (GPU types, GPUs) -> can ever fit
        # per job, what the walk needs from its view, kept while the view is the same object (`_static`)
        self._static: dict[str, Static] = {}
        self._index: QueueIndex | None = None  # the queues as blocks, while snapshots report their changes
        self._serial = -1  # the number of the snapshot the index is up to date with
        self._rank: dict[str, int] = {}  # running jobs -> when they started running (the snapshot's order)
        self._ranks = 0

    def on_submit(self, spec: JobSpec, now: float) -> None:
        if spec.job_id not in self._q1 and spec.job_id not in self._q0:
            self._q0[spec.job_id] = None
            if self._index is not None:
                self._index.append(0, spec.job_id, SPECIAL)  # pending until its view is read

    def on_finish(self, job_id: str, now: float) -> None:
        if self._index is not None:
            self._index.remove(0 if job_id in self._q0 else 1, job_id)
        self._q0.pop(job_id, None)
        self._q1.pop(job_id, None)
        self._static.pop(job_id, None)
        self._rank.pop(job_id, None)

    def _sync(self, snap: ClusterSnapshot) -> None:
        """Catch up with jobs the hooks did not announce (e.g. a restored service)."""
        if len(snap.jobs) == len(self._q0) + len(self._q1):
            return
        self._index = None
        for jid in snap.jobs:
            if jid not in self._q0 and jid not in self._q1:
                self._q0[jid] = None
        for q in (self._q0, self._q1):
            for jid in [j for j in q if j not in snap.jobs]:
                del q[jid]

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        self._sync(snap)
        if self._fit_for is not snap.nodes:  # can_ever_fit depends only on the node set: memoised per set
            self._fit_for, self._fit, self._static, self._index = snap.nodes, {}, {}, None
        rnd = _Round(snap)
        index = self._follow(snap, rnd.types_of)
        # a running job of queue 0 whose attained service reached the threshold is demoted before the walk; it
        # is found where the walk meets it in queue 0 (skipped there), and joins queue 1 before that is walked
        for first in (True, False):
            if not first:
                self._demote(rnd.demoted, rnd.running)
            if self._walk_blocks(rnd, first) if index is not None else self._walk(rnd, iter(
                    self._q0 if first else self._q1), first, self._q1 if first else ()):
                break
        if rnd.skipped:
            rnd.wake = self._skipped_wake(rnd)
        return Decision(KeptAllocations(rnd.running, rnd.added, rnd.released), rnd.reasons, next_round_at=rnd.wake)

    def _walk(self, rnd: _Round, walk: Iterator[str], first: bool, then: Iterable[str]) -> bool:
        """Walk `walk` (queue 0's jobs if `first`, else queue 1's), admitting jobs while they fit; True when the
        GPUs ran out (the jobs left in `walk` and then `then` wait, and those of them that ran stop)."""
        now = rnd.now
        thr = self.threshold
        jobs = rnd.snap.jobs
        static = self._static
        free = rnd.free
        added, released, reasons, demoted = rnd.added, rnd.released, rnd.reasons, rnd.demoted
        total_free, kept, wake = rnd.total_free, rnd.kept, rnd.wake  # locals in the loop, written back after
        for jid in walk:
            if total_free <= 0:  # no GPU left: the rest wait, and those of them that ran stop
                rnd.kept, rnd.wake = kept, wake
                self._stop_round(rnd, first, chain((jid,), walk, then))
                return True
            job = jobs[jid]
            st = static.get(jid)
            if st is None or st[0] is not job:
                st = static[jid] = self._job_static(job, rnd.snap, rnd.types_of)
            _, need, ok, t, takes = st
            if first and t is not None:  # it runs, in queue 0: `left` GPU-seconds before its demotion
                d = now - job.updated_at  # (`d if d > 0.0 else 0.0` is max(0.0, d), written out)
                left = thr - (job.attained_service + (d if d > 0.0 else 0.0) * job.allocation.gpus)
                if left <= 0.0:
                    demoted.append(jid)
                    continue
            if not ok:
                reasons[jid] = PendingReason.INFEASIBLE
                if t is not None:  # (only when the node set shrank under it)
                    released.append(jid)
                continue
            if t is not None and free[t] >= need:  # it runs (its first node of type `t`) and fits
                kept += 1
                for tn, g in takes:  # `take`, inlined (GPUs summed per type)
                    free[tn] -= g
                total_free -= need
                if first:
                    w = now + left / need
                    if w < wake:  # min(wake, w)
                        wake = w
                continue
            if t is not None:  # it runs and does not fit where it is: it moves or stops
                released.append(jid)
            t2 = fits(free, job.spec.gpu_types, need)
            if t2 is not None:
                added[jid] = Allocation(num_gpus=need, gpu_type=t2)
                free[t2] -= need
                total_free -= need
                if first and now + thr / need < wake:
                    wake = now + thr / need
            else:
                reasons[jid] = PendingReason.RESOURCES
        rnd.total_free, rnd.kept, rnd.wake = total_free, kept, wake
        return False

    def _walk_blocks(self, rnd: _Round, first: bool) -> bool:
        """`_walk` over one queue, group by group and block by block (`index.py`): a group, else a block, of
        running jobs that all fit, none due for demotion, is added up as a whole; any other block is walked job
        by job."""
        q = 0 if first else 1
        index = self._index
        assert index is not None
        for gi, group in enumerate(index.groups[q]):
            if self._add_up(rnd, group, first):
                continue
            for bi, b in enumerate(group.blocks):
                if not self._add_up(rnd, b, first) and (b.special or b.count) and self._walk(
                        rnd, iter(list(b.jobs)), first, index.after(q, gi, bi, self._q1 if first else ())):
                    return True
        return False

    def _add_up(self, rnd: _Round, s: Sums, first: bool) -> bool:
        """Take the GPUs of a block or group whose jobs all run, fit and are not due (in queue 0); False (and
        nothing taken) when it is not such a one."""
        if s.special or not s.count or rnd.total_free <= 0:
            return False
        if first and (s.key if s.key is not None else self._index.least_key(s)) <= rnd.now + TOL:  # type: ignore[union-attr]
            return False
        free = rnd.free
        run = s.run
        for t, g in run.items():  # (`all(...)` written out: GPUs of one type, or of few)
            if free[t] < g:
                return False
        for t, g in run.items():
            free[t] -= g
        rnd.total_free -= s.gpus
        rnd.kept += s.count
        if first:
            rnd.skipped.append(s)
        return True

    def _skipped_wake(self, rnd: _Round) -> float:
        """The round's wake-up with the demotion instants of what was added up whole (each job's, by the walk's
        own formula, for the jobs whose `key` is within float noise of the least)."""
        index = self._index
        assert index is not None
        near = min(index.least_key(s) for s in rnd.skipped) + TOL
        now, thr, wake, jobs, parts = rnd.now, self.threshold, rnd.wake, rnd.snap.jobs, index.parts
        blocks = [b for s in rnd.skipped if index.least_key(s) <= near
                  for b in (s.blocks if isinstance(s, Group) else (s,)) if index.least_key(b) <= near]
        for b in blocks:
            for jid in b.jobs:
                part = parts[jid]
                if part[0] and part[3] <= near:
                    job = jobs[jid]
                    d = now - job.updated_at
                    w = now + (thr - (job.attained_service + (d if d > 0.0 else 0.0) * job.allocation.gpus)) / part[2]
                    if w < wake:
                        wake = w
        return wake

    def _stop_round(self, rnd: _Round, first: bool, rest: Iterator[str]) -> None:
        """No GPU is left: the jobs the walk did not reach wait, and those of them that ran stop."""
        if first:  # the demoted run beyond here now; the rest of queue 0 may demote more
            rnd.released.extend(rnd.demoted)
        missing = len(rnd.running) - rnd.kept - len(rnd.released)
        if missing > 0:
            self._release_rest(rest, rnd.running, missing, rnd.released, rnd.demoted, rnd.now)
        if first:
            self._demote(rnd.demoted, rnd.running)

    def _release_rest(self, rest: Iterator[str], running: Mapping[str, JobView], missing: int, released: list[str],
                      demoted: list[str], now: float) -> None:
        """Release the `missing` running jobs among the queue's `rest` (the jobs the walk did not reach), and
        note those of queue 0 whose service reached the threshold among the `demoted`."""
        q0, thr = self._q0, self.threshold
        for jid in rest:
            v = running.get(jid)
            if v is not None:
                released.append(jid)
                if jid in q0 and v.attained_service + max(0.0, now - v.updated_at) * v.allocation.gpus >= thr:
                    demoted.append(jid)
                missing -= 1
                if not missing:
                    return

    def _demote(self, demoted: list[str], running: Mapping[str, JobView]) -> None:
        """Move the `demoted` to the end of queue 1, in the order they run (the snapshot's), then forget them."""
        if len(demoted) > 1:
            if self._index is not None:  # the snapshot's running order, as followed from its changes
                demoted.sort(key=self._rank.__getitem__)
            else:
                at = set(demoted)
                demoted[:] = [jid for jid in running if jid in at]
        for jid in demoted:
            del self._q0[jid]
            self._q1[jid] = None
            if self._index is not None:
                part = self._index.parts.get(jid, SPECIAL)
                self._index.remove(0, jid)
                self._index.append(1, jid, part)
        demoted.clear()

    def _follow(self, snap: ClusterSnapshot, types_of: Mapping[str, str]) -> QueueIndex | None:
        """The index, brought up to date with the jobs that changed (rebuilt when a snapshot was skipped); None
        when the body does not report changes."""
        if snap.changed is None:
            self._index = None
            return None
        if self._index is None or snap.serial != self._serial + 1:
            self._rank = {jid: i for i, jid in enumerate(snap.running_jobs())}
            self._ranks = len(self._rank)
            self._index = QueueIndex((self._q0, self._q1), {jid: self._part(v, snap, types_of)
                                                            for jid, v in snap.jobs.items()})
        else:
            for jid in snap.changed:
                view = snap.jobs.get(jid)
                if view is not None:
                    self._index.update(jid, self._part(view, snap, types_of))
        self._serial = snap.serial
        return self._index

    def _part(self, view: JobView, snap: ClusterSnapshot, types_of: Mapping[str, str]) -> Any:
        """A job's record for the walk (cached) and its part in its block; notes when it started running."""
        st = self._static[view.spec.job_id] = self._job_static(view, snap, types_of)
        jid = view.spec.job_id
        if st[3] is None:
            self._rank.pop(jid, None)
        elif jid not in self._rank:
            self._rank[jid] = self._ranks
            self._ranks += 1
        return part_of(view, *st[1:], self.threshold)

    def _job_static(self, job: JobView, snap: ClusterSnapshot, types_of: Mapping[str, str]) -> Static:
        """(view, GPUs asked, can ever fit, type of its first node when it runs, its GPUs per node type):
        what the walk reads of a job, the same until its view changes (or the node set: then all go)."""
        spec = job.spec
        need = spec.num_gpus
        key = (spec.gpu_types, need)
        ok = self._fit.get(key)
        if ok is None:
            ok = self._fit[key] = can_ever_fit(snap.capacity_by_type(), spec.gpu_types, need)
        cur = job.allocation
        if not cur.gpus:
            return job, need, ok, None, ()
        per_type: dict[str, int] = {}
        for n, g in cur.placement:
            tn = types_of.get(n)
            if tn is not None:
                per_type[tn] = per_type.get(tn, 0) + g
        return job, need, ok, types_of[cur.placement[0][0]], tuple(per_type.items())

    def state_dict(self) -> dict[str, Any]:
        return {"q0": list(self._q0), "q1": list(self._q1), "threshold": self.threshold}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._q0 = dict.fromkeys(state.get("q0", []))
        self._q1 = dict.fromkeys(state.get("q1", []))
        self.threshold = float(state.get("threshold", self.threshold))
        self._index = None


class _Round:
    """What one Tiresias round carries between its two queue walks."""

    __slots__ = ("added", "demoted", "free", "kept", "now", "reasons", "released", "running", "skipped", "snap",
                 "total_free", "types_of", "wake")

    def __init__(self, snap: ClusterSnapshot) -> None:
        self.snap = snap
        self.now = snap.now
        self.free = snap.capacity_by_type()
        self.total_free = sum(self.free.values())
        self.types_of = node_types(snap)
        # the decision as `KeptAllocations`: a running job the walk keeps is not written anywhere; those it
        # stops or moves are `released`, the jobs it starts or moves `added` (in walk order, the placer's)
        self.running = snap.running_jobs()
        self.added: dict[str, Allocation] = {}
        self.released: list[str] = []
        self.kept = 0
        self.reasons: dict[str, PendingReason] = {}
        self.wake = INF
        self.demoted: list[str] = []  # queue-0 jobs found at the threshold, not yet moved to queue 1
        self.skipped: list[Any] = []  # queue-0 blocks added up as a whole (their wake-ups are read at the end)
