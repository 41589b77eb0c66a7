"""The compiled core: the simulator's hot modules, compiled by Cython from their unchanged source (optional).

A replay spends its CPU in the interpreter's handling of small objects and calls (docs/scale.md), not in
numpy. Cython compiles the very same `.py` files (no type annotations for it, no second source) into extension
modules that skip the interpreter's bytecode dispatch; every operation keeps Python's semantics, so a run's
outputs are the same bit for bit (tests/native/test_native.py compares whole runs), and a run records which
modules were compiled (`summary.json` `compiled_modules`).

Nothing here is needed to run: without a build, or with `ELASTISCHED_NATIVE=0`, every module is imported from
its source. `make native` (or `python -m elastisched.native build`) needs Cython and a C compiler. A compiled
module is imported only while its source is the one it was built from (a SHA-256 kept in the build's
manifest): an edited module falls back to its source with a warning, never to stale code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: modules compiled by `build`: the replay's event loop and bookkeeping, the engine's round, the core types and
#: models a job goes through, and the policies whose rounds are per-job Python work (FIFO, Tiresias)
MODULES: tuple[str, ...] = (
    "elastisched.core.clock", "elastisched.core.events", "elastisched.core.nodes", "elastisched.core.types",
    "elastisched.engine.epochs", "elastisched.engine.invariants", "elastisched.engine.jobstate",
    "elastisched.engine.loop", "elastisched.engine.overrides", "elastisched.engine.placer",
    "elastisched.models.application", "elastisched.models.interp_cache", "elastisched.models.throughput",
    "elastisched.policies._common", "elastisched.policies.base", "elastisched.policies.fifo",
    "elastisched.policies.tiresias.index", "elastisched.policies.tiresias.policy",
    "elastisched.sim.decompose", "elastisched.sim.idle", "elastisched.sim.metrics", "elastisched.sim.simulator",
    "elastisched.sim.table", "elastisched.sim.timing", "elastisched.sim.usage",
)
OFF_ENV = "ELASTISCHED_NATIVE"  # "0": import every module from its source
DIR_ENV = "ELASTISCHED_NATIVE_DIR"  # where the build is (default: `_built` beside this file)
MANIFEST = "manifest.json"


def build_dir() -> Path:
    """Where `build` writes the compiled modules and where the import hook looks for them."""
    return Path(os.environ.get(DIR_ENV) or Path(__file__).with_name("_built"))


def install() -> None:
    """Put the import hook first on `sys.meta_path` when a build exists and is not switched off (idempotent)."""
    if os.environ.get(OFF_ENV, "1") == "0":
        return
    from elastisched.native.finder import CompiledFinder

    if any(isinstance(f, CompiledFinder) for f in sys.meta_path):
        return
    finder = CompiledFinder.from_manifest(build_dir() / MANIFEST)
    if finder is not None:
        sys.meta_path.insert(0, finder)


def loaded() -> list[str]:
    """The modules imported compiled in this process, sorted (recorded by each run)."""
    from elastisched.native.finder import CompiledFinder

    return sorted(name for f in sys.meta_path if isinstance(f, CompiledFinder) for name in f.loaded)
