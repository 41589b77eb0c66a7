"""Fault injection for crash tests, off by default: a deterministic place to `kill -9` the service.

A crash between two writes (a generation planned in the store, its workers spawned, their PIDs recorded)
is the case recovery must get right, and a random kill almost never lands in a window of milliseconds.
With `ELASTISCHED_DEBUG_PAUSE_AT=POINT[:N]` and `ELASTISCHED_DEBUG_PAUSE_FILE=PATH` in the service's
environment, the N-th time (default the 1st) the process reaches POINT it writes PATH ("POINT WHAT") and
blocks that thread until the process is killed. Points: `planned` (a generation is in the store, nothing
spawned yet), `rank` (a rank other than the last of a generation spawned, the rest not), `spawned` (all
ranks spawned, their PIDs not yet reported to the store), `stopping` (SIGTERM sent to the workers being
stopped, not yet waited for), `ended` (a generation's end recorded, what follows from it not yet), `submitted`
(a submission committed, its answer not yet sent).
Used by `tests/service/test_crash_soak.py` and `benchmarks/crash_soak.py`.
"""

from __future__ import annotations

import os
import time

PAUSE_AT = "ELASTISCHED_DEBUG_PAUSE_AT"
PAUSE_FILE = "ELASTISCHED_DEBUG_PAUSE_FILE"
POINTS = ("planned", "rank", "spawned", "stopping", "ended", "submitted")
_seen: dict[str, int] = {}


def pause(point: str, what: str) -> None:
    """Block here for good if the environment arms this point and this is its N-th visit; else return."""
    spec = os.environ.get(PAUSE_AT)
    if not spec:
        return
    name, _, nth = spec.partition(":")
    path = os.environ.get(PAUSE_FILE)
    if name != point or not path:
        return
    _seen[point] = _seen.get(point, 0) + 1
    if _seen[point] != (int(nth) if nth.isdigit() and int(nth) > 0 else 1):
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{point} {what}\n")
    os.replace(tmp, path)
    while True:  # until kill -9
        time.sleep(3600)
