"""Acceptance: real multi-process gloo runs on 127.0.0.1 with real SIGTERM and real checkpoint files."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
from train_helpers import WORKER, launch_cmd, losses, read_trace, run_launch, run_until_then_sigterm

from elastisched.train.launcher import WarmPool, restart, start_workers

N, G, EPOCHS = 96, 16, 3  # 6 steps per epoch, 18 in all

# float32 model, k = 5 SGD-momentum steps: results agree to summation-order rounding.
RTOL, ATOL = 1e-5, 1e-6


def test_iidp_accumulation_matches_single_worker(tmp_path: Path) -> None:
    """2 workers with accumulation (1, 3) and local batch 4 == 1 worker on the whole global batch 16."""
    k = ["--max-steps", "5", "--stats-interval", "2"]  # stats steps exercise the two-halves reduce too
    run_launch(1, local_batch=16, worker_args=[*k, "--params-out", str(tmp_path / "one.json")])
    run_launch(2, accum="1,3", local_batch=4, worker_args=[*k, "--params-out", str(tmp_path / "two.json")])
    one = np.concatenate([np.array(p) for p in json.loads((tmp_path / "one.json").read_text())])
    two = np.concatenate([np.array(p) for p in json.loads((tmp_path / "two.json").read_text())])
    assert np.abs(one).max() > 0.5  # the model really moved
    np.testing.assert_allclose(two, one, rtol=RTOL, atol=ATOL)


def test_sigterm_resize_2_to_3_to_1_is_exact(tmp_path: Path) -> None:
    """SIGTERM mid-epoch at world 2, resume at 3 (heterogeneous accumulation), then at 1.

    The global batch stays 16, so the interrupted job must follow the uninterrupted one step by step:
    same loss after every step (continuity), every sample exactly once per epoch, no step repeated.
    """
    ref = tmp_path / "ref"
    run_launch(1, local_batch=16, worker_args=["--trace", str(ref)])
    ref_loss = losses(ref)
    assert sorted(ref_loss) == list(range(1, N // G * EPOCHS + 1))

    ck, tr = tmp_path / "ck", tmp_path / "trace"
    args = ["--trace", str(tr), "--sleep", "0.2"]  # slow steps: SIGTERM lands well inside the epoch
    err = run_until_then_sigterm(launch_cmd(2, local_batch=8, ckpt=ck, generation=0, worker_args=args), tr, 2)
    assert "stop requested (SIGTERM); checkpoint at step" in err  # the job's log says why it stopped
    run_until_then_sigterm(launch_cmd(3, accum="2,1,1", local_batch=4, ckpt=ck, generation=1,
                                      worker_args=args), tr, 8)
    run_launch(1, accum="4", local_batch=4, ckpt=ck, generation=2, worker_args=["--trace", str(tr)])

    recs = read_trace(tr)
    by_gen = {g: [r for r in recs if r["gen"] == g] for g in (0, 1, 2)}
    assert {r["world"] for r in by_gen[0]} == {2} and {r["world"] for r in by_gen[1]} == {3}
    # Each restart happened mid-epoch: the epoch the new generation starts in was begun by the old one.
    for old, new in ((0, 1), (1, 2)):
        first = min(by_gen[new], key=lambda r: r["step"])
        last = max(by_gen[old], key=lambda r: r["step"])
        assert first["step"] == last["step"] + 1
        assert first["epoch"] == last["epoch"] and first["step"] % (N // G) != 1
    for epoch in range(EPOCHS):
        seen = Counter(i for r in recs if r["epoch"] == epoch for i in r["idx"])
        assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}, f"epoch {epoch}"
    got = losses(tr)
    assert sorted(got) == sorted(ref_loss)
    np.testing.assert_allclose([got[s] for s in sorted(got)], [ref_loss[s] for s in sorted(ref_loss)],
                               rtol=1e-4, atol=1e-6)
    assert sorted(p.name for p in ck.glob("ckpt-*.pt"))  # checkpoints were real files
    assert not list(ck.glob(".ckpt-*"))  # no temporary left behind


def test_restart_into_warm_pool_continues_exactly(tmp_path: Path) -> None:
    """launcher.restart with a WarmPool (pre-imported interpreters): 2 workers → 1 mid-epoch, same samples."""
    ck, tr = tmp_path / "ck", tmp_path / "tr"
    args = ["--trace", str(tr), "--epochs", "1", "--sleep", "0.2"]
    pool = WarmPool(1, stdout=subprocess.DEVNULL)
    try:
        assert pool.wait_ready(90)  # imports done before the job starts: the resize is the only event
        old = start_workers(WORKER, args, nproc=2, local_batch=8, checkpoint_dir=str(ck),
                            stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (tr.exists() and max(losses(tr), default=0) >= 2):
            assert time.monotonic() < deadline and old.alive()
            time.sleep(0.02)
        new = restart(old, WORKER, args, nproc=1, local_batch=16, checkpoint_dir=str(ck), generation=1,
                      pool=pool)
        assert old.poll() == [0, 0]
        assert new.wait(timeout=60) == [0]
    finally:
        pool.close()
    recs = read_trace(tr)
    assert {r["world"] for r in recs if r["gen"] == 1} == {1}
    seen = Counter(i for r in recs for i in r["idx"])
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}
    assert sorted(losses(tr)) == list(range(1, N // G + 1))


def test_single_micro_batch_steps_measure_statistics_from_two_halves(tmp_path: Path) -> None:
    """One worker, one micro-batch per step: a statistics step splits its micro-batch into two halves, so
    every stats step writes a hint with its step, measured throughput and the gradient statistics (Pollux's
    noise scale for a one-GPU job), and training stays exact (each sample once an epoch)."""
    ck, tr = tmp_path / "ck", tmp_path / "tr"
    run_launch(1, local_batch=16, ckpt=ck, worker_args=["--max-steps", "6", "--stats-interval", "2", "--trace",
                                                        str(tr)])
    hints = [json.loads(line) for line in (ck / "hints.jsonl").read_text().splitlines()]
    assert [h["step"] for h in hints] == [2, 4, 6]
    assert all(h["throughput"] > 0 and h["globalBatchSize"] == 16 for h in hints)
    assert all(h["grad_sqr"] > 0 and h["grad_var"] >= 0 and -1 <= h["similarity"] <= 1 for h in hints)
    micro = [len(r["idx"]) for r in read_trace(tr)]
    assert micro == [16, 8, 8, 16, 8, 8, 16, 8, 8]  # statistics steps 2, 4, 6 as two halves of 8
