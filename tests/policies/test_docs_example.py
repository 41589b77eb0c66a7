"""The worked example docs/adding-a-policy.md points at (examples/ljf-policy/ljf_policy/ljf.py) exists, is short,
uses only the public policy API (no `_common`), and runs a whole workload."""

from __future__ import annotations

from pathlib import Path

from elastisched.core.cluster import parse_cluster
from elastisched.policies.plugins import load_class
from elastisched.sim import simulate
from elastisched.workloads import load_workload

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding-a-policy.md"
EXAMPLE = ROOT / "examples" / "ljf-policy" / "ljf_policy" / "ljf.py"


def test_worked_example_runs(models: object) -> None:
    assert "examples/ljf-policy/ljf_policy/ljf.py" in DOC.read_text()
    src = EXAMPLE.read_text()
    assert len(src.strip().splitlines()) < 60 and "_common" not in src
    policy = load_class(f"{EXAMPLE}:LJF")()
    wl = load_workload("pollux:workload-1", models)  # type: ignore[arg-type]
    r = simulate(wl, policy, parse_cluster("16x4:t4"), models)  # type: ignore[arg-type]
    assert r.summary["n_finished"] == 160 and r.summary["policy"] == "ljf"
