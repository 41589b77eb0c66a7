"""The Pollux fit is cached on disk by the profile's digest: same numbers, no refit, robust to bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elastisched.models import throughput
from elastisched.models.throughput import cached_fit, fit_pollux


def _points() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    nodes = rng.integers(1, 4, 40).astype(float)
    reps = nodes * rng.integers(1, 5, 40)
    bsz = rng.integers(8, 128, 40).astype(float)
    compute = 0.05 + 0.002 * bsz
    sync = np.where(reps > 1, 0.02 + 0.01 * reps, 0.0)
    step = compute + sync
    return np.c_[nodes, reps, bsz], np.c_[step, sync]


def test_cached_fit_equals_the_fit_and_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", str(tmp_path))
    pts, vals = _points()
    first = cached_fit(pts, vals)
    assert first == fit_pollux(pts[:, 0], pts[:, 1], pts[:, 2], vals[:, 0], vals[:, 1])
    assert len(list((tmp_path / "fits").glob("*.json"))) == 1

    def refit(*_: object) -> None:
        raise AssertionError("refitted although cached")

    monkeypatch.setattr(throughput, "fit_pollux", refit)
    assert cached_fit(pts, vals) == first  # bit-identical from the cache
    other = vals.copy()
    other[0, 0] *= 1.5
    with pytest.raises(AssertionError, match="refitted"):
        cached_fit(pts, other)  # other numbers, other digest


def test_bad_cache_file_or_disabled_cache_only_costs_the_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", str(tmp_path))
    pts, vals = _points()
    good = cached_fit(pts, vals)
    (f,) = (tmp_path / "fits").glob("*.json")
    f.write_text("{not json")
    assert cached_fit(pts, vals) == good
    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", "off")
    f.unlink()
    assert cached_fit(pts, vals) == good
    assert not list((tmp_path / "fits").glob("*.json"))
