"""DESIGN.md's dependency rule and "no import cycles", checked on the import graph of `src/elastisched`.

The graph has one node per module and an edge for every import executed at run time, at module level or
inside a function; imports under `if TYPE_CHECKING:` are type-only and left out. `from a.b import c` points
at module `a.b.c` when it exists, else at `a.b`. Importing `a.b.c` is not counted as importing package `a`
(the package's `__init__` is only partly initialised then, which Python supports).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = "elastisched"
THIRD_PARTY = ("torch", "ray", "kubernetes")
UPPER = ("experiments", "sim", "service", "backends", "train", "report", "cli", "runner", "reproduce_cli")
#: per package: forbidden import prefixes (packages of elastisched are given without the `elastisched.` prefix)
RULES: dict[str, tuple[str, ...]] = {
    "core": (*UPPER, "models", "policies", "engine", "loaning", "workloads", *THIRD_PARTY),
    "models": (*UPPER, "policies", "engine", "loaning", "workloads", *THIRD_PARTY),
    "policies": (*UPPER, "engine", "workloads", *THIRD_PARTY),
    "loaning": (*UPPER, "policies", "engine", "workloads", *THIRD_PARTY),
    "engine": (*UPPER, "workloads", *THIRD_PARTY),
    "train": ("sim", "engine", "policies", "service", "backends", "models", "loaning", "experiments"),
}
#: registry discovery, not a dependency: on first use a registry imports its own package so that every built-in
#: plugin registers itself (a lazy import inside a function; `experiments.base` does the same via pkgutil)
DISCOVERY = {("elastisched.policies.base", "elastisched.policies"),
             ("elastisched", "elastisched.api")}  # `elastisched.simulate` etc.: a name looked up on first use
#: allowed exceptions to RULES: the workloads *schema* (types, not a loader) may be used by loaning
ALLOWED = {"loaning": ("workloads.schema",)}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_pkg: bool,
             type_only: bool = False) -> Iterable[tuple[str, tuple[str, ...]]]:
    """(imported module, names) for every run-time import statement under `tree` (and, with `type_only`, every
    import under `if TYPE_CHECKING:` as well)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            yield from (x for n in node.orelse for x in _imports(ast.Module([n], []), module, is_pkg))
            continue
        if isinstance(node, ast.Import):
            yield from ((a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, tuple(a.name for a in node.names)
        else:
            yield from _imports(node, module, is_pkg, type_only)


def modules(src: Path = SRC, pkg: str = PKG) -> dict[str, Path]:
    out = {}
    for path in sorted((src / pkg).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(src: Path = SRC, pkg: str = PKG,
                 type_only: bool = False) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(internal edges, all imported names incl. third-party) per module; `type_only` adds the imports made for
    type checking only (a cycle through them is still two modules that need each other to be understood)."""
    mods = modules(src, pkg)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    raw: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        for target, names in _imports(tree, mod, path.name == "__init__.py", type_only):
            raw[mod].add(target)
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
            raw[mod].update(subs)
            for t in subs or ([target] if target in mods else []):
                if t != mod:
                    graph[mod].add(t)
    return graph, raw


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def violations(raw: dict[str, set[str]], pkg: str = PKG) -> list[str]:
    bad = []
    for mod, targets in raw.items():
        parts = mod.split(".")
        if len(parts) < 2 or parts[1] not in RULES:
            continue
        own = parts[1]
        for t in targets:
            rel = t[len(pkg) + 1:] if t.startswith(pkg + ".") else (None if t == pkg else t)
            if rel is None:
                continue
            hit = any(rel == f or rel.startswith(f + ".") for f in RULES[own])
            if hit and not any(rel == a or rel.startswith(a + ".") for a in ALLOWED.get(own, ())):
                bad.append(f"{mod} imports {t}")
    return sorted(bad)


@pytest.mark.parametrize("type_only", [False, True], ids=["run-time", "with-type-only"])
def test_no_import_cycles(type_only: bool) -> None:
    graph, _ = import_graph(type_only=type_only)
    for a, b in DISCOVERY:
        graph[a].discard(b)
    assert not cycles(graph), cycles(graph)


def test_dependency_rule() -> None:
    _, raw = import_graph()
    bad = violations(raw)
    assert not bad, "\n".join(bad)


def _plant(tmp: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp / "src" / PKG / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for d in (tmp / "src" / PKG).rglob("*"):
        if d.is_dir() and not (d / "__init__.py").exists():
            (d / "__init__.py").write_text("")
    (tmp / "src" / PKG / "__init__.py").touch()
    return tmp / "src"


def test_a_planted_cycle_is_found_but_a_type_only_import_is_not(tmp_path: Path) -> None:
    src = _plant(tmp_path, {
        "a/x.py": "from elastisched.a import y\n",
        "a/y.py": "def f():\n    from elastisched.a.x import g  # lazy, still a run-time cycle\n",
        "b/p.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from elastisched.b.q import T\n",
        "b/q.py": "from elastisched.b import p\n",
    })
    graph, _ = import_graph(src)
    assert cycles(graph) == [["elastisched.a.x", "elastisched.a.y"]]


def test_a_planted_violation_is_found(tmp_path: Path) -> None:
    src = _plant(tmp_path, {
        "policies/bad.py": "import torch\nfrom elastisched.sim import simulate\nfrom ..report import plots\n",
        "loaning/ok.py": "from elastisched.workloads.schema import InferenceTask\nfrom elastisched.core import types\n",
        "loaning/bad.py": "def f():\n    from elastisched.workloads.traces import load_raw_trace\n",
        "models/bad.py": "from elastisched import experiments\n",
        "report/plots.py": "", "sim/__init__.py": "", "experiments/__init__.py": "",
    })
    _, raw = import_graph(src)
    assert violations(raw) == [
        "elastisched.loaning.bad imports elastisched.workloads.traces",
        "elastisched.models.bad imports elastisched.experiments",
        "elastisched.policies.bad imports elastisched.report",
        "elastisched.policies.bad imports elastisched.report.plots",
        "elastisched.policies.bad imports elastisched.sim",
        "elastisched.policies.bad imports torch",
    ]


@pytest.mark.parametrize("package", sorted(RULES))
def test_every_ruled_package_exists(package: str) -> None:
    assert (SRC / PKG / package).is_dir()


# --- wings, the policy boundary of the bodies, models/ as shared truth, reachability (issue 20) ---

#: modules started as programs (`python -m …`, the console script) or imported by users (the training library)
ENTRY_POINTS = ("elastisched.cli.main", "elastisched.__main__", "elastisched.cli.__main__",
                "elastisched.service.__main__", "elastisched.train", "elastisched.train.commands",
                "elastisched.train._entry", "elastisched.train._standby", "elastisched.backends._wrap",
                "elastisched.backends._argv", "elastisched.backends._slurm_rank", "elastisched.native.__main__")
#: imports by name (importlib), each a registry or a lazy export table: importer -> what it may import
DYNAMIC = {
    "elastisched.policies.base": "elastisched.policies.",  # make_policy / registered(): every policy module
    "elastisched.experiments.base": "elastisched.experiments.",  # every experiment module registers itself
    "elastisched.train": "elastisched.train.",  # the lazy `_EXPORTS` table
    "elastisched.core": "elastisched.core.",  # the lazy `_MODULE` table
}
#: optional command groups `cli.main._optional_plugins` loads by name
PLUGINS = {"elastisched.cli.main": ("elastisched.train.commands", "elastisched.cli.service")}
BODIES = ("engine", "sim", "service")
# the policy API a body may use: the protocol and registry, and (issue 24) building a policy from a user's spec
POLICY_API = ("elastisched.policies", "elastisched.policies.base", "elastisched.policies.plugins",
              "elastisched.policies.options")


def wing_of(module: str, src: Path = SRC, pkg: str = PKG) -> str | None:
    """The wing (a sub-package of `policies/`) a module lives in, or None."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == [pkg, "policies"] and (src / pkg / "policies" / parts[2]).is_dir():
        return parts[2]
    return None


def wing_violations(graph: dict[str, set[str]], src: Path = SRC, pkg: str = PKG) -> list[str]:
    """A wing's module imported from outside its own wing and `experiments/`; a body (engine, sim, service)
    importing anything of `policies` but its base and registry."""
    bad = []
    for mod, targets in graph.items():
        layer = mod.split(".")[1] if "." in mod else ""
        for t in targets:
            wing = wing_of(t, src, pkg)
            if wing is not None and wing_of(mod, src, pkg) != wing and layer != "experiments":
                bad.append(f"{mod} imports {t} (wing {wing!r})")
            elif layer in BODIES and t.startswith(f"{pkg}.policies") and t not in POLICY_API:
                bad.append(f"{mod} imports {t} (a body uses only policies.base)")
    return sorted(bad)


def _transitive_importers(graph: dict[str, set[str]], module: str, within: str) -> set[str]:
    """Modules importing `module`, directly or through modules under `within` (e.g. models/)."""
    importers: dict[str, set[str]] = {}
    for a, targets in graph.items():
        for b in targets:
            importers.setdefault(b, set()).add(a)
    seen: set[str] = set()
    todo = [module]
    while todo:
        for a in importers.get(todo.pop(), ()):
            if a not in seen:
                seen.add(a)
                if a.startswith(within):
                    todo.append(a)
    return seen


def lonely_models(graph: dict[str, set[str]], src: Path = SRC, pkg: str = PKG) -> list[str]:
    """Modules of models/ whose users (directly or through other models/ modules) are neither the simulator, the
    engine nor the service, nor at least two wings: what one policy believes belongs in its wing."""
    bad = []
    for mod in sorted(graph):
        if not mod.startswith(f"{pkg}.models.") or (src / Path(*mod.split("."))).is_dir():
            continue
        users = _transitive_importers(graph, mod, f"{pkg}.models")
        bodies = {u.split(".")[1] for u in users} & set(BODIES)
        wings = {w for u in users if (w := wing_of(u, src, pkg))}
        if not bodies and len(wings) < 2:
            bad.append(f"{mod}: used by {sorted(users) or 'nothing'}")
    return bad


def unreachable(graph: dict[str, set[str]], entry_points: Iterable[str] = ENTRY_POINTS) -> list[str]:
    """Modules no entry point reaches through imports, registries and plugin tables (a package's module also
    reaches its package `__init__`, which Python runs first)."""
    edges = {m: set(ts) for m, ts in graph.items()}
    for importer, prefix in DYNAMIC.items():
        if importer in edges:
            edges[importer].update(m for m in graph if m.startswith(prefix))
    for importer, plugins in PLUGINS.items():
        edges.setdefault(importer, set()).update(p for p in plugins if p in graph)
    for m in graph:
        parent = m.rpartition(".")[0]
        if parent in graph:
            edges[m].add(parent)
    seen = {e for e in entry_points if e in graph}
    todo = list(seen)
    while todo:
        for t in edges.get(todo.pop(), ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return sorted(set(graph) - seen)


def test_wings_are_private_and_bodies_see_only_the_policy_api() -> None:
    graph, _ = import_graph()
    bad = wing_violations(graph)
    assert not bad, "\n".join(bad)


def test_every_module_directly_in_models_is_shared_truth() -> None:
    graph, _ = import_graph()
    bad = lonely_models(graph)
    assert not bad, "\n".join(bad)


def test_every_module_is_reachable_from_an_entry_point() -> None:
    graph, _ = import_graph()
    bad = unreachable(graph)
    assert not bad, "reached only by tests or benchmarks (wire it in or delete it):\n" + "\n".join(bad)


def test_every_entry_point_exists() -> None:
    mods = modules()
    assert [e for e in ENTRY_POINTS if e not in mods] == []


def test_planted_wing_body_model_and_reachability_breaches_are_found(tmp_path: Path) -> None:
    src = _plant(tmp_path, {
        "policies/base.py": "",
        "policies/alpha/policy.py": "from elastisched.policies.alpha import helper\n",
        "policies/alpha/helper.py": "from elastisched.models import shared, lonely\n",
        "policies/beta/policy.py": ("from elastisched.policies.alpha import helper\n"
                                    "from elastisched.models import shared\n"),
        "models/shared.py": "", "models/lonely.py": "",
        "sim/run.py": "from elastisched.policies import base\nfrom elastisched.policies.alpha import policy\n",
        "experiments/study.py": "from elastisched.policies.alpha import policy\n",
        "cli/main.py": "from elastisched.sim import run\n",
        "orphan.py": "",
    })
    graph, _ = import_graph(src)
    assert wing_violations(graph, src) == [
        "elastisched.policies.beta.policy imports elastisched.policies.alpha.helper (wing 'alpha')",
        "elastisched.sim.run imports elastisched.policies.alpha.policy (wing 'alpha')",
    ]
    assert lonely_models(graph, src) == ["elastisched.models.lonely: used by ['elastisched.policies.alpha.helper']"]
    assert "elastisched.orphan" in unreachable(graph, ["elastisched.cli.main"])
    assert "elastisched.experiments.study" in unreachable(graph, ["elastisched.cli.main"])
    assert "elastisched.policies.alpha.policy" not in unreachable(graph, ["elastisched.cli.main"])


def test_a_flat_policy_imports_no_wing() -> None:
    """`make_policy("fifo")` loads fifo alone: a `sim run -p fifo` pays for no optimiser's imports."""
    import subprocess
    import sys

    code = ("import sys; from elastisched.policies.base import make_policy; make_policy('fifo'); "
            "print(' '.join(m for m in sys.modules if m.startswith('elastisched.policies.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "elastisched.policies.fifo" in loaded
    assert [m for m in loaded if wing_of(m)] == []
    # issue 24: no plug-in machinery (spec parsing, file and module loading, option declarations) either
    assert {"elastisched.policies.plugins", "elastisched.policies.options"}.isdisjoint(loaded), loaded
    code = ("import sys; from elastisched.policies.base import make_policy; make_policy('fifo'); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('importlib.metadata'))))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() \
        == [], "a built-in name needs no entry-point lookup"
