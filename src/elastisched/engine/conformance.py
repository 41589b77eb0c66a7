"""The conformance checks any policy must pass, built in or plugged in (`elastisched policies check SPEC`).

The same contract as tests/policies/test_conformance.py (which drives the built-ins with hypothesis), on
seeded random snapshots so that it runs without test dependencies: mixed GPU types (T4, V100), training and
loaned servers, running jobs over several servers, jobs that can never fit, models on the job views or only in
`ctx.perf`, reclaim demands. Each example is one round of a fresh policy that was told of every job
(`on_submit`), then placed and checked the way the engine does before anything acts on a decision; a policy
that promises rounds the simulator may skip (`idle_without_pending`, `idle_while_blocked`) is held to the promise
on the same snapshots. A failure names the invariant it breaks, the example and the message.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from elastisched.core.errors import InvariantViolation
from elastisched.core.types import (
    Allocation,
    ClusterSnapshot,
    Decision,
    JobPhase,
    JobSpec,
    JobView,
    NodeView,
    PendingReason,
    Pool,
)
from elastisched.engine.invariants import check
from elastisched.engine.loop import Engine, diff, leaves_queue_blocked
from elastisched.engine.placer import place
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, PolicyContext

BATCH = {"cifar10": 128, "ncf": 256, "bert": 12, "deepspeech2": 20, "yolov3": 8, "imagenet": 200}


@dataclass(frozen=True)
class Failure:
    invariant: str
    example: int
    message: str


def _nodes(rng: np.random.Generator) -> tuple[NodeView, ...]:
    train = rng.choice(["t4", "t4", "v100"], size=int(rng.integers(1, 5)))
    loaned = rng.choice(["t4", "v100"], size=int(rng.integers(0, 4)))
    sizes = (1, 2, 4, 8)
    nodes = tuple(NodeView(f"n{i}", str(t), int(rng.choice(sizes)), index=i) for i, t in enumerate(train))
    return nodes + tuple(NodeView(f"inf{i}", str(t), int(rng.choice(sizes)), Pool.LOANABLE, len(nodes) + i)
                         for i, t in enumerate(loaned))


def _running(rng: np.random.Generator, nodes: tuple[NodeView, ...], used: dict[str, int], gpus: int,
             types: tuple[str, ...]) -> Allocation:
    """`gpus` free GPUs of one allowed type, maybe over several servers; no allocation if they are not free."""
    kinds = sorted({n.gpu_type for n in nodes if not types or n.gpu_type in types})
    if not kinds:
        return Allocation()
    t = kinds[int(rng.integers(len(kinds)))]
    cand = [n for n in nodes if n.gpu_type == t and used[n.node_id] < n.num_gpus]
    left, out = gpus, []
    for i in rng.permutation(len(cand)):
        n = cand[int(i)]
        k = min(left, n.num_gpus - used[n.node_id], int(rng.integers(1, gpus + 1)))
        out.append((n.node_id, k))
        left -= k
        if not left:
            break
    if left:
        return Allocation()
    for n_id, k in out:
        used[n_id] += k
    return Allocation(tuple(out))


def snapshot(rng: np.random.Generator, models: PerfModels, elastic_policy: bool) -> tuple[ClusterSnapshot, bool]:
    """A random snapshot, and whether `ctx.perf` carries the models (else only the job views do)."""
    nodes = _nodes(rng)
    perf_in_ctx = bool(rng.integers(2))
    used = {n.node_id: 0 for n in nodes}
    jobs: dict[str, JobView] = {}
    apps = sorted(BATCH)
    for k in range(int(rng.integers(0, 13))):
        app = apps[int(rng.integers(len(apps)))]
        g = int(rng.integers(1, 13))  # may exceed every type's capacity: the job can never fit
        elastic = bool(rng.integers(2))
        lo = int(rng.integers(1, g + 1)) if elastic else g
        types = ((), ("t4",), ("v100",))[int(rng.integers(3))]
        spec = JobSpec(f"j{k}", float(k * 10), app, g, BATCH[app] * g, min_gpus=lo, max_gpus=2 * g if elastic else g,
                       elastic=elastic, gpu_types=types)
        alloc = Allocation()
        if rng.integers(2):
            size = int(rng.integers(lo, 2 * g + 1)) if elastic_policy and elastic else g
            alloc = _running(rng, nodes, used, size, types)
        model = models.app(app) if not perf_in_ctx or rng.integers(2) else None
        jobs[spec.job_id] = JobView(spec, JobPhase.RUNNING if alloc.gpus else JobPhase.PENDING, alloc,
                                    progress=float(rng.uniform(0, 0.9)) * 1000, total_work=1000.0,
                                    attained_service=float(rng.uniform(0, 1e5)), updated_at=100.0,
                                    epoch=int(rng.integers(0, 4)), model=model)
    n_loaned = sum(n.pool is Pool.LOANABLE for n in nodes)
    demand = int(rng.integers(0, n_loaned + 1)) if n_loaned and rng.integers(2) else 0
    return ClusterSnapshot(100.0 + len(jobs) * 10, nodes, jobs, reclaim_demand=demand), perf_in_ctx


def _invariant_of(message: str) -> str:
    if "capacity" in message:
        return "capacity: no server gets more GPUs than it has"
    if "bounds" in message or "must give" in message or "non-positive" in message:
        return "GPU bounds: each job within its min..max GPUs (exactly its request for a non-elastic policy)"
    if "GPU type" in message:
        return "GPU types: a job only on the types it allows"
    return "known jobs and servers: allocations name active jobs and existing servers"


def _reclaim_error(d: Decision, snap: ClusterSnapshot, placed: dict[str, Allocation]) -> str | None:
    if snap.reclaim_demand == 0:
        return f"reclaim {d.reclaim} chosen without a demand" if d.reclaim else None
    if not d.reclaim:
        return None  # the policy does not choose: the engine's fallback does
    loaned = {n.node_id for n in snap.nodes if n.pool is Pool.LOANABLE}
    if len(d.reclaim) != snap.reclaim_demand or len(set(d.reclaim)) != len(d.reclaim):
        return f"reclaim {d.reclaim}: {snap.reclaim_demand} distinct servers demanded"
    if not set(d.reclaim) <= loaned:
        return f"reclaim returns training server(s) {sorted(set(d.reclaim) - loaned)}"
    hit = [j for j, a in placed.items() if set(a.nodes) & set(d.reclaim)]
    return f"job(s) {hit} placed on returned servers" if hit else None


def _key(d: Decision) -> tuple[object, ...]:
    return dict(d.allocations), dict(d.reasons), tuple(d.reclaim)


def _one(make: Callable[[], Policy], snap: ClusterSnapshot, models: PerfModels, perf_in_ctx: bool, seed: int,
         example: int) -> list[Failure]:
    def fail(invariant: str, message: str) -> list[Failure]:
        return [Failure(invariant, example, message)]

    ctx_models = models if perf_in_ctx else None

    before = {k: repr(v) for k, v in snap.jobs.items()}
    pol = make()
    for view in snap.jobs.values():
        pol.on_submit(view.spec, snap.now)
    state = copy.deepcopy(pol.state_dict())
    try:
        json.dumps(state)
    except (TypeError, ValueError) as e:
        return fail("state_dict is JSON-able (the live service saves it)", str(e))
    try:
        d = pol.schedule(snap, PolicyContext(perf=ctx_models, rng=np.random.default_rng(seed), seed=seed))
    except Exception as e:  # a broken policy may raise anything
        return fail("schedule returns a Decision", f"{type(e).__name__}: {e}")
    if not isinstance(d, Decision):
        return fail("schedule returns a Decision", f"got {type(d).__name__}")
    if {k: repr(v) for k, v in snap.jobs.items()} != before:
        return fail("the snapshot is not mutated", "a job view changed during schedule")
    unknown = sorted(set(d.allocations) - set(snap.jobs))
    if unknown:
        return fail("known jobs and servers: allocations name active jobs and existing servers",
                    f"allocates unknown job(s) {unknown[:5]}")
    try:
        placed = place(d.allocations, snap)
        check(placed, snap, pol.elastic)
    except InvariantViolation as e:
        return fail(_invariant_of(str(e)), str(e))
    bad = [(j, r) for j, r in d.reasons.items() if not isinstance(r, PendingReason) or j in placed]
    if bad:
        return fail("reasons: a PendingReason, only for jobs left without GPUs", f"{bad[:3]}")
    why = _reclaim_error(d, snap, dict(placed))
    if why:
        return fail("reclaim: exactly the demanded loaned servers, none without a demand, no job on them", why)
    again = make()
    again.load_state_dict(copy.deepcopy(state))
    d2 = again.schedule(snap, PolicyContext(perf=ctx_models, rng=np.random.default_rng(seed), seed=seed))
    if _key(d) != _key(d2):
        return fail("determinism: a fresh policy restored to the same state decides the same", "decisions differ")
    why = _idle_error(pol, d, snap, state)
    if why:
        return fail("idle_without_pending: a round with no job pending decides nothing", why)
    why = _blocked_error(pol, d, dict(placed), snap, models, ctx_models, seed)
    return fail("idle_while_blocked: behind a job left waiting for GPUs, arrivals alone change nothing", why) \
        if why else []


def _idle_error(pol: Policy, d: Decision, snap: ClusterSnapshot, state_before: dict[str, object]) -> str | None:
    """What breaks the promise of `Policy.idle_without_pending` on this snapshot (None: kept, or not promised,
    or a job is pending or servers are reclaimed): every running job keeps its allocation, no reason, no
    hint, no new state."""
    if not pol.idle_without_pending or snap.reclaim_demand or any(not v.allocation.gpus for v in snap.jobs.values()):
        return None
    if dict(d.allocations) != {j: v.allocation for j, v in snap.jobs.items()}:
        return "a running job's allocation changed"
    if d.reasons or d.reclaim or d.next_round_at is not None:
        return f"reasons {dict(d.reasons)}, reclaim {d.reclaim}, hint {d.next_round_at}"
    return "its state changed" if pol.state_dict() != state_before else None


def _blocked_error(pol: Policy, d: Decision, placed: dict[str, Allocation], snap: ClusterSnapshot,
                   models: PerfModels, ctx_models: PerfModels | None, seed: int) -> str | None:
    """What breaks the promise of `Policy.idle_while_blocked` (None: kept, or not put to the test here). The
    simulator skips the rounds after one that left a job waiting for RESOURCES and only launched jobs, until
    GPUs are freed (`sim.idle`): so the next round, with the decision applied and only new jobs arrived (one
    GPU each, of any type: backfilling would start them), must keep every running job as it is, start none,
    give no job another reason, no hint, and leave the state as `on_submit` made it."""
    if snap.reclaim_demand or d.reclaim or not leaves_queue_blocked(pol, d, diff(snap, placed)):
        return None
    now = snap.now + 1.0
    jobs = {j: replace(v, allocation=placed.get(j, Allocation()),
                       phase=JobPhase.RUNNING if j in placed else JobPhase.PENDING) for j, v in snap.jobs.items()}
    arrived = [JobSpec(f"new{k}", now, "cifar10", 1, BATCH["cifar10"]) for k in range(2)]
    for spec in arrived:
        jobs[spec.job_id] = JobView(spec, JobPhase.PENDING, Allocation(), model=models.app("cifar10"))
        pol.on_submit(spec, now)
    new = {spec.job_id for spec in arrived}
    after = ClusterSnapshot(now, snap.nodes, jobs)
    state = copy.deepcopy(pol.state_dict())
    ctx = PolicyContext(perf=ctx_models, rng=np.random.default_rng(seed), seed=seed)
    try:
        d2 = pol.schedule(after, ctx)
        placed2 = place(d2.allocations, after)
    except Exception as e:  # a broken policy may raise anything
        return f"the next round raised {type(e).__name__}: {e}"
    moved = sorted(j for j, v in jobs.items() if (placed2.get(j) or Allocation()).placement != v.allocation.placement)
    if moved:
        return f"job(s) {moved[:5]} started, moved or stopped"
    changed = {j: r for j, r in d2.reasons.items()
               if r is not d.reasons.get(j) and not (j in new and r is PendingReason.PRIORITY)}
    if changed or d2.reclaim or d2.next_round_at is not None:
        return f"reasons {changed}, reclaim {d2.reclaim}, hint {d2.next_round_at}"
    return "its state changed" if pol.state_dict() != state else None


def idle_cluster_round(make: Callable[[], Policy], models: PerfModels) -> list[Failure]:
    """An engine round on an idle cluster with one job must launch it."""
    nodes = (NodeView("a", "t4", 4, index=0), NodeView("b", "t4", 4, index=1))
    spec = JobSpec("j0", 0.0, "cifar10", 2, 256)
    view = JobView(spec, JobPhase.PENDING, Allocation(), model=models.app("cifar10"))
    snap = ClusterSnapshot(0.0, nodes, {"j0": view})
    try:
        pol = make()
        pol.on_submit(spec, 0.0)
        res = Engine(pol, PolicyContext(perf=models)).round(snap)
    except Exception as e:  # a broken policy may raise anything
        return [Failure("an engine round runs", -1, f"{type(e).__name__}: {e}")]
    got = res.allocations.get("j0")
    if got is None or got.gpus < 1:
        return [Failure("work conservation: an idle cluster runs its only job", -1, "job j0 got no GPUs")]
    return []


def run(make: Callable[[], Policy], models: PerfModels, examples: int = 60, seed: int = 0) -> list[Failure]:
    """Every check on `examples` seeded snapshots; the failures (first one per invariant)."""
    pol = make()
    failures = idle_cluster_round(make, models)
    seen = {f.invariant for f in failures}
    for i in range(examples):
        rng = np.random.default_rng([seed, i])
        snap, perf_in_ctx = snapshot(rng, models, bool(pol.elastic))
        for f in _one(make, snap, models, perf_in_ctx, seed, i):
            if f.invariant not in seen:
                seen.add(f.invariant)
                failures.append(f)
    return failures


__all__ = ["Failure", "run", "snapshot"]
