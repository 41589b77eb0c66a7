"""The plain-float step-time path gives numpy's bits: `interp1` against `np.interp`, and every
`ThroughputModel._step_sync` answer against the same computation written with numpy (the previous code)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from elastisched.models.registry import PerfModels
from elastisched.models.throughput import ThroughputModel, canonical_placement, interp1


@pytest.mark.parametrize("seed", range(20))
def test_interp1_is_np_interp_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    xp = sorted(rng.choice([float(rng.randint(1, 64)), rng.uniform(1, 64)]) for _ in range(n))  # repeats too
    fp = [rng.uniform(0.001, 3.0) for _ in range(n)]
    if seed % 5 == 0:
        fp[rng.randrange(n)] = math.inf
    queries = [*xp, *(rng.uniform(xp[0], xp[-1]) for _ in range(200))]
    for x in queries:
        want = float(np.interp(x, np.array(xp), np.array(fp)))
        got = interp1(x, xp, fp)
        assert (math.isnan(want) and math.isnan(got)) or want.hex() == got.hex(), (x, xp, fp, want, got)


def _numpy_step_sync(m: ThroughputModel, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
    """The previous implementation: numpy arrays and `ProfileInterpolator.__call__`."""
    p = canonical_placement(placement)
    key = "".join(map(str, p)) if all(x < 10 for x in p) else None
    if key is not None and key in m._by_placement:
        bs, step, sync = (np.array(v) for v in m._by_placement[key])
        if bs[0] <= local_bsz <= bs[-1]:
            return float(np.interp(local_bsz, bs, step)), float(np.interp(local_bsz, bs, sync))
    nodes, reps = min(len(p), m._max_nodes), sum(p)
    out = m._interp([nodes, reps, local_bsz])
    if np.all(np.isfinite(out)):
        return float(out[0]), float(out[1])
    return m.params.step_sync(len(p), reps, local_bsz)


def test_step_sync_equals_numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", "off")  # new queries go to scipy, not into the user's cache
    rng = random.Random(1)
    models = PerfModels.load()
    n = 0
    for name in sorted(models.apps):
        m = models.app(name).model("t4")
        sizes = sorted({float(b) for b in range(1, 2 * m.max_local_bsz + 3)} | {m.min_local_bsz + 0.5})
        for g in range(1, 25):
            for k in range(1, min(g, 8) + 1):
                shape = tuple(g // k + (i < g % k) for i in range(k))
                for b in [*rng.sample(sizes, min(4, len(sizes))), float(m.min_local_bsz), float(m.max_local_bsz)]:
                    assert m._step_sync(shape, b) == _numpy_step_sync(m, shape, b), (name, shape, b)
                    n += 1
    assert n > 1000


def test_step_syncs_equal_step_sync_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """`step_syncs` (an interpolation query put once for every placement that shares it: spreads over more than
    16 nodes) gives each placement's `step_sync`, for spreads that are measured, interpolated and outside the
    measured hull, in the order asked; and `Application.iteration_times` each `iteration_time`."""
    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", "off")
    models = PerfModels.load()
    shared = asked = 0
    for name in sorted(models.apps):
        app = models.app(name)
        m = app.model("t4")
        # several GPU counts in one call: spreads of different counts over as many nodes ask different queries
        shapes = [tuple(g // k + (i < g % k) for i in range(k)) for g in (1, 3, 8, 17, 40, 96) for k in range(1, g + 1)]
        for b in (float(m.min_local_bsz), float(m.max_local_bsz) + 7.5, float(m.max_local_bsz) * 3):
            got = list(m.step_syncs(iter(shapes), b))
            want = [m._step_sync(s, b) for s in shapes]
            assert [(x.hex(), y.hex()) for x, y in got] == [(x.hex(), y.hex()) for x, y in want], (name, b)
            shared += sum(len(s) > 16 for s in shapes)
            asked += len(shapes)
        cfg = app.batch_config(8, app.init_batch_size * 2)
        assert list(app.iteration_times("t4", shapes, cfg)) == [app.iteration_time("t4", s, cfg) for s in shapes]
    assert shared > 500 and asked > 1000


def test_one_node_model_step_syncs_are_its_own() -> None:
    """The live service's one-node model (its own `_step_sync`: replicas counted whatever the node split)
    answers `step_syncs` with that, spreads over more than 16 nodes too, not with the base's shared queries."""
    from elastisched.service.profiles import OneNodeModel, load_models

    m = load_models(Path(__file__).parents[1] / "service" / "data" / "profiles").app("linreg").model("cpu")
    assert isinstance(m, OneNodeModel)
    shapes = [tuple(g // k + (i < g % k) for i in range(k)) for g in (1, 2, 4, 20, 40) for k in range(1, g + 1)]
    for b in (8.0, 64.0, 700.0):
        assert list(m.step_syncs(shapes, b)) == [m._step_sync(s, b) for s in shapes], b
