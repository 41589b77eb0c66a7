"""The fake backend for real, through the API (issue 22 item 4, CI-sized): `python -m elastisched.service
--backend fake`, users with their own tokens submitting at a fixed rate and then polling, on SQLite and on
PostgreSQL (started from the distribution's packages by `benchmarks/_postgres.py`). The driver is the scale
benchmark's own (`benchmarks/_scale_live.py`, whose full-size run writes benchmarks/results/scale.json); here
it runs a few seconds of it and checks what the benchmark's verdict rests on: every acknowledged job in the
database, every job finished (by the fake backend's end events through the daemon), no request refused."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _live() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("_scale_live", ROOT / "benchmarks" / "_scale_live.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_fake_backend_through_the_api(db: str) -> None:
    live = _live()
    cfg = live.LiveConfig(nodes=8, gpus_per_node=8, jobs=120, rate=60.0, clients=4, poll_s=3.0, drain_s=90.0,
                          job_s=(0.5, 2.0), policy="tiresias", think_s=0.05, tick_s=0.2, modelled=False)
    try:
        out = live.run_one(cfg, db)
    except Exception as e:
        if type(e).__name__ == "PostgresMissing" and os.environ.get("CI") != "true":
            pytest.skip(str(e))
        raise
    jobs = out["jobs"]
    assert jobs["acknowledged"] == 120 and jobs["lost"] == 0 and jobs["in_db"] == 120, jobs
    assert jobs["states"] == {"SUCCEEDED": 120}, jobs
    # each job's last generation ended succeeded (reported by the fake backend, recorded by the daemon)
    assert jobs["generation_outcomes"].get("succeeded", 0) >= 120, jobs
    assert out["api_ms"]["errors"] == 0, out["api_ms"]["error_samples"]
    assert out["api_ms"]["describe"]["n"] > 0 and out["api_ms"]["ls"]["n"] > 0
    assert out["round_s"]["count"] > 0 and out["round_s"]["step"]["max"] > 0
