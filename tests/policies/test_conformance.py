"""One conformance suite every registered policy passes (hypothesis-generated snapshots).

Checked for each policy: node capacity, per-job GPU bounds and GPU types (via the engine's invariant
check), determinism for a seed, the snapshot is not mutated, and a state_dict round trip reproduces the
same decisions.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView
from elastisched.engine import Engine
from elastisched.engine.invariants import check
from elastisched.engine.placer import place
from elastisched.policies.base import PolicyContext, make_policy, registered

APPS = ("cifar10", "ncf", "bert", "deepspeech2", "yolov3", "imagenet")
POLICIES = sorted(registered())


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    types = draw(st.lists(st.sampled_from(["t4", "t4", "v100"]), min_size=1, max_size=4))
    nodes = tuple(NodeView(f"n{i}", t, draw(st.sampled_from([1, 2, 4, 8])), index=i) for i, t in enumerate(types))
    cap = sum(n.num_gpus for n in nodes)
    n_jobs = draw(st.integers(0, 12))
    jobs: dict[str, JobView] = {}
    used = {n.node_id: 0 for n in nodes}
    for k in range(n_jobs):
        app = draw(st.sampled_from(APPS))
        g = draw(st.integers(1, max(1, min(cap, 8))))
        elastic = draw(st.booleans())
        gpu_types = draw(st.sampled_from([(), ("t4",)]))
        spec = JobSpec(f"j{k}", float(k * 10), app, g, {"cifar10": 128, "ncf": 256, "bert": 12, "deepspeech2": 20,
                                                        "yolov3": 8, "imagenet": 200}[app] * g,
                       min_gpus=1 if elastic else g, max_gpus=2 * g if elastic else g, elastic=elastic,
                       gpu_types=gpu_types)
        # maybe running on a node with room
        alloc = Allocation()
        if draw(st.booleans()):
            for n in nodes:
                if cap and used[n.node_id] + g <= n.num_gpus and (not gpu_types or n.gpu_type in gpu_types):
                    used[n.node_id] += g
                    alloc = Allocation(((n.node_id, g),))
                    break
        jobs[spec.job_id] = JobView(spec, JobPhase.RUNNING if alloc.gpus else JobPhase.PENDING, alloc,
                                    progress=draw(st.floats(0, 0.9)) * 1000, total_work=1000.0,
                                    attained_service=draw(st.floats(0, 1e5)), updated_at=100.0)
    return ClusterSnapshot(100.0 + n_jobs * 10, nodes, jobs)


def _ctx(models: object, seed: int = 0) -> PolicyContext:
    return PolicyContext(perf=models, rng=np.random.default_rng(seed), seed=seed)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(snap=snapshots())
def test_policy_conformance(name: str, snap: ClusterSnapshot, models: object) -> None:
    before = {k: repr(v) for k, v in snap.jobs.items()}
    pol = make_policy(name)
    for spec_view in snap.jobs.values():
        hook = getattr(pol, "on_submit", None)
        if hook:
            hook(spec_view.spec, snap.now)
    state0 = copy.deepcopy(pol.state_dict())
    d1 = pol.schedule(snap, _ctx(models))
    placed = place(d1.allocations, snap)
    check(placed, snap, pol.elastic)  # capacity, bounds, GPU types
    assert {k: repr(v) for k, v in snap.jobs.items()} == before, "policy mutated the snapshot"
    # determinism + state round trip: a fresh policy restored to the same state decides the same
    pol2 = make_policy(name)
    pol2.load_state_dict(copy.deepcopy(state0))
    d2 = pol2.schedule(snap, _ctx(models))
    assert dict(d1.allocations) == dict(d2.allocations)
    for jid in d1.allocations:
        assert jid in snap.jobs


@pytest.mark.parametrize("name", POLICIES)
def test_policy_has_description_and_engine_round(name: str, models: object) -> None:
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
