"""The service's channel into running workers: `batch-target.json` in the checkpoint dir (backends/hints.py)
changes the global batch in place, at one step boundary on every rank, with no restart and no sample lost."""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from train_helpers import launch_cmd, losses, read_trace

from elastisched.backends.hints import write_batch_target

N, B0, B1 = 96, 16, 24


def _wait_step(trace: Path, step: int, p: subprocess.Popen[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while max(losses(trace), default=0) < step:
        assert p.poll() is None, f"launcher ended early: {p.communicate()}"
        assert time.monotonic() < deadline, f"step {step} never reached"
        time.sleep(0.02)


def test_batch_target_changes_batch_in_place_on_all_ranks(tmp_path: Path) -> None:
    ck, tr = tmp_path / "ck", tmp_path / "tr"
    cmd = launch_cmd(2, ckpt=ck, worker_args=["--n", str(N), "--batch", str(B0), "--epochs", "3", "--sleep", "0.15",
                                              "--stats-interval", "2", "--trace", str(tr)])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_step(tr, 2, p)
        write_batch_target(ck, B1, generation=7)  # for another generation: ignored
        _wait_step(tr, max(losses(tr)) + 3, p)
        written = max(losses(tr))
        write_batch_target(ck, B1, generation=0)  # this launch's generation
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    size: dict[tuple[int, int], int] = defaultdict(int)
    seen: dict[int, list[int]] = defaultdict(list)
    for r in read_trace(tr):
        size[(r["epoch"], r["step"])] += len(r["idx"])
        seen[r["epoch"]] += r["idx"]
    assert all(sorted(ix) == list(range(N)) for ix in seen.values()) and len(seen) == 3  # each sample once an epoch
    steps = [size[k] for k in sorted(size, key=lambda k: k[1])]
    switch = next(i for i, s in enumerate(steps) if s == B1)
    assert switch >= written  # not before the file for this generation was written (the other one was ignored)
    assert set(steps[:switch]) == {B0}
    # after the switch every step is B1 but an epoch's short last step (96 = 4 × 24: none is short)
    assert set(steps[switch:]) == {B1}
    hints = [json.loads(x) for x in (ck / "hints.jsonl").read_text().splitlines()]
    sched = [h for h in hints if h.get("source") == "scheduler"]
    assert [(h["previousBatchSize"], h["globalBatchSize"], h["step"]) for h in sched] == [(B0, B1, switch)]
    assert all(h["globalBatchSize"] == B1 for h in hints if h["step"] > switch)
