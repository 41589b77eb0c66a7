"""JABAS auto-scaling estimator (jabas.md §2(c), §7 auto-scaling vectors) and cost model."""

from __future__ import annotations

import pytest

from elastisched.models.iidp.profiles import load_cluster_info, load_jabas_resnet50
from elastisched.models.iidp.release import IIDPModel
from elastisched.policies.jabas.autoscale import (
    best_server_set,
    candidate_server_sets,
    epoch_cost,
    estimate_epoch_time,
    gpu_price_per_hour,
)

IMAGENET = 1_281_167


def _traj(kind: str) -> list[int]:
    n = (IMAGENET // 256) // 100
    if kind == "flat":
        return [256] * (n + 1)
    out, g = [256], 256.0
    for _ in range(n):
        g = min(g * 1.1, 2048.0)
        out.append(round(g))
    return out


@pytest.fixture(scope="module")
def model() -> IIDPModel:
    return IIDPModel.from_profile(load_jabas_resnet50())


@pytest.fixture(scope="module")
def nodes():
    s = {x.name: x for x in load_cluster_info()}
    return s["node0"], s["node1"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("flat", {("node0",): 1036, ("node1",): 1596, ("node0", "node1"): 858}),
     ("grow", {("node0",): 975, ("node1",): 1507, ("node0", "node1"): 699})],
)
def test_autoscaling_vectors(model, nodes, kind, expected):
    cands = candidate_server_sets(list(nodes))
    assert [tuple(s.name for s in c) for c in cands] == [("node0",), ("node1",), ("node0", "node1")]
    d = best_server_set(model, cands, _traj(kind), current_gbs=256, current_lbs=32, dataset_size=IMAGENET,
                        interval=100, sync_step=0, upper_bound=32768)
    assert d is not None
    for e in d.estimates:
        assert e.time_s == pytest.approx(expected[e.servers], rel=0.01), e.servers
    assert d.best.servers == ("node0", "node1")
    assert d.config is not None and d.config.gbs == 256 and d.config.lbs == 32


def test_epoch_covers_dataset(model, nodes):
    e = estimate_epoch_time(model, list(nodes), _traj("grow"), current_gbs=256, current_lbs=32,
                            dataset_size=IMAGENET, upper_bound=32768)
    assert e.feasible and e.gbs_trajectory[0] == 256
    # a growing batch finishes the epoch before the forecast runs out; every point but the last is p steps
    assert len(e.gbs_trajectory) < len(_traj("grow"))
    assert 100 * sum(e.gbs_trajectory[:-1]) < IMAGENET <= 100 * sum(e.gbs_trajectory)
    assert all(g % 2 == 0 for g in e.gbs_trajectory)


def test_infeasible_candidate_is_inf(model, nodes):
    # current GBS 128 = 4 workers at LBS 32 cannot run on 8 GPUs
    e = estimate_epoch_time(model, list(nodes), [128, 128], current_gbs=128, current_lbs=32,
                            dataset_size=10_000, upper_bound=32768)
    assert not e.feasible


def test_candidate_sets_of_9_server_cluster():
    cl = load_cluster_info()
    assert len(candidate_server_sets(cl)) == 2**9 - 1
    halves = candidate_server_sets(cl[:2], alloc_unit=2)
    assert len(halves) == 3 * 3 - 1  # 0, 2 or 4 GPUs of each server
    with pytest.raises(ValueError):
        candidate_server_sets(cl[:1], alloc_unit=3)


def test_price_model():
    assert gpu_price_per_hour(14.13) == pytest.approx(3.06)
    assert gpu_price_per_hour(35.58) == pytest.approx(7.70, abs=0.01)
    assert gpu_price_per_hour(5.3) == pytest.approx(1.15, abs=0.01)
    n0 = load_cluster_info()[0]
    assert epoch_cost([n0], 3600) == pytest.approx(4 * 3.06)


def test_cost_objective_picks_cheaper_set(model, nodes):
    cands = candidate_server_sets(list(nodes))
    kw = dict(current_gbs=256, current_lbs=32, dataset_size=IMAGENET, upper_bound=32768)
    by_time = best_server_set(model, cands, _traj("flat"), **kw)
    by_cost = best_server_set(model, cands, _traj("flat"), objective="cost", **kw)
    assert by_cost.best.cost_usd <= by_time.best.cost_usd
    assert by_cost.best.cost_usd == min(e.cost_usd for e in by_cost.estimates)
    slack = best_server_set(model, cands, _traj("flat"), objective="cost", time_slack=0.0, **kw)
    assert slack.best.servers == by_time.best.servers
    with pytest.raises(ValueError):
        best_server_set(model, cands, _traj("flat"), objective="money", **kw)
