"""Run a job's script with arguments read from a file, so that they never appear on a command line.

`/proc/PID/cmdline` is readable by every local account (unless procfs is mounted `hidepid=2`), so a job's
arguments on a command line are another user's to read. A rank therefore starts as `python -u -m
elastisched.backends._argv FILE`, where FILE (private to the job's account) holds the JSON list
`[script, arg, ...]`; the script then runs exactly as under `python -m elastisched.train._entry script arg...`
(`sys.argv`, `sys.path[0]`, the clean exit path). Stdlib and `train._entry` only: it starts in milliseconds.

Usage: python -m elastisched.backends._argv ARGV_FILE
"""

from __future__ import annotations

import json
import sys

from elastisched.train._entry import run_script


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        print("usage: python -m elastisched.backends._argv ARGV_FILE", file=sys.stderr)
        sys.exit(2)
    try:
        with open(argv[0], encoding="utf-8") as f:
            words = json.load(f)
    except (OSError, ValueError) as e:
        print(f"elastisched: cannot read the job's arguments from {argv[0]}: {e}", file=sys.stderr)
        sys.exit(2)
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        print(f"elastisched: {argv[0]} must hold a JSON list [script, arg, ...]", file=sys.stderr)
        sys.exit(2)
    run_script(words[0], words[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
