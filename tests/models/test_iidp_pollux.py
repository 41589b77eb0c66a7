"""IIDP on Pollux/Sia profiles: the exact solver, the shared (LBS, W) choice and the rate rule the simulator uses."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from elastisched.models import PerfModels
from elastisched.models.iidp.config import IIDPSolver, ServerSpec, choose_config
from elastisched.models.iidp.pollux import PolluxIIDP, iidp_iteration_time

SIA = Path(__file__).resolve().parents[2] / ".." / "shared" / "peer-data" / "sia" / "traces"
needs_sia = pytest.mark.skipif(not SIA.is_dir() and os.environ.get("CI") != "true", reason="Sia traces not found")


@pytest.fixture(scope="module")
def sia() -> PerfModels:
    return PerfModels.load(SIA)


def _srv(name: str, t: str, g: int) -> ServerSpec:
    return ServerSpec(name, t, 10.0, g, 0.0, 0.0)


def _key(cluster: list[ServerSpec]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((s.gpu_type, s.num_gpus) for s in cluster))


@needs_sia
def test_solver_is_exact_min_bottleneck(sia: PerfModels) -> None:
    perf = PolluxIIDP(sia.app("imagenet"))
    for cluster, b, w in [([_srv("t0", "t4", 2), _srv("a0", "a100", 1)], perf.lbs_grid[2], 9),
                          ([_srv("a0", "a100", 2), _srv("r0", "rtx", 1)], 46, 7)]:
        cfg = perf.solve(cluster, b, w)
        assert cfg is not None
        co = perf.coeffs(_key(cluster), b)
        gpus = [s.gpu_type for s in cluster for _ in range(s.num_gpus)]
        brute = min(max(co[t][0] + co[t][1] * (x - 1) for t, x in zip(gpus, ws, strict=True))
                    for ws in itertools.product(range(1, w + 1), repeat=len(gpus)) if sum(ws) == w)
        assert cfg.iter_time == pytest.approx(brute, rel=1e-12)
        assert sum(u.workers for u in cfg.units) == w and cfg.gbs == b * w
        assert sum(u.num_gpus for u in cfg.units) == sum(s.num_gpus for s in cluster)
    assert perf.solve([_srv("t0", "t4", 4)], 32, 3) is None  # fewer workers than GPUs


@needs_sia
def test_faster_gpus_get_more_workers_and_beat_the_even_split(sia: PerfModels) -> None:
    perf = PolluxIIDP(sia.app("imagenet"))
    cluster = [_srv("t0", "t4", 4), _srv("a0", "a100", 4)]
    cfg = perf.solve(cluster, 46, 64)
    assert cfg is not None
    acc = cfg.accumulation()
    assert acc["a0"] > acc["t0"]
    assert cfg.iter_time < perf.uniform_time(cluster, cfg.gbs)


@needs_sia
def test_rate_rule_matches_the_solver(sia: PerfModels) -> None:
    """The simulator's rule (``iidp_iteration_time`` on the allocation's per-node accumulation) gives the
    solver's own bottleneck time: one rule for policy and simulator."""
    app = sia.app("imagenet")
    perf = PolluxIIDP(app)
    cluster = [_srv("t0", "t4", 4), _srv("a0", "a100", 4), _srv("a1", "a100", 2), _srv("r0", "rtx", 3)]
    types = {s.name: s.gpu_type for s in cluster}
    for target in (300.0, 1000.0, 3000.0):
        cfg = perf.best(cluster, target, upper=app.max_batch_size)
        assert cfg is not None
        t = iidp_iteration_time(app, types, [(s.name, s.num_gpus) for s in cluster], cfg.lbs, cfg.accumulation())
        assert t == pytest.approx(cfg.iter_time, rel=1e-12)


@needs_sia
def test_best_respects_direction_bounds_and_tolerance(sia: PerfModels) -> None:
    app = sia.app("imagenet")
    perf: IIDPSolver = PolluxIIDP(app)
    cluster = [_srv("t0", "t4", 4), _srv("a0", "a100", 4)]
    up = perf.best(cluster, 1100.0, 1000, upper=app.max_batch_size)
    down = perf.best(cluster, 900.0, 1000, upper=app.max_batch_size)
    assert up is not None and down is not None and up.gbs > 1000 > down.gbs
    assert abs(up.gbs - 1100) <= 110 and abs(down.gbs - 900) <= 90  # within ±10 % when the grid allows
    assert perf.best(cluster, 4.0, upper=app.max_batch_size) is not None  # W ≥ #GPUs: GBS ≥ 8 forced
    big = perf.best(cluster, 10.0 * app.max_batch_size, upper=app.max_batch_size)
    assert big is None  # never above the upper bound (the controller clamps targets to the bounds first)
    top = perf.best(cluster, float(app.max_batch_size), upper=app.max_batch_size)
    assert top is not None and top.gbs <= app.max_batch_size


def test_choose_config_prefers_throughput_within_tolerance() -> None:
    """Shared choice: within ±tolerance the fastest wins; a far GBS only when nothing is near."""
    from elastisched.models.iidp.config import IIDPConfig

    times = {1: 1.0, 2: 0.5, 4: 0.1}  # LBS → iteration time (LBS 4 is the fastest per sample)

    def solve(b: int, w: int) -> IIDPConfig:
        return IIDPConfig(b, w, times[b] * w, ())

    got = choose_config(solve, [1, 2, 4], 2, 100.0, tolerance=0.1)
    assert got is not None and got.lbs == 4 and got.gbs == 100
    up = choose_config(solve, [1, 2, 4], 2, 110.0, 100, tolerance=0.1)
    assert up is not None and up.gbs > 100  # strict move toward the target
    few = choose_config(solve, [4], 64, 100.0)  # at least one worker per GPU
    assert few is not None and few.num_workers == 64
