"""Run a worker script as __main__ and end the process with `hard_exit`.

Launched workers start as `python -u -m elastisched.train._entry SCRIPT ARGS...` (and warm-pool
interpreters call `run_script` the same way) so that a script which simply returns, or calls
`sys.exit(n)`, still leaves through `hard_exit`: the exit code is the script's, and gloo's threads
never reach interpreter teardown, where they can abort a finished run (see `hard_exit`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import runpy
import sys
import threading
import traceback
import warnings
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
    hard_exit(code)


def hard_exit(code: int, *, wait_threads: bool = True) -> NoReturn:
    """End the worker with `code` without interpreter teardown, losing nothing a script wrote.

    Does what interpreter shutdown does first -- waits for non-daemon threads and queued
    `concurrent.futures` work (`threading._shutdown`), runs atexit handlers -- then destroys the process
    group, flushes every open file object and calls `os._exit`. The checkpoint-and-exit of a resize passes
    `wait_threads=False`: its state is already saved, and a user thread that never ends must not hold the
    resize until the backend's SIGKILL.
    Skipping teardown saves about 1 s of resize downtime with torch loaded, and avoids a gloo abort in
    teardown: left to static destructors, gloo can destroy a joinable thread ("terminate called without
    an active exception", exit -6 after a successful run; about 1 run in 50 under CPU load).
    """
    shutdown = getattr(threading, "_shutdown", None)  # CPython's own first step of finalisation
    if wait_threads and shutdown is not None and threading.current_thread() is threading.main_thread():
        shutdown()
    atexit._run_exitfuncs()
    dist = sys.modules.get("torch.distributed")  # never import torch here: a script may not use it
    if dist is not None and dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if issubclass(type(obj), io.IOBase):  # type(), not isinstance: no __class__ lookups
                with contextlib.suppress(Exception):
                    if not obj.closed:
                        obj.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m elastisched.train._entry SCRIPT [ARGS...]", file=sys.stderr)
        sys.exit(2)
    run_script(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    main()
