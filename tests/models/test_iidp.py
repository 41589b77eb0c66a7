"""IIDP performance model and profile loader (jabas.md §2(d), §7 unit-time vectors)."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.models.iidp.profiles import (
    derive_cluster_types,
    derive_gpu_type,
    load_cluster_info,
    load_jabas_resnet50,
)
from elastisched.models.iidp.release import IIDPModel, LinearFit, recommend_weight_sync

V100 = "Tesla V100-PCIE-16GB"
P100 = "Tesla P100-PCIE-16GB"

# jabas.md §7: server unit iteration time (s), overlap, cluster {node0, node1}: (type, LBS, m) -> a=0,1,3
UNIT_VECTORS = [
    (V100, 32, 1, (0.1154, 0.2181, 0.4236)),
    (V100, 32, 2, (0.2090, 0.3989, 0.7788)),
    (V100, 32, 3, (0.2978, 0.5699, 1.1143)),
    (P100, 32, 1, (0.1714, 0.3303, 0.6479)),
    (P100, 32, 4, (0.6073, 1.1826, 2.3332)),
    (V100, 64, 1, (0.2074, 0.4022, 0.7917)),
    (P100, 64, 2, (0.5965, 1.1739, 2.3287)),
]


@pytest.fixture(scope="module")
def model() -> IIDPModel:
    return IIDPModel.from_profile(load_jabas_resnet50())


@pytest.fixture(scope="module")
def quickstart():
    servers = {s.name: s for s in load_cluster_info()}
    return servers["node0"], servers["node1"]


@pytest.mark.parametrize(("gpu", "lbs", "m", "expected"), UNIT_VECTORS)
def test_unit_iteration_time_vectors(model, quickstart, gpu, lbs, m, expected):
    node0, node1 = quickstart
    server = node0 if gpu == V100 else node1
    for a, want in zip((0, 1, 3), expected, strict=True):
        got = model.server_time(server, [node0, node1], lbs, m, a)
        assert got == pytest.approx(want, rel=0.01), (gpu, lbs, m, a)


def test_loader_reads_released_tree():
    p = load_jabas_resnet50()
    assert p.model == "resnet50"
    assert set(p.gpu_types) == {V100, P100}
    assert p.lbs_grid(V100) == (32, 64, 96, 128)
    assert p.lbs_grid(P100) == (32, 64, 96, 128, 160)
    assert {k: v for k, v in p.max_vsw.items() if k[0] == V100} == {
        (V100, 32): 3, (V100, 64): 2, (V100, 96): 1, (V100, 128): 1}
    assert p.max_vsw[(P100, 32)] == 4 and p.max_vsw[(P100, 160)] == 1
    assert [c.num_models for c in p.comp[(P100, 32)]] == [1, 2, 4]
    assert p.bucket_sizes_mb == (7.81, 30.04, 25.04, 25.25, 9.2)
    assert len(p.intra_comm) == 9 and len(p.inter_comm) == 9


def test_vsw_log_fit_matches_digest(model):
    v = model.comp[(V100, 32)].scaling
    p = model.comp[(P100, 32)].scaling
    assert v.is_log_fit and p.is_log_fit
    assert v.alpha == pytest.approx(0.124, abs=1e-3) and v.beta == pytest.approx(1.000, abs=1e-3)
    assert p.alpha == pytest.approx(0.078, abs=1e-3) and p.beta == pytest.approx(1.010, abs=1e-3)
    assert not model.comp[(V100, 64)].scaling.is_log_fit  # only m = 1, 2 profiled -> table


def test_allreduce_fits_match_digest(model):
    assert model.intra_fit.slope == pytest.approx(1.417, abs=1e-3)
    assert model.intra_fit.intercept == pytest.approx(1.209, abs=1e-3)
    assert model.inter_fit.slope == pytest.approx(0.716, abs=1e-3)
    assert model.inter_fit.intercept == pytest.approx(3.948, abs=1e-3)
    fit = LinearFit.fit([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)])
    assert fit(10.0) == pytest.approx(21.0)


def test_weight_sync_recommendation():
    assert recommend_weight_sync((7.81, 30.04, 25.04, 25.25, 9.2)) == "overlap"
    assert recommend_weight_sync((40.0, 40.0, 5.0)) == "sequential"


def test_sequential_is_slower_than_overlap(quickstart):
    node0, node1 = quickstart
    p = load_jabas_resnet50()
    ov = IIDPModel.from_profile(p, "overlap").server_time(node0, [node0, node1], 32, 3, 1)
    sq = IIDPModel.from_profile(p, "sequential").server_time(node0, [node0, node1], 32, 3, 1)
    assert sq > ov


def test_time_affine_in_accumulation_and_grows_with_vsw(model, quickstart):
    node0, node1 = quickstart
    t = [model.server_time(node0, [node0, node1], 32, 2, a) for a in range(5)]
    assert np.allclose(np.diff(t), np.diff(t)[0])
    assert model.server_time(node0, [node0], 32, 1, 0) < model.server_time(node0, [node0, node1], 32, 1, 0)
    per_vsw = [model.server_time(node0, [node0, node1], 32, m, 0) / m for m in (1, 2, 3)]
    assert per_vsw[2] < per_vsw[0]  # multi-streaming gains throughput


def test_memory_limit_enforced(model, quickstart):
    node0, node1 = quickstart
    assert model.max_vsw(V100, 32) == 3 and model.max_vsw(V100, 160) == 0
    with pytest.raises(ValueError, match="memory limit"):
        model.server_time(node0, [node0, node1], 32, 4, 0)
    with pytest.raises(KeyError):
        model.server_time(node0, [node0, node1], 160, 1, 0)


def test_cluster_time_is_slowest_server(model, quickstart):
    node0, node1 = quickstart
    c = [node0, node1]
    t = model.cluster_iteration_time(c, 32, [(3, 0), (1, 0)])
    assert t == max(model.server_time(node0, c, 32, 3, 0), model.server_time(node1, c, 32, 1, 0))
    assert model.cluster_throughput(c, 32, [(3, 0), (1, 0)]) == pytest.approx(32 * 16 / t)


def test_derived_types_scale_compute():
    p = load_jabas_resnet50()
    cl = load_cluster_info()
    q = derive_cluster_types(p, cl, V100, 14.13)
    assert len(q.gpu_types) == 8 and "NVIDIA GeForce RTX 3090" in q.derived_types
    m = IIDPModel.from_profile(q)
    fast = m.comp[("NVIDIA GeForce RTX 3090", 32)]
    base = m.comp[(V100, 32)]
    assert fast.thp1 == pytest.approx(base.thp1 * 35.58 / 14.13)
    with pytest.raises(ValueError):
        derive_gpu_type(p, "no such gpu", "x", 1.0)


def test_bad_profile_rejected(tmp_path):
    from elastisched.models.iidp.profiles import load_jabas_profile

    with pytest.raises((ValueError, FileNotFoundError)):
        load_jabas_profile(tmp_path)
