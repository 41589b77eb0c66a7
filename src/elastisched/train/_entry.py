"""Run a worker script as __main__ and end the process with `runtime.hard_exit`.

Launched workers start as `python -u -m elastisched.train._entry SCRIPT ARGS...` (and warm-pool
interpreters call `run_script` the same way) so that a script which simply returns, or calls
`sys.exit(n)`, still leaves through `hard_exit`: the exit code is the script's, and gloo's threads
never reach interpreter teardown, where they can abort a finished run (see `hard_exit`).
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from typing import NoReturn


def exit_code(exc: SystemExit) -> int:
    """The status `sys.exit(arg)` gives a process: None -> 0, int -> itself, anything else printed -> 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_script(script: str, args: list[str]) -> NoReturn:
    """`python SCRIPT ARGS` semantics (argv, sys.path[0] = the script's folder), then `hard_exit`."""
    script = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:  # report like the interpreter would, then exit 1
        traceback.print_exc()
        code = 1
    from elastisched.train.runtime import hard_exit  # torch is loaded by now; not before the script

    hard_exit(code)


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m elastisched.train._entry SCRIPT [ARGS...]", file=sys.stderr)
        sys.exit(2)
    run_script(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    main()
