"""Per-rank wrapper: run the worker, forward SIGTERM/SIGINT, write its exit code to a file atomically.

The file holds the code and the signals the wrapper forwarded: a worker of the training library exits 0
both when it finished and when it checkpointed on SIGTERM, and only the latter must be relaunched.

The file is what lets a restarted service learn how a worker it did not start (or that ended while the
service was down) finished: a PID alone says nothing once the process is gone. Stdlib only, so it costs
milliseconds next to a worker that imports torch.

Usage: python -m elastisched.backends._wrap EXIT_FILE -- CMD [ARGS...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _wrap EXIT_FILE -- CMD [ARGS...]", file=sys.stderr)
        return 2
    exit_file, cmd = argv[0], argv[2:]
    child = subprocess.Popen(cmd)
    got: list[str] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        got.append(signal.Signals(signum).name)
        if child.poll() is None:
            child.send_signal(signum)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)
    code = child.wait()
    tmp = f"{exit_file}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(" ".join([str(code), *sorted(set(got))]))  # "0 SIGTERM": stopped on request, not finished
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, exit_file)
    return 0 if code == 0 else (code if code > 0 else 128 - code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
