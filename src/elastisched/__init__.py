"""elastisched: elastic scheduling of deep-learning training on shared GPU clusters.

The Python API (docs/python.md): `elastisched.simulate`, `elastisched.compare`, `elastisched.sweep`, loaded on
first use so that `import elastisched` (and the command's start-up) costs nothing. Importing it installs the
compiled core's import hook when a build exists (`elastisched.native`), before any other module is imported.
"""

from __future__ import annotations

from typing import Any

from elastisched import native as _native

_native.install()

__version__ = "0.1.0"
__all__ = ["__version__", "compare", "simulate", "sweep"]


def __getattr__(name: str) -> Any:
    if name in ("simulate", "compare", "sweep", "Run", "Comparison", "Sweep"):
        from elastisched import api

        return getattr(api, name)
    raise AttributeError(f"module 'elastisched' has no attribute {name!r}")
