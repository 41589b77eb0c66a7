"""DESIGN.md's dependency rule, enforced on the source with the ast module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "elastisched"
FORBIDDEN_FOR_CORE = ("elastisched.sim", "elastisched.backends", "elastisched.service", "elastisched.train",
                      "torch", "ray", "kubernetes")
RULES = {
    "core": (*FORBIDDEN_FOR_CORE, "elastisched.models", "elastisched.policies", "elastisched.engine"),
    "models": FORBIDDEN_FOR_CORE,
    "policies": FORBIDDEN_FOR_CORE,
    "loaning": FORBIDDEN_FOR_CORE,
    "engine": (*FORBIDDEN_FOR_CORE, "elastisched.workloads", "elastisched.report"),
    "train": ("elastisched.sim", "elastisched.engine", "elastisched.policies", "elastisched.service",
              "elastisched.backends", "elastisched.models", "elastisched.loaning"),
}


def imports_of(path: Path) -> set[str]:
    mods: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module)
    return mods


@pytest.mark.parametrize("package", sorted(RULES))
def test_dependency_rule(package: str) -> None:
    bad = []
    for path in (SRC / package).rglob("*.py"):
        for mod in imports_of(path):
            if any(mod == f or mod.startswith(f + ".") for f in RULES[package]):
                bad.append(f"{path.relative_to(SRC)} imports {mod}")
    assert not bad, "\n".join(bad)


def test_rule_detects_a_violation(tmp_path: Path) -> None:
    p = tmp_path / "x.py"
    p.write_text("import torch\nfrom elastisched.sim import simulate\n")
    assert {"torch", "elastisched.sim"} <= imports_of(p)
