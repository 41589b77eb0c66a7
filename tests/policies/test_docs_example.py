"""The worked example in docs/adding-a-policy.md runs as written and stays under 50 lines."""

from __future__ import annotations

import re
from pathlib import Path

import elastisched.policies.base as base
from elastisched.core.cluster import parse_cluster
from elastisched.sim import simulate
from elastisched.workloads import load_workload

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding-a-policy.md"


def test_worked_example_runs(models: object, monkeypatch: object) -> None:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    src = code.group(1)
    assert len(src.strip().splitlines()) < 50
    monkeypatch.setattr(base, "register", lambda cls: cls)  # type: ignore[attr-defined]
    ns: dict[str, object] = {"__name__": "ljf_example"}
    exec(compile(src, str(DOC), "exec"), ns)
    policy = ns["LargestJobFirst"]()  # type: ignore[operator]
    wl = load_workload("pollux:workload-1", models)  # type: ignore[arg-type]
    r = simulate(wl, policy, parse_cluster("16x4:t4"), models)  # type: ignore[arg-type]
    assert r.summary["n_finished"] == 160 and r.summary["policy"] == "ljf"
