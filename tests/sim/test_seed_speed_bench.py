"""`benchmarks/seed_speed.py` (issue 13): one real run of two policies on one Pollux workload, two seeds."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("seed_speed", ROOT / "benchmarks" / "seed_speed.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_seed_speed_reports_jct_spread_decomposition_and_cpu_ratio() -> None:
    res = _bench().run(["tiresias", "lyra"], [1], [0, 1], "16x4:t4")
    assert res["config"] == {"cluster": "16x4:t4", "workloads": [1], "seeds": [0, 1],
                             "version": res["config"]["version"]}
    assert len(res["runs"]) == 4 and all(r["n_finished"] == 160 for r in res["runs"])
    for p in ("tiresias", "lyra"):
        v = res["policies"][p]
        runs = [r for r in res["runs"] if r["policy"] == p]
        assert v["mean_jct"] == pytest.approx(sum(r["avg_jct"] for r in runs) / 2)
        assert v["spread"] == pytest.approx(max(v["mean_jct_by_seed"]) - min(v["mean_jct_by_seed"]))
        # the decomposition adds up: jct = queued + restarting + running
        assert v["mean_queued"] + v["mean_restarting"] + v["mean_running"] == pytest.approx(v["mean_jct"], rel=1e-6)
        assert v["cpu_s_mean"] > 0
    assert res["policies"]["tiresias"]["cpu_ratio_to_tiresias"] == pytest.approx(1.0)
