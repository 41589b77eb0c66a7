"""A stdlib-only worker on the launch contract (no torch: milliseconds to start, for backend tests).

Runs STEPS steps of SLEEP seconds; rank 0 keeps its step in <checkpoint_dir>/progress.json. SIGTERM sets a
flag; the worker checkpoints and exits 0 at the next step, as the training library does.
--fail-once-at K exits 3 at step K the first time (a marker file makes the retry pass).
--teardown-abort: ranks other than 0 abort (SIGABRT, as gloo's teardown can) after finishing their steps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

stop = False


def _on_term(_s: int, _f: object) -> None:
    global stop
    stop = True


def _save(prog: Path, step: int) -> None:
    """Atomically (tests poll this file while the worker runs)."""
    tmp = prog.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, prog)


def _under_entry() -> bool:
    """Whether this script runs under `python -m elastisched.train._entry` (a caller frame of that module)."""
    f = sys._getframe()
    while f is not None:
        spec = f.f_globals.get("__spec__")
        if spec is not None and spec.name == "elastisched.train._entry":
            return True
        f = f.f_back  # type: ignore[assignment]
    return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sleep", type=float, default=0.1)
    ap.add_argument("--fail-once-at", type=int, default=-1)
    ap.add_argument("--fail-always", action="store_true")
    ap.add_argument("--teardown-abort", action="store_true")
    ap.add_argument("--hints-every", type=int, default=0, help="rank 0 appends a hints.jsonl line every K steps")
    ap.add_argument("--note", default="", help="ignored (an argument another user must not be able to read)")
    ap.add_argument("--show-env", action="store_true", help="print the environment as one JSON line first")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    if a.show_env:
        print(json.dumps({"env": dict(os.environ)}), flush=True)
    ck = Path(os.environ["ELASTISCHED_CHECKPOINT_DIR"])
    rank = int(os.environ["ELASTISCHED_RANK"])
    world = int(os.environ["ELASTISCHED_WORLD_SIZE"])
    gen = int(os.environ["ELASTISCHED_GENERATION"])
    prog = ck / "progress.json"
    step = json.loads(prog.read_text())["step"] if prog.exists() else 0
    print(json.dumps({"start": True, "gen": gen, "rank": rank, "world": world, "step": step,
                      "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "local_rank": os.environ.get("LOCAL_RANK"),
                      "entry": _under_entry()}),
          flush=True)
    if a.fail_always:
        return 4
    while step < a.steps:
        if stop:
            if rank == 0:
                _save(prog, step)
            print(json.dumps({"checkpointed": step, "gen": gen}), flush=True)
            return 0
        if step == a.fail_once_at and not (ck / "failed-once").exists():
            (ck / "failed-once").write_text("x")
            return 3
        time.sleep(a.sleep)
        step += 1
        if rank == 0:
            _save(prog, step)
            if a.hints_every and step % a.hints_every == 0:
                with open(ck / "hints.jsonl", "a") as f:
                    f.write(json.dumps({"time": time.time(), "generation": gen, "step": step, "epoch": 0,
                                        "world_size": world, "globalBatchSize": 8, "throughput": 8 / a.sleep}) + "\n")
    print(json.dumps({"done": step, "gen": gen, "world": world}), flush=True)
    if a.teardown_abort and rank != 0:
        time.sleep(0.2)  # rank 0 has exited 0 by now
        os.abort()
    return 0


if __name__ == "__main__":
    sys.exit(main())
