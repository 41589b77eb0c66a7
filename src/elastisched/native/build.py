"""Builds the compiled core: Cython over the unchanged sources of `native.MODULES`, into `native.build_dir()`."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from elastisched.native import MANIFEST, MODULES, build_dir
from elastisched.native.finder import source_digest

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the `elastisched` package
#: Python's semantics kept whole: annotations are not read as C types (a `float` parameter would become a C
#: double, turning an int argument into a float), functions stay introspectable (signatures, pickling)
DIRECTIVES = {"language_level": 3, "binding": True, "annotation_typing": False}


class NativeBuildError(RuntimeError):
    """The compiled core could not be built (no Cython, no C compiler, or a module that does not compile)."""


def build(dest: Path | None = None, modules: Sequence[str] = MODULES, jobs: int | None = None) -> Path:
    """Compile `modules` into `dest` and write its manifest (last, so an interrupted build is never used);
    returns the manifest's path. The sources are copied first and digested as copied."""
    try:
        import Cython
        from Cython.Build import cythonize
        from setuptools import Distribution, Extension
    except ImportError as e:
        raise NativeBuildError("the compiled core needs Cython and setuptools: pip install -e '.[native]'") from e
    dest = Path(dest) if dest is not None else build_dir()
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST).unlink(missing_ok=True)
    jobs = jobs or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="elastisched-native-") as tmp:
        digests, exts = {}, []
        for name in modules:
            rel = Path(*name.split(".")).with_suffix(".py")
            source = (PACKAGE_ROOT / rel).read_bytes()
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_bytes(source)
            digests[name] = source_digest(source)
            exts.append(Extension(name, [str(Path(tmp) / rel)]))
        try:
            compiled = cythonize(exts, compiler_directives=DIRECTIVES, quiet=True, nthreads=jobs,
                                 build_dir=str(Path(tmp) / "c"))
            cmd = Distribution({"ext_modules": compiled}).get_command_obj("build_ext")
            cmd.build_lib, cmd.build_temp, cmd.parallel = str(Path(tmp) / "lib"), str(Path(tmp) / "obj"), jobs
            cmd.ensure_finalized()
            cmd.run()
        except Exception as e:  # (Cython's CompileError, distutils' CCompilerError and friends)
            raise NativeBuildError(f"building the compiled core failed: {e}") from e
        entries = {}
        for name in modules:
            built = Path(cmd.get_ext_fullpath(name))
            file = f"{name}{built.name[built.name.index('.'):]}"
            # a new file, not the old one overwritten: a running process may have the old one mapped
            shutil.copyfile(built, dest / (file + ".part"))
            (dest / (file + ".part")).replace(dest / file)
            entries[name] = {"file": file, "sha256": digests[name]}
    manifest = {"ext_suffix": importlib.machinery.EXTENSION_SUFFIXES[0], "cython": Cython.__version__,
                "modules": entries}
    part = dest / (MANIFEST + ".part")
    part.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    part.replace(dest / MANIFEST)
    return dest / MANIFEST
