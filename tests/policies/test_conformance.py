"""One conformance suite every registered policy passes (hypothesis-generated snapshots).

The generated clusters mix GPU types (T4, V100), have training servers and servers on loan from the
inference cluster (`Pool.LOANABLE`), running jobs spread over several servers (loaned ones included), jobs
that can never fit, jobs whose model is on their `JobView` or only in `ctx.perf`, unprofiled applications
(for policies with a model-free fallback) and reclaim demands (`reclaim_demand` up to the loaned servers).

Checked for each policy: node capacity, per-job GPU bounds and GPU types (through the engine's placer and
invariant check); the snapshot is not mutated; determinism for a seed (a fresh policy restored to the same
state decides the same, reasons and reclaim included, and so it does when the snapshot carries the
aggregates the simulator passes: `running`, `free`, `node_used`); the models on the job views are the ones used (the
same models given only through `ctx.perf` decide the same); reasons are `PendingReason` members given only to
jobs left without GPUs (a job absent with no reason waits for PRIORITY); `Decision.reclaim` is empty without
a demand, and a policy that chooses returns exactly the demanded number of distinct loaned servers, never a
training server, and places no job on them. For the rule-based policies that must not block on them, jobs
that can never fit are INFEASIBLE and nothing else is (fifo and tiresias stop their round at a blocked head or
a full cluster: the jobs after that may also have no reason, i.e. PRIORITY). The suite iterates over
`registered()`, so a new policy is covered when it registers.
"""

from __future__ import annotations

import copy
import dataclasses
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from elastisched.engine import Engine
from elastisched.engine.invariants import check
from elastisched.engine.placer import place, place_with_free
from elastisched.models import PerfModels
from elastisched.policies.base import Policy, PolicyContext, make_policy, registered

APPS = ("cifar10", "ncf", "bert", "deepspeech2", "yolov3", "imagenet")
BATCH = {"cifar10": 128, "ncf": 256, "bert": 12, "deepspeech2": 20, "yolov3": 8, "imagenet": 200}
UNPROFILED = "mystery"  # an application no profile covers
POLICIES = sorted(registered())
EXAMPLES = 60  # generated snapshots per policy


# policies whose round stops at a blocked head (fifo) or a full cluster (tiresias) to stay O(running jobs)
STOPS_EARLY = ("fifo", "tiresias")


def _infeasible_need(name: str, spec: JobSpec) -> int | None:
    """Fewest GPUs `name` would start `spec` on, for the policies that must mark jobs that can never fit as
    INFEASIBLE (issue 11: under fifo an unplaceable head blocked everyone); None for the others."""
    if name in ("fifo", "srtf", "tiresias"):
        return spec.num_gpus
    if name == "lyra":
        return spec.min_gpus if spec.elastic else spec.num_gpus
    if name == "optimus":  # every job is malleable; an elastic one starts at min_gpus
        return spec.min_gpus if spec.elastic else 1
    return None


def _place_running(draw: st.DrawFn, nodes: tuple[NodeView, ...], used: dict[str, int], gpus: int,
                   types: tuple[str, ...]) -> Allocation:
    """Put a running job of `gpus` GPUs on free GPUs of one allowed type, maybe over several servers."""
    kinds = sorted({n.gpu_type for n in nodes if not types or n.gpu_type in types})
    if not kinds:
        return Allocation()
    t = draw(st.sampled_from(kinds))
    cand = [n for n in nodes if n.gpu_type == t and used[n.node_id] < n.num_gpus]
    if sum(n.num_gpus - used[n.node_id] for n in cand) < gpus:
        return Allocation()
    left, out = gpus, []
    for n in draw(st.permutations(cand)):
        k = min(left, n.num_gpus - used[n.node_id], draw(st.integers(1, gpus)))
        out.append((n.node_id, k))
        left -= k
        if not left:
            break
    if left:
        return Allocation()
    for n, k in out:
        used[n] += k
    return Allocation(tuple(out))


@st.composite
def snapshots(draw: st.DrawFn, models: PerfModels, elastic_policy: bool, unprofiled: bool
              ) -> tuple[ClusterSnapshot, bool]:
    """A snapshot and whether `ctx.perf` should carry the models (else only the job views do)."""
    train = draw(st.lists(st.sampled_from(["t4", "t4", "v100"]), min_size=1, max_size=4))
    loaned = draw(st.lists(st.sampled_from(["t4", "v100"]), min_size=0, max_size=3))
    nodes = tuple(NodeView(f"n{i}", t, draw(st.sampled_from([1, 2, 4, 8])), index=i) for i, t in enumerate(train))
    nodes += tuple(NodeView(f"inf{i}", t, draw(st.sampled_from([1, 2, 4, 8])), Pool.LOANABLE, len(nodes) + i)
                   for i, t in enumerate(loaned))
    perf_in_ctx = draw(st.booleans())
    used = {n.node_id: 0 for n in nodes}
    jobs: dict[str, JobView] = {}
    for k in range(draw(st.integers(0, 12))):
        app = draw(st.sampled_from((*APPS, UNPROFILED) if unprofiled else APPS))
        g = draw(st.integers(1, 12))  # may exceed every type's capacity: the job can never fit
        elastic = draw(st.booleans())
        lo = draw(st.integers(1, g)) if elastic else g
        spec = JobSpec(f"j{k}", float(k * 10), app, g, BATCH.get(app, 32) * g, min_gpus=lo,
                       max_gpus=2 * g if elastic else g, elastic=elastic,
                       gpu_types=draw(st.sampled_from([(), ("t4",), ("v100",)])))
        alloc = Allocation()
        if draw(st.booleans()):
            size = draw(st.integers(lo, 2 * g)) if elastic_policy and elastic else g
            alloc = _place_running(draw, nodes, used, size, spec.gpu_types)
        model = None
        if app != UNPROFILED and (not perf_in_ctx or draw(st.booleans())):
            model = models.app(app)
        jobs[spec.job_id] = JobView(spec, JobPhase.RUNNING if alloc.gpus else JobPhase.PENDING, alloc,
                                    progress=draw(st.floats(0, 0.9)) * 1000, total_work=1000.0,
                                    attained_service=draw(st.floats(0, 1e5)), updated_at=100.0,
                                    epoch=draw(st.integers(0, 3)), model=model)
    n_loaned = len(loaned)
    demand = draw(st.integers(0, n_loaned)) if n_loaned and draw(st.booleans()) else 0
    return ClusterSnapshot(100.0 + len(jobs) * 10, nodes, jobs, reclaim_demand=demand), perf_in_ctx


def _with_aggregates(snap: ClusterSnapshot) -> ClusterSnapshot:
    """`snap` with the aggregates a body may pass instead of letting them be derived (as the simulator does)."""
    pos = {n.node_id: i for i, n in enumerate(snap.nodes)}
    used = np.zeros(len(snap.nodes), dtype=np.int64)
    for j in snap.jobs.values():
        for n, g in j.allocation.placement:
            used[pos[n]] += g
    used.flags.writeable = False
    running = MappingProxyType({k: v for k, v in snap.jobs.items() if v.allocation.gpus})
    return dataclasses.replace(snap, jobs=MappingProxyType(dict(snap.jobs)), running=running,
                               free=MappingProxyType(snap.free_by_type()), node_used=used)


def _ctx(models: PerfModels | None, seed: int = 0) -> PolicyContext:
    return PolicyContext(perf=models, rng=np.random.default_rng(seed), seed=seed)


def _fresh(name: str, snap: ClusterSnapshot) -> Policy:
    pol = make_policy(name)
    for view in snap.jobs.values():
        pol.on_submit(view.spec, snap.now)
    return pol


def _restored(name: str, state: dict[str, Any]) -> Policy:
    pol = make_policy(name)
    pol.load_state_dict(copy.deepcopy(state))
    return pol


def _key(d: Decision) -> tuple[dict[str, Allocation], dict[str, PendingReason], tuple[str, ...]]:
    return dict(d.allocations), dict(d.reasons), d.reclaim


def _check_reclaim(d: Decision, snap: ClusterSnapshot, placed: dict[str, Allocation]) -> None:
    if snap.reclaim_demand == 0:
        assert d.reclaim == (), "reclaim chosen without a demand"
        return
    if not d.reclaim:
        return  # the policy does not choose: the engine's fallback does
    loaned = {n.node_id for n in snap.nodes if n.pool is Pool.LOANABLE}
    assert len(d.reclaim) == snap.reclaim_demand, (d.reclaim, snap.reclaim_demand)
    assert len(set(d.reclaim)) == len(d.reclaim), f"reclaim repeats a server: {d.reclaim}"
    assert set(d.reclaim) <= loaned, f"reclaim returns a training server: {set(d.reclaim) - loaned}"
    for jid, a in placed.items():
        assert not set(a.nodes) & set(d.reclaim), f"job {jid} placed on returned server(s) {a.nodes}"


def _check_reasons(name: str, d: Decision, snap: ClusterSnapshot, placed: dict[str, Allocation],
                   ctx_models: PerfModels | None) -> None:
    for jid, why in d.reasons.items():
        assert isinstance(why, PendingReason), f"job {jid}: reason {why!r} is not a PendingReason"
        assert jid in snap.jobs and jid not in placed, f"job {jid} has GPUs and a pending reason {why}"
    gone = set(d.reclaim)
    cap: dict[str, int] = {}
    for n in snap.nodes:
        if n.node_id not in gone:
            cap[n.gpu_type] = cap.get(n.gpu_type, 0) + n.num_gpus
    for jid, job in snap.jobs.items():
        need = _infeasible_need(name, job.spec)
        if need is None or job.is_running:
            continue
        types = [t for t in cap if not job.spec.gpu_types or t in job.spec.gpu_types]
        model = job.model if job.model is not None else (
            ctx_models.apps.get(job.spec.application) if ctx_models is not None else None)
        if name == "lyra" and model is not None:  # Lyra runs a job only on types its profile covers
            types = [t for t in types if t in model.gpu_types]
        never = not any(cap[t] >= need for t in types)
        why = d.reasons.get(jid)
        msg = f"job {jid} (needs {need} of {job.spec.gpu_types or 'any'}; cluster {cap}): reason {why}"
        if name in STOPS_EARLY:  # jobs after the round's stop wait for PRIORITY (no reason), even infeasible ones
            assert never if why is PendingReason.INFEASIBLE else (not never or why is None), msg
        else:
            assert never == (why is PendingReason.INFEASIBLE), msg


def _conformance(name: str, data: st.DataObject, models: PerfModels) -> None:
    pol_cls: Any = registered()[name]
    unprofiled = not getattr(pol_cls, "needs_perf_models", False)
    snap, perf_in_ctx = data.draw(snapshots(models, bool(getattr(pol_cls, "elastic", False)), unprofiled))
    ctx_models = models if perf_in_ctx else None
    before = {k: repr(v) for k, v in snap.jobs.items()}
    pol = _fresh(name, snap)
    state0 = copy.deepcopy(pol.state_dict())
    d1 = pol.schedule(snap, _ctx(ctx_models))
    placed = place(d1.allocations, snap)
    check(placed, snap, pol.elastic)  # capacity, bounds, GPU types
    assert {k: repr(v) for k, v in snap.jobs.items()} == before, "policy mutated the snapshot"
    assert set(d1.allocations) <= set(snap.jobs)
    _check_reclaim(d1, snap, placed)
    _check_reasons(name, d1, snap, placed, ctx_models)
    # determinism + state round trip: a fresh policy restored to the same state decides the same
    assert _key(d1) == _key(_restored(name, state0).schedule(snap, _ctx(ctx_models)))
    # and so it does (one of the two per example, to keep rounds per example at three) when the snapshot
    # carries the engine aggregates the simulator passes, or when the models come only through `ctx.perf`
    # (no view carries one): the job's own model is the one used
    if data.draw(st.booleans(), label="aggregates (else models only in ctx.perf)"):
        agg = _with_aggregates(snap)
        d3 = _restored(name, state0).schedule(agg, _ctx(ctx_models))
        assert _key(d1) == _key(d3), "decision changed when the snapshot carries running/free/node_used"
        assert dict(place_with_free(d3.allocations, agg)[0]) == dict(placed)
    else:
        bare = dataclasses.replace(snap, jobs={k: dataclasses.replace(v, model=None) for k, v in snap.jobs.items()})
        d3 = _restored(name, state0).schedule(bare, _ctx(models))
        assert _key(d1) == _key(d3), "decision changed when the models come from ctx.perf, not the job views"


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_policy_conformance(name: str, data: st.DataObject, models: PerfModels) -> None:
    _conformance(name, data, models)


def test_generator_covers_loans_reclaims_mixed_types_and_infeasible_jobs(models: PerfModels) -> None:
    """The properties above are only as good as the snapshots: the generator must produce every case."""
    seen: dict[str, int] = dict.fromkeys(("loaned_running", "reclaim", "reclaim_hits_running", "mixed",
                                          "infeasible", "split", "view_only", "unprofiled", "min_gpus>1"), 0)

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        snap, perf_in_ctx = data.draw(snapshots(models, True, True))
        loaned = {n.node_id for n in snap.nodes if n.pool is Pool.LOANABLE}
        cap = snap.capacity_by_type()
        allocs = [j.allocation for j in snap.jobs.values()]
        seen["loaned_running"] += any(set(a.nodes) & loaned for a in allocs)
        seen["reclaim"] += snap.reclaim_demand > 0
        seen["reclaim_hits_running"] += snap.reclaim_demand > 0 and any(set(a.nodes) & loaned for a in allocs)
        seen["min_gpus>1"] += any(j.spec.elastic and j.spec.min_gpus > 1 for j in snap.jobs.values())
        seen["mixed"] += len(cap) > 1
        seen["split"] += any(len(a.placement) > 1 for a in allocs)
        seen["view_only"] += not perf_in_ctx and any(j.model is not None for j in snap.jobs.values())
        seen["unprofiled"] += any(j.spec.application == UNPROFILED for j in snap.jobs.values())
        seen["infeasible"] += any(not any(c >= j.spec.num_gpus for t, c in cap.items()
                                          if not j.spec.gpu_types or t in j.spec.gpu_types)
                                  for j in snap.jobs.values())
    run()
    assert all(v > 0 for v in seen.values()), seen


@pytest.mark.parametrize("name", ["fifo", "srtf", "tiresias", "optimus", "lyra"])
def test_a_job_that_can_never_fit_does_not_block_the_queue(name: str, models: PerfModels) -> None:
    """Issue 11 item 3: an unplaceable head (16 GPUs on an 8-GPU cluster, or a type the cluster lacks) is
    INFEASIBLE; the jobs behind it run."""
    nodes = (NodeView("a", "t4", 4, index=0), NodeView("b", "t4", 4, index=1))
    specs = [JobSpec("big", 0.0, "cifar10", 16, 128 * 16, min_gpus=16, max_gpus=16),
             JobSpec("v100", 1.0, "cifar10", 1, 128, gpu_types=("v100",)),
             JobSpec("small", 2.0, "cifar10", 2, 256, min_gpus=2, max_gpus=2)]
    snap = ClusterSnapshot(10.0, nodes, {s.job_id: JobView(s, JobPhase.PENDING, Allocation()) for s in specs})
    pol = _fresh(name, snap)
    d = pol.schedule(snap, _ctx(models))
    if name == "optimus":  # Optimus starts every inelastic job at one GPU, so only the type is infeasible
        assert "big" in d.allocations
    else:
        assert d.reasons["big"] is PendingReason.INFEASIBLE and "big" not in d.allocations
    assert d.reasons["v100"] is PendingReason.INFEASIBLE and "v100" not in d.allocations
    assert "small" in d.allocations


@pytest.mark.parametrize("name", POLICIES)
def test_policy_has_description_and_engine_round(name: str, models: PerfModels) -> None:
    pol = make_policy(name)
    assert pol.description and pol.name == name
    nodes = (NodeView("a", "t4", 4, index=0), NodeView("b", "t4", 4, index=1))
    spec = JobSpec("j0", 0.0, "cifar10", 2, 256)
    snap = ClusterSnapshot(0.0, nodes, {"j0": JobView(spec, JobPhase.PENDING, Allocation())})
    res = Engine(pol, _ctx(models)).round(snap)
    assert res.allocations["j0"].gpus >= 1  # an idle cluster runs the only job
    assert [a.kind.value for a in res.actions] == ["launch"]


def test_unknown_policy_names_known_ones() -> None:
    with pytest.raises(KeyError, match=r"known: .*tiresias"):
        make_policy("nope")
