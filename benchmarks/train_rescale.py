"""Rescale downtime of the example job: SIGTERM sent → first step done at the new world size.

Runs examples/linreg_elastic.py under the local launcher, lets it train to the middle of an epoch,
sends SIGTERM (workers finish the step, checkpoint, exit 0), relaunches at the next size at once (from a
WarmPool of pre-imported interpreters, and cold for comparison) and reads the wall time of the first step
of the new generation from the example's log.
Writes <out>/train_rescale.json. Target (issue 6): downtime ≤ 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from elastisched.train.launcher import WarmPool, restart, start_workers  # noqa: E402

EXAMPLE = ROOT / "examples" / "linreg_elastic.py"
TARGET_S = 5.0
# Global batch 64 at every size: local batch × per-rank accumulation (IIDP-style for 3).
CONFIGS: dict[int, dict] = {1: {"local_batch": 32, "accum": [2]}, 2: {"local_batch": 32, "accum": [1, 1]},
                            3: {"local_batch": 16, "accum": [2, 1, 1]}, 4: {"local_batch": 16, "accum": [1] * 4}}


def _records(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


def _wait(log: Path, pred, timeout: float = 120.0) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in _records(log):
            if pred(r):
                return r
        time.sleep(0.005)
    raise TimeoutError(f"no matching record in {log}")


MODES = ("pool", "cold")


def one_run(sizes: list[int], steps_between: int, mode: str) -> list[dict]:
    """pool: relaunch in pre-imported interpreters (WarmPool); cold: fresh processes after the stop."""
    with tempfile.TemporaryDirectory(prefix="elastisched-rescale-") as tmp:
        ck, log = Path(tmp) / "ck", Path(tmp) / "loss.jsonl"
        args = ["--epochs", "1000", "--log", str(log)]
        kw = {"checkpoint_dir": str(ck), "stdout": subprocess.DEVNULL}
        pool = WarmPool(max(sizes), stdout=subprocess.DEVNULL) if mode == "pool" else None
        if pool is not None:
            pool.wait_ready()
        group = start_workers(EXAMPLE, args, nproc=sizes[0], **CONFIGS[sizes[0]], generation=0, **kw)
        _wait(log, lambda r: r["gen"] == 0 and r["step"] >= steps_between)
        out = []
        for gen, size in enumerate(sizes[1:], start=1):
            last = max(r["step"] for r in _records(log))
            old = group
            t_term = time.time()
            group = restart(old, EXAMPLE, args, nproc=size, **CONFIGS[size], generation=gen, grace=30.0,
                            pool=pool, **kw)
            t_exit = time.time()
            first = _wait(log, lambda r, g=gen: r["gen"] == g)
            if pool is not None:  # off the critical path: after the first step at the new size
                pool.refill()
                pool.wait_ready()
            out.append({"from": sizes[gen - 1], "to": size, "mode": mode,
                        "downtime_s": first["t"] - t_term, "old_generation_exit_s": t_exit - t_term,
                        "exit_codes": old.poll(), "last_step_before": last, "first_step_after": first["step"],
                        "resumed_epoch": first["epoch"]})
            until = first["step"] + steps_between
            _wait(log, lambda r, g=gen, u=until: r["gen"] == g and r["step"] >= u)
        group.stop(grace=30.0)
        if pool is not None:
            pool.close()
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="2,3,1")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    events = [e for _ in range(a.reps) for mode in MODES for e in one_run(sizes, 20, mode)]

    def summary(mode: str) -> dict[str, float]:
        d = [e["downtime_s"] for e in events if e["mode"] == mode]
        return {"median": statistics.median(d), "max": max(d), "min": min(d), "n": len(d)}

    warm, cold = summary("pool"), summary("cold")
    result = {
        "benchmark": "train_rescale", "model": "examples/linreg_elastic.py (linear, d=32, N=8192)",
        "sizes": sizes, "reps": a.reps, "events": events,
        "downtime_s": warm, "downtime_cold_start_s": cold, "load_avg_1m": os.getloadavg()[0],
        "target_s": TARGET_S, "pass": warm["median"] <= TARGET_S,
        "python": platform.python_version(), "machine": platform.machine(), "time": time.time(),
    }
    Path(a.out).mkdir(parents=True, exist_ok=True)
    path = Path(a.out) / "train_rescale.json"
    path.write_text(json.dumps(result, indent=2))
    keys = ("downtime_s", "downtime_cold_start_s", "target_s", "pass", "load_avg_1m")
    print(json.dumps({k: result[k] for k in keys}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
