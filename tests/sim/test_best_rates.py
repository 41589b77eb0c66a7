"""`best_rates` takes one candidate per (GPU count, batch) instead of one per shape: the same numbers as the
per-shape maximum (bit for bit), for several applications, caps and cluster shapes."""

from __future__ import annotations

import numpy as np

from elastisched.models import PerfModels
from elastisched.models.application import Application
from elastisched.sim.decompose import _batch_grid, _elementwise_max, _rate, _shapes, best_rates


def _every_shape(models: PerfModels, name: str, cap: int, own: int, per_node: int, nodes: int) -> np.ndarray:
    return _every_shape_of(models.app(name), cap, own, per_node, nodes)


def _every_shape_of(app: Application, cap: int, own: int, per_node: int, nodes: int) -> np.ndarray:
    shapes = _shapes(cap, per_node, nodes)
    grid = [_rate(app, "t4", sh, b) for sh in shapes for b in _batch_grid(app.init_batch_size, app.max_batch_size)]
    return _elementwise_max([*grid, *(_rate(app, "t4", sh, own) for sh in shapes)])


def test_same_numbers_as_every_shape(models: PerfModels) -> None:
    for name, own in (("cifar10", 128), ("ncf", 256), ("bert", 12)):
        for cap, per_node, nodes in ((1, 4, 64), (4, 4, 64), (8, 4, 16), (16, 4, 640), (12, 4, 3)):
            got = best_rates(models.app(name), "t4", cap, own, per_node, nodes)
            want = _every_shape(models, name, cap, own, per_node, nodes)
            assert got.shape == want.shape and np.array_equal(got, want), (name, cap, per_node, nodes)


def test_two_applications_of_one_name_keep_their_own_rates(models: PerfModels) -> None:
    """The caches are per application, not per name: two profile sets can share a name in one process (Pollux's
    and Sia's cifar10 in a sweep worker). Keyed by name, the second got the first's rates (CI: shape (3,) for
    (100,), after an earlier test's cifar10 of 3 epochs)."""
    full = models.app("cifar10")
    short = Application(full.profile, max_epochs=3)
    for app in (short, full, short):
        got = best_rates(app, "t4", 12, 128, 4, 3)
        want = _every_shape_of(app, 12, 128, 4, 3)
        assert got.shape == want.shape == (app.max_epochs,) and np.array_equal(got, want)
