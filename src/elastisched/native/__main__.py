"""`python -m elastisched.native build | status`: build the compiled core, or say what a run would import."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from elastisched.native import DIR_ENV, MANIFEST, OFF_ENV, build_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m elastisched.native",
        description="The compiled core: the simulator's hot modules compiled by Cython from their unchanged "
                    "source (same results, less CPU). Optional; needs Cython and a C compiler "
                    "(pip install -e '.[native]').")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile the modules (about 2 minutes) into the build folder")
    b.add_argument("--dest", type=Path, default=None, help=f"build folder (default: ${DIR_ENV} or {build_dir()})")
    b.add_argument("--jobs", type=int, default=None, help="parallel compiler jobs (default: every core)")
    sub.add_parser("status", help="per module: compiled, stale (its source changed since the build) or missing")
    args = parser.parse_args(argv)
    if args.command == "build":
        from elastisched.native.build import NativeBuildError, build

        try:
            manifest = build(args.dest, jobs=args.jobs)
        except NativeBuildError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"compiled core built: {manifest.parent} (switch it off with {OFF_ENV}=0)")
        return 0
    from elastisched.native.finder import CompiledFinder

    finder = CompiledFinder.from_manifest(build_dir() / MANIFEST)
    if finder is None:
        print(f"no compiled core in {build_dir()}: every module is imported from its source (make native)")
        return 0
    for name, state in finder.status().items():
        print(f"{state:9s} {name}")
    if os.environ.get(OFF_ENV) == "0":
        print(f"(switched off here by {OFF_ENV}=0: every module is imported from its source)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
