"""The `sia` experiment: Gavel on Saturn workload-1 against Sia's artifact, result shape, bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from elastisched.core.errors import ConfigError
from elastisched.experiments.base import registered_experiments
from elastisched.experiments.sia import REFERENCE, SiaConfig, SiaExperiment, default_root
from elastisched.policies.base import registered


def _root() -> Path:
    root = default_root()
    if not (root / "workloads" / "saturn" / "workload-1.csv").exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"Sia artifact data missing at {root} (required under CI=true)")
        pytest.skip("Sia artifact data (../shared/peer-data/sia) not found")
    return root


def test_registered() -> None:
    assert registered_experiments()["sia"] is SiaExperiment


def test_gavel_on_saturn1_matches_the_artifact() -> None:
    root = _root()
    res = SiaExperiment().run(SiaConfig(root=root, workloads=(1,), policies=("gavel", "no-such-policy")))
    (v,) = res.verdicts
    assert v.passed, v  # within ±10 % of 6,474.2 s
    assert abs(v.measured / REFERENCE["gavel"] - 1) <= 0.10
    assert res.data["pending"] == ["no-such-policy"]
    (row,) = res.tables[0].rows
    assert row["policy"] == "gavel" and row["reference"] == REFERENCE["gavel"] and row["restarts"] > 0
    assert set(res.tables[0].columns) >= {"avg_jct", "p95_jct", "makespan", "gpu_hours", "restarts", "wall_s"}
    assert res.figures["sia_saturn1.png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_pollux_is_pending_until_registered() -> None:
    root = _root()
    res = SiaExperiment()._result(SiaConfig(root=root), {}, [p for p in ("pollux",) if p not in registered()])
    assert res.data["pending"] == ([] if "pollux" in registered() else ["pollux"])


def test_bad_root_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="root="):
        SiaExperiment().run(SiaConfig(root=tmp_path))


def test_a_peer_that_fails_on_the_cluster_is_reported_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    import elastisched.experiments.sia as exp

    root = _root()

    def boom(policy: str, *a: object, **k: object) -> object:
        raise ValueError(f"{policy} cannot place mixed GPU types")

    monkeypatch.setattr(exp, "registered", lambda: {"peer-x": object})
    monkeypatch.setattr(exp, "run_one", boom)
    res = SiaExperiment().run(SiaConfig(root=root, workloads=(1, 2), policies=("peer-x",)))
    assert res.data["pending"] == ["peer-x"] and "cannot place" in res.data["pending_note"]["peer-x"]
    assert res.verdicts == [] and res.tables[0].rows == []
