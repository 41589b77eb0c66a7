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

    def state(self, fullname: str, path: Sequence[str] | None) -> str:
        """"compiled" (the extension of an unchanged source), "stale" (the source, as the path finder would import
        it from `path`, changed since the build) or "missing" (no extension file, or no source)."""
        entry = self.modules[fullname]
        source = importlib.machinery.PathFinder.find_spec(fullname, path)
        if source is None or not source.origin or not (self.directory / entry["file"]).is_file():
            return "missing"
        return "compiled" if source_digest(Path(source.origin).read_bytes()) == entry["sha256"] else "stale"

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        state = self.state(fullname, path)
        if state == "stale" and fullname not in self.stale:
            self.stale.add(fullname)
            warnings.warn(f"elastisched: {fullname} changed since the compiled core was built; importing its "
                          f"source (rebuild with `make native`)", stacklevel=2)
        if state != "compiled":
            return None
        built = self.directory / self.modules[fullname]["file"]
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(built))
        spec = importlib.util.spec_from_file_location(fullname, built, loader=loader)
        if spec is not None:
            self.loaded.add(fullname)
        return spec

    def status(self) -> dict[str, str]:
        """`state` of each module of the build, by name (the parent packages are imported to find the sources)."""
        out: dict[str, str] = {}
        for name in sorted(self.modules):
            parent = importlib.util.find_spec(name.rpartition(".")[0])
            out[name] = self.state(name, parent.submodule_search_locations if parent is not None else None)
        return out
