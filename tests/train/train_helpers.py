"""Helpers for real multi-process runs of tests/train/worker.py (gloo on 127.0.0.1, free ports)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WORKER = Path(__file__).with_name("worker.py")
PY = sys.executable


def launch_cmd(nproc: int, *, accum: str | None = None, local_batch: int | None = None,
               ckpt: Path | None = None, generation: int = 0, worker_args: list[str] = ()) -> list[str]:
    cmd = [PY, "-m", "elastisched.train.commands", "launch", "--nproc", str(nproc),
           "--generation", str(generation), "--grace", "20"]
    if accum:
        cmd += ["--accum", accum]
    if local_batch:
        cmd += ["--local-batch", str(local_batch)]
    if ckpt:
        cmd += ["--checkpoint-dir", str(ckpt)]
    return [*cmd, str(WORKER), *worker_args]


def run_launch(*args: object, timeout: float = 90, **kw: object) -> subprocess.CompletedProcess[str]:
    cmd = launch_cmd(*args, **kw)  # type: ignore[arg-type]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd}\n{res.stdout}\n{res.stderr}"
    return res


def read_trace(d: Path) -> list[dict]:
    out: list[dict] = []
    for f in sorted(d.glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def losses(d: Path) -> dict[int, float]:
    """step -> full-data loss after that step (rank 0 records); a repeated step would be a bug."""
    out: dict[int, float] = {}
    for r in read_trace(d):
        if "loss_full" in r:
            assert r["step"] not in out, f"step {r['step']} recorded twice"
            out[r["step"]] = r["loss_full"]
    return out


def run_until_then_sigterm(cmd: list[str], trace: Path, step: int, timeout: float = 60) -> str:
    """Start the launcher, wait until rank 0 recorded `step`, SIGTERM the launcher; assert it exits 0 and
    return its stderr."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if trace.exists() and max(losses(trace), default=0) >= step:
                break
            if p.poll() is not None:
                raise AssertionError(f"launcher ended early: {p.communicate()}")
            time.sleep(0.02)
        else:
            raise AssertionError("step never reached")
        os.kill(p.pid, signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        return err
    finally:
        if p.poll() is None:
            p.kill()
