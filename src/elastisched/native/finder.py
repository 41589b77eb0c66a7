"""The import hook of the compiled core: a compiled module is imported only while its source is unchanged."""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


def source_digest(source: bytes) -> str:
    """The digest a build records for a module's source, and the hook compares with."""
    return hashlib.sha256(source).hexdigest()


class CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the built extension of each module in a build's manifest whose source file, as the path finder
    would import it, has the digest the build recorded; defers to the usual finders otherwise."""

    def __init__(self, directory: Path, modules: dict[str, dict[str, str]]) -> None:
        self.directory = directory
        self.modules = modules  # module name -> {"file": extension's file name, "sha256": its source's digest}
        self.loaded: set[str] = set()
        self.stale: set[str] = set()

    @classmethod
    def from_manifest(cls, manifest: Path) -> CompiledFinder | None:
        """The hook of the build whose manifest this is; None when there is none, or it was built for another
        interpreter (a warning says so: a build of another Python would not load)."""
        try:
            data = json.loads(manifest.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            warnings.warn(f"elastisched: compiled core ignored, unreadable manifest {manifest}: {e}", stacklevel=2)
            return None
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        if data.get("ext_suffix") != suffix:
            warnings.warn(f"elastisched: compiled core ignored, built for {data.get('ext_suffix')!r}, this Python "
                          f"loads {suffix!r}; rebuild with `make native`", stacklevel=2)
            return None
        return cls(manifest.parent, dict(data.get("modules", {})))

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        entry = self.modules.get(fullname)
        if entry is None:
            return None
        built = self.directory / entry["file"]
        source = importlib.machinery.PathFinder.find_spec(fullname, path)
        if source is None or not source.origin or not built.is_file():
            return None
        if source_digest(Path(source.origin).read_bytes()) != entry["sha256"]:
            if fullname not in self.stale:
                self.stale.add(fullname)
                warnings.warn(f"elastisched: {fullname} changed since the compiled core was built; importing its "
                              f"source (rebuild with `make native`)", stacklevel=2)
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(built))
        spec = importlib.util.spec_from_file_location(fullname, built, loader=loader)
        if spec is not None:
            self.loaded.add(fullname)
        return spec

    def status(self) -> dict[str, Any]:
        """Per module of the build: "compiled", "stale" (its source changed) or "missing" (no extension file)."""
        out: dict[str, Any] = {}
        for name, entry in sorted(self.modules.items()):
            spec = importlib.util.find_spec(name.rpartition(".")[0])
            paths = spec.submodule_search_locations if spec is not None else None
            source = importlib.machinery.PathFinder.find_spec(name, paths)
            if not (self.directory / entry["file"]).is_file():
                out[name] = "missing"
            elif source is None or not source.origin or \
                    source_digest(Path(source.origin).read_bytes()) != entry["sha256"]:
                out[name] = "stale"
            else:
                out[name] = "compiled"
        return out


