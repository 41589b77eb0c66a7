"""Per-rank wrapper: run the worker, forward SIGTERM/SIGINT, write its exit code to a file atomically.

The file holds the code and the signals the wrapper forwarded: a worker of the training library exits 0
both when it finished and when it checkpointed on SIGTERM, and only the latter must be relaunched.

The worker's own word decides the ambiguous case: a SIGTERM forwarded after its last step finds a worker
that finished, not one that checkpointed. The training library says which through the stop note
(`train.contract.STOP_NOTE`, see `settled_signals`); a script without the library keeps the old reading.

The file is what lets a restarted service learn how a worker it did not start (or that ended while the
service was down) finished: a PID alone says nothing once the process is gone. Stdlib only, so it costs
milliseconds next to a worker that imports torch.

Usage: python -m elastisched.backends._wrap EXIT_FILE -- CMD [ARGS...]
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import FrameType

STOP_NOTE = "ELASTISCHED_STOP_NOTE"  # = train.contract.STOP_NOTE (this module imports nothing of ours)


def settled_signals(got: set[str] | list[str], code: int, note_path: str) -> list[str]:
    """The stop signals to record for a worker that exited with `code` after `got` were forwarded to it.

    A training-library worker writes "library" into the note at start and "checkpointed" on its stop path:
    exit 0 with "library" means it finished its work and the signal came too late to matter; exit 0 with
    "checkpointed" means it stopped before the end, even when the signal reached it directly, not through us.
    """
    try:
        with open(note_path, encoding="utf-8") as f:
            note = f.read().strip()
    except OSError:
        note = ""  # not the training library (or it never started): keep what was forwarded
    if code == 0 and note == "library":
        return []
    if code == 0 and note == "checkpointed" and not got:
        return ["SIGTERM"]  # stopped by a signal sent to the worker itself (not through us): still not finished
    return sorted(set(got))


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _wrap EXIT_FILE -- CMD [ARGS...]", file=sys.stderr)
        return 2
    exit_file, cmd = argv[0], argv[2:]
    note = f"{exit_file}.note"
    with contextlib.suppress(OSError):
        os.unlink(note)
    child = subprocess.Popen(cmd, env={**os.environ, STOP_NOTE: note})
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
        f.write(" ".join([str(code), *settled_signals(got, code, note)]))  # "0 SIGTERM": stopped, not finished
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, exit_file)
    return 0 if code == 0 else (code if code > 0 else 128 - code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
