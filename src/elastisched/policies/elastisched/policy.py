"""elastisched: the project's own scheduler — what Lyra, ONES, JABAS, Pollux and Sia teach, in one round.

One round (every `interval` seconds and on every arrival, completion and loan change):

0. **Loans** (Lyra, lyra.md §2.1): when the inference side reclaims r servers, the r loaned servers whose
   return stops the fewest jobs (`policies._reclaim`, greedy on preemption cost, with this policy's reading of
   who can shrink: `keep` = the fewest GPUs a job runs on) go back; a job that keeps some GPUs shrinks instead
   of stopping, and every job is then re-planned on what is left (an evicted job may restart at once elsewhere).
1. **Remaining time** (`candidates`, `length`): per job, per GPU type it may use and per GPU count, the seconds
   it still needs at the best batch for that allocation, from its declared length (or, without one, its attained
   service against the job-length distribution) and its goodput model (`goodput`).
2. **Who must keep running** (`values.protected`): SRPT with a bounded preemption factor and a minimum run time.
3. **Type and count for every job at once** (`assign`): values `τ / T` (completion rates: shortest first where
   GPUs are scarce), one capacity per GPU type, solved by the hull greedy (one type) or by per-type prices then
   the greedy (several types: a job takes the type it gains most on relative to the others).
4. **Where** (`placement`): kept jobs stay put, the rest best fit, packed, training servers before loaned ones.
5. **Batch** of each allocation: the goodput-optimal global batch inside the profiled range, changed in place
   (no restart) when only the batch changes.

Readings of each step are in the docstring of its module; docs/elastisched.md has the design and the results.
"""

from __future__ import annotations

from typing import Any, ClassVar

from elastisched.core.enums import LengthKnowledge
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, NodeId, PendingReason
from elastisched.policies._reclaim import capacity_without
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.elastisched.assign import Assignment, Problem, solve
from elastisched.policies.elastisched.candidates import Candidate, CandidateBuilder
from elastisched.policies.elastisched.goodput import RateTables
from elastisched.policies.elastisched.length import LengthBelief
from elastisched.policies.elastisched.loans import LoanWatch
from elastisched.policies.elastisched.placement import Placement, place_all
from elastisched.policies.elastisched.steady import allocation_at, steady_allocations
from elastisched.policies.elastisched.values import VALUES, ValueRule, build_problem, protected


@register
class ElastischedPolicy(Policy):
    name = "elastisched"
    description = ("elastisched's own: SRPT on declared (or service-predicted) remaining time, GPU type and count "
                   "by goodput per type in one assignment, goodput-optimal batch in place, loans shrunk before "
                   "any job is evicted.")
    interval = 60.0
    elastic = True
    batch_in_place = True
    knows_length = LengthKnowledge.DECLARED
    steady_path = True  # decide steady rounds without the assignment (`steady`); tests turn it off to compare

    option_help: ClassVar[dict[str, str]] = {
        "preempt": "a waiting job preempts only jobs with this many times its remaining time (≥ 1)",
        "min_run": "seconds a started job runs before it may be preempted",
        "value": "rank: heSRPT rank weights; rate: completion rate (Lyra's)",
        "rank_power": "power of the heSRPT rank weights",
        "restart_penalty": "a running job's change pays this many restart costs on its time",
        "launch_penalty": "a waiting job's start pays this many restart costs",
        "horizon": "a change keeps 1 - restart cost / horizon of its value",
        "sia_discount": "also weigh a change by Sia's restart factor",
        "pin": "a job (re)started less than pin x restart cost seconds ago stays on its GPU type",
        "loan_horizon": "seconds ahead the loan forecast looks when closing servers expected back",
    }
    option_choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "value": VALUES,
    }

    def __init__(self, preempt: float = 2.0, min_run: float = 1200.0, value: str = "rank",
                 rank_power: float = 2.0, restart_penalty: float = 4.0, launch_penalty: float = 0.0,
                 horizon: float = 900.0, sia_discount: bool = True, pin: float = 5.0,
                 loan_horizon: float = 3600.0) -> None:
        checks = (("preempt", preempt, 1.0), ("min_run", min_run, 0.0), ("rank_power", rank_power, 0.0),
                  ("restart_penalty", restart_penalty, 0.0), ("launch_penalty", launch_penalty, 0.0),
                  ("pin", pin, 0.0))
        for opt, val, least in checks:
            if not val >= least:
                raise ValueError(f"{opt}={val!r}: must be ≥ {least:g}")
        if value not in VALUES:
            raise ValueError(f"value={value!r}: known {', '.join(VALUES)}")
        if not horizon > 0:
            raise ValueError(f"horizon={horizon!r}: must be > 0 seconds")
        self.preempt, self.min_run = preempt, min_run
        self.rule = ValueRule(value, rank_power, restart_penalty, launch_penalty, horizon, sia_discount, pin)
        if not loan_horizon >= 0:
            raise ValueError(f"loan_horizon={loan_horizon!r}: must be ≥ 0 seconds")
        self.loans = LoanWatch(loan_horizon)
        self.belief = LengthBelief()
        self.builder = CandidateBuilder(RateTables(), self.belief)
        # running jobs' (attained GPU-seconds, when, GPUs given) as of the last round: their length at on_finish
        self._attained: dict[str, tuple[float, float, int]] = {}
        self._moved: dict[str, float] = {}  # when this policy last gave a running job other GPUs

    # ------------------------------------------------------------------ hooks
    def on_finish(self, job_id: str, now: float) -> None:
        self._moved.pop(job_id, None)
        seen = self._attained.pop(job_id, None)
        if seen is not None:
            attained, at, gpus = seen
            self.belief.observe(attained + max(now - at, 0.0) * gpus)

    def state_dict(self) -> dict[str, Any]:
        return {"belief": self.belief.state_dict(), "attained": dict(self._attained), "moved": dict(self._moved),
                "loans": self.loans.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.belief.load_state_dict(state.get("belief", {}))
        self.loans.load_state_dict(state.get("loans", {}))
        self._moved = {str(k): float(v) for k, v in state.get("moved", {}).items()}
        self._attained = {str(k): (float(v[0]), float(v[1]), int(v[2])) for k, v in state.get("attained", {}).items()}

    # ------------------------------------------------------------------ round
    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        lent = self.loans.observe(snap)
        choice = self.loans.reclaim(snap, ctx.rng) if snap.reclaim_demand > 0 else None
        gone = frozenset(choice.servers) if choice else frozenset()
        risky = self.loans.at_risk(snap, gone, lent, ctx.rng) if lent > 0 else frozenset()
        cluster, per_node = capacity_without(snap.nodes, gone)
        for t, idle in _idle_on(snap, risky).items():
            cluster[t] -= idle
        steady = steady_allocations(snap, ctx, self.builder, cluster, per_node) \
            if self.steady_path and not gone and not risky else None
        reasons: dict[str, PendingReason] = {}
        allocs = steady if steady is not None else self._assigned(snap, ctx, gone, risky, cluster, per_node, reasons)
        for jid, a in allocs.items():  # what each running job has had so far, for its length at on_finish
            held = snap.jobs[jid].allocation
            self._attained[jid] = (snap.jobs[jid].attained(snap.now), snap.now, a.gpus)
            if a is not held and not a.same_gpus(held):
                self._moved[jid] = snap.now
        return Decision(allocs, reasons, choice.servers if choice else ())

    def _assigned(self, snap: ClusterSnapshot, ctx: PolicyContext, gone: frozenset[NodeId], risky: frozenset[NodeId],
                  cluster: dict[str, int], per_node: dict[str, int], reasons: dict[str, PendingReason]
                  ) -> dict[str, Allocation]:
        """The full round (module docstring, steps 1–5); a reason for every job left without GPUs."""
        cands = self.builder.build(snap, ctx, _survivors(snap, gone), cluster, per_node, self._moved)
        reasons.update({c.job_id: PendingReason.INFEASIBLE for c in cands if not c.times or not _fits_ever(c, cluster)})
        usable = [c for c in cands if c.job_id not in reasons]
        keep = protected(usable, snap.now, self.preempt, self.min_run)
        problem = build_problem(usable, cluster, keep, self.rule, snap.now)
        return self._allocations(snap, usable, problem, solve(problem), gone, risky, reasons)

    def _allocations(self, snap: ClusterSnapshot, cands: list[Candidate], problem: Problem, answer: Assignment,
                     gone: frozenset[NodeId], closed: frozenset[NodeId], reasons: dict[str, PendingReason]
                     ) -> dict[str, Allocation]:
        """Placements and batches of the assigned jobs; a reason for every job left without GPUs."""
        kept: dict[str, Placement] = {}
        wanted: list[tuple[str, str, int, Placement]] = []
        chosen: dict[str, tuple[Candidate, str, int]] = {}
        used = dict.fromkeys(problem.types, 0)
        for c, ti, k in zip(cands, answer.gpu_type.tolist(), answer.gpus.tolist(), strict=True):
            if ti < 0:
                continue
            t = problem.types[ti]
            used[t] += k
            chosen[c.job_id] = (c, t, k)
            if t == c.cur_type and k == c.cur_gpus and not c.disturbed:
                kept[c.job_id] = c.placement
            else:
                wanted.append((c.job_id, t, k, c.placement))
        placed = place_all(snap.nodes, gone, kept, wanted, closed)
        allocs: dict[str, Allocation] = {}
        for jid, (c, t, k) in chosen.items():
            p = placed.get(jid)
            if p:
                allocs[jid] = _allocation(c, t, k, p, self.builder)
            else:
                reasons[jid] = PendingReason.PLACEMENT
        left = {t: cap - used[t] for t, cap in zip(problem.types, problem.capacity, strict=True)}
        for c in cands:
            if c.job_id not in chosen:
                reasons[c.job_id] = _waiting(c, left)
        return allocs


def _allocation(c: Candidate, t: str, k: int, p: Placement, builder: CandidateBuilder) -> Allocation:
    """The job's allocation on placement `p` at the best batch for its shape; the very object it holds when
    nothing changes (the engine then skips it)."""
    view, app = c.view, c.app
    batch: int | None = None
    if app is not None:
        shape = tuple(g for _, g in p)
        if p == c.placement:
            batch = int(c.batches[t][k])
        else:
            e = min(view.epoch, app.max_epochs - 1)
            batch = int(builder.tables.shape_rates(app, t, shape)[1][e])
        batch = batch or None
    return allocation_at(view, p, batch)


def _waiting(c: Candidate, left: dict[str, int]) -> PendingReason:
    if c.view.allocation.gpus:
        return PendingReason.PREEMPTED
    room = any(left.get(t, 0) >= c.lo for t in c.times)
    return PendingReason.NOT_SELECTED if room else PendingReason.RESOURCES


def _idle_on(snap: ClusterSnapshot, servers: frozenset[NodeId]) -> dict[str, int]:
    """Free GPUs per type on `servers` now (they take no new GPUs: `loans.LoanWatch.at_risk`)."""
    if not servers:
        return {}
    used: dict[NodeId, int] = {}
    for v in snap.running_jobs().values():
        for n, g in v.allocation.placement:
            if n in servers:
                used[n] = used.get(n, 0) + g
    out: dict[str, int] = {}
    for n in snap.nodes:
        if n.node_id in servers:
            out[n.gpu_type] = out.get(n.gpu_type, 0) + max(n.num_gpus - used.get(n.node_id, 0), 0)
    return out


def _fits_ever(c: Candidate, cluster: dict[str, int]) -> bool:
    return any(cluster.get(t, 0) >= c.lo for t in c.times)




def _survivors(snap: ClusterSnapshot, gone: frozenset[NodeId]) -> dict[str, tuple[tuple[NodeId, int], ...]]:
    """Placements of the running jobs that lose GPUs to the returned servers: what they keep."""
    if not gone:
        return {}
    out: dict[str, tuple[tuple[NodeId, int], ...]] = {}
    for jid, v in snap.running_jobs().items():
        p = v.allocation.placement
        if any(n in gone for n, _ in p):
            out[jid] = tuple((n, g) for n, g in p if n not in gone)
    return out
