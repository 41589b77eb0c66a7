"""Exact IIDP configuration solver (jabas.md §2(b), §7 DP vectors)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastisched.models.iidp.profiles import derive_cluster_types, load_cluster_info, load_jabas_resnet50
from elastisched.models.iidp.release import IIDPModel
from elastisched.models.iidp.solver import (
    bottleneck_curve,
    minmax_convolve,
    solve_batch,
    solve_placement,
    solve_workers,
    unit_time_table,
)

V100 = "Tesla V100-PCIE-16GB"

# jabas.md §7: (servers, LBS, W) -> throughput, iteration time, {server: (m, a)}
DP_VECTORS = [
    (("node0",), 32, 4, 1129.8, 0.1133, {"node0": (1, 0)}),
    (("node0",), 32, 8, 1237.0, 0.2070, {"node0": (2, 0)}),
    (("node0", "node1"), 32, 8, 1493.3, 0.1714, {"node0": (1, 0), "node1": (1, 0)}),
    (("node0", "node1"), 32, 16, 1719.4, 0.2978, {"node0": (3, 0), "node1": (1, 0)}),
    (("node0", "node1"), 32, 32, 1945.3, 0.5264, {"node0": (1, 4), "node1": (3, 0)}),
    (("node0", "node1"), 128, 32, 2175.9, 1.8825, {"node0": (1, 4), "node1": (1, 2)}),
]


@pytest.fixture(scope="module")
def model() -> IIDPModel:
    return IIDPModel.from_profile(load_jabas_resnet50())


@pytest.fixture(scope="module")
def servers():
    return {s.name: s for s in load_cluster_info()}


@pytest.mark.parametrize("unit_gpus", [2, 4])
@pytest.mark.parametrize(("names", "lbs", "w", "thp", "it", "cfg"), DP_VECTORS)
def test_dp_vectors(model, servers, unit_gpus, names, lbs, w, thp, it, cfg):
    cluster = [servers[n] for n in names]
    r = solve_workers(model, cluster, lbs, w, unit_gpus=unit_gpus)
    assert r is not None
    assert r.throughput == pytest.approx(thp, rel=0.01)
    assert r.iter_time == pytest.approx(it, rel=0.01)
    assert r.gbs == lbs * w and sum(u.workers for u in r.units) == w
    assert {u.server: (u.m, u.a) for u in r.units} == cfg
    assert len(r.gpu_configs()) == sum(s.num_gpus for s in cluster)


def _brute(model, cluster, lbs, w, unit_gpus=2, max_w=None):
    """Enumerate every per-unit (m, a) combination (small cases only)."""
    total = sum(s.num_gpus for s in cluster)
    multi = len(cluster) > 1
    s_target = w // unit_gpus
    units = [s for s in cluster for _ in range(s.num_gpus // unit_gpus)]
    tables = [unit_time_table(model, s, lbs, s_target, total_gpus=total, multi_server=multi)[0] for s in units]
    best = np.inf
    for ws in itertools.product(range(1, s_target + 1), repeat=len(units)):
        if sum(ws) == s_target:
            best = min(best, max(t[x] for t, x in zip(tables, ws, strict=True)))
    return best


@settings(max_examples=25, deadline=None)
@given(lbs=st.sampled_from([32, 64]), w=st.integers(2, 24).map(lambda x: 2 * x), two=st.booleans())
def test_solver_is_exact_against_brute_force(model, servers, lbs, w, two):
    cluster = [servers["node0"], servers["node1"]] if two else [servers["node1"]]
    r = solve_workers(model, cluster, lbs, w)
    brute = _brute(model, cluster, lbs, w)
    if not np.isfinite(brute):
        assert r is None
    else:
        assert r is not None and r.iter_time == pytest.approx(brute, rel=1e-12)


def test_unit_table_uses_divisors_and_memory(model, servers):
    tau, mstar = unit_time_table(model, servers["node0"], 32, 12, total_gpus=4, multi_server=False)
    assert not np.isfinite(tau[0]) and mstar[0] == 0
    assert mstar[9] == 3  # 9 workers: (3, 2) beats (1, 8) thanks to multi-streaming
    assert all(m <= 3 for m in mstar)
    tau1, _ = unit_time_table(model, servers["node0"], 32, 12, total_gpus=4, multi_server=False, max_ga=1)
    assert not np.isfinite(tau1[5])  # 5 = 1×(4+1) or 5×1: needs a=4 > 1 or m=5 > maxVSW


def test_minmax_convolve_matches_naive():
    rng = np.random.default_rng(3)
    f = rng.random(12)
    g = rng.random(12)
    g[0] = f[0] = np.inf
    g[9:] = np.inf
    naive = [min(max(f[s - w], g[w]) for w in range(s + 1)) for s in range(12)]
    assert np.allclose(minmax_convolve(f, g), naive)


def test_curve_monotone_feasibility(model, servers):
    c = bottleneck_curve(model, [servers["node0"], servers["node1"]], 32, 40)
    assert not np.isfinite(c[:4]).any()  # 4 units need >= 4 per-unit workers
    assert np.isfinite(c[4:]).all()


def test_infeasible_cases(model, servers):
    n0, n1 = servers["node0"], servers["node1"]
    assert solve_workers(model, [n0, n1], 32, 6) is None  # fewer workers than GPUs
    assert solve_workers(model, [n0, n1], 32, 9) is None  # odd: breaks the similarity split
    assert solve_workers(model, [n0, n1], 160, 16) is None  # V100 has no LBS-160 profile
    assert solve_workers(model, [n0], 32, 2 * 4 * 3 * 1002) is None  # beyond maxVSW·(1000+1)


def test_solve_placement_moves_in_the_requested_direction(model, servers):
    c = [servers["node0"], servers["node1"]]
    up = solve_placement(model, c, 256 * 1.1, 256, upper_bound=32768)
    assert up is not None and up.gbs > 256 and up.num_workers % 2 == 0
    down = solve_placement(model, c, 512 * 0.9, 512, upper_bound=32768)
    assert down is not None and down.gbs < 512
    # cannot go below #GPUs workers with any LBS
    assert solve_placement(model, c, 230, 256, upper_bound=32768) is None
    # the highest-throughput LBS wins among the candidates
    alts = [solve_workers(model, c, b, w) for b, w in ((32, 10), (64, 6))]
    best = max((a for a in alts if a is not None), key=lambda a: a.throughput)
    assert up.throughput >= best.throughput - 1e-9


def test_solve_batch_and_64_gpus():
    p = load_jabas_resnet50()
    cl = load_cluster_info()
    m = IIDPModel.from_profile(derive_cluster_types(p, cl, V100, 14.13))
    big = [replace(cl[i % 9], name=f"s{i}") for i in range(16)]
    r = solve_batch(m, big, 4096, upper_bound=32768)
    assert r is not None and sum(s.num_gpus for s in big) == 64
    assert abs(r.gbs - 4096) <= r.lbs * 2
    # heterogeneity awareness: a faster GPU never gets fewer workers than a slower one at the same LBS
    workers = {}
    for u in r.units:
        workers.setdefault(u.server, []).append(u.m * (u.a + 1))
    fast = min(workers["s2"])  # RTX 3090
    slow = max(workers["s6"])  # Quadro P4000
    assert fast >= slow


def test_profile_solver_is_an_iidp_solver(model: IIDPModel, servers) -> None:
    """`ProfileIIDP` answers through the one interface with the release's rules (§7: node0 + node1, GBS 256 →
    LBS 32, 1493.3 samples/s; a move toward a target is strict and on the 2-GPU unit)."""
    from elastisched.models.iidp.config import IIDPSolver
    from elastisched.models.iidp.solver import ProfileIIDP

    two = [servers["node0"], servers["node1"]]
    assert ProfileIIDP(model).best(two, 256) == solve_batch(model, two, 256)  # no tolerance: the release's rule
    solver: IIDPSolver = ProfileIIDP(model, tolerance=0.1)  # GBS within ±10 % of the target first
    cfg = solver.best(two, 256)
    assert cfg is not None and cfg.gbs == 256 and cfg.lbs == 32
    assert cfg.throughput == pytest.approx(1493.3, rel=0.01)
    up = solver.best(two, 256 * 1.1, 256)
    assert up is not None and up.gbs > 256 and up.num_workers % 2 == 0
    assert up.throughput == pytest.approx(solve_placement(model, two, 256 * 1.1, 256).throughput)  # type: ignore[union-attr]
