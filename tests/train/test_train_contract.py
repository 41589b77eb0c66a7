"""Launch contract, launcher signal handling, checkpoint atomicity, import boundaries."""

from __future__ import annotations

import ast
import dataclasses
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from elastisched.train.contract import ContractError, LaunchEnv, worker_envs
from elastisched.train.launcher import launch, start_workers
from elastisched.train.runtime import list_checkpoints, load_latest, save_atomic

SRC = Path(__file__).resolve().parents[2] / "src" / "elastisched" / "train"


def test_launch_env_round_trip() -> None:
    le = LaunchEnv(job_id="j1", generation=3, rank=1, world_size=2, master_port=2345, checkpoint_dir="/ck",
                   local_batch=8, accum_steps=3, global_batch=32)
    env = le.to_env()
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["MASTER_PORT"] == "2345"
    assert env["ELASTISCHED_ACCUM_STEPS"] == "3" and env["ELASTISCHED_GLOBAL_BATCH"] == "32"
    assert LaunchEnv.from_env(env) == dataclasses.replace(le, local_rank=1)


def test_launch_env_torchrun_fallback_and_errors() -> None:
    le = LaunchEnv.from_env({"RANK": "2", "WORLD_SIZE": "4", "MASTER_PORT": "1234"})
    assert (le.rank, le.world_size, le.master_port) == (2, 4, 1234)
    with pytest.raises(ContractError, match="ELASTISCHED_ACCUM_STEPS='x'"):
        LaunchEnv.from_env({"ELASTISCHED_ACCUM_STEPS": "x"})
    with pytest.raises(ContractError, match="ELASTISCHED_RANK=3"):
        LaunchEnv.from_env({"ELASTISCHED_RANK": "3", "ELASTISCHED_WORLD_SIZE": "2",
                            "ELASTISCHED_MASTER_PORT": "1"})
    with pytest.raises(ContractError, match="CONTRACT_VERSION"):
        LaunchEnv.from_env({"ELASTISCHED_CONTRACT_VERSION": "2"})
    with pytest.raises(ContractError, match="--accum has 1 entries"):
        worker_envs(nproc=2, master_port=1, accum=[1])
    envs = worker_envs(nproc=2, master_port=1, accum=[1, 3], local_batch=4)
    assert [e.global_batch for e in envs] == [16, 16] and [e.accum_steps for e in envs] == [1, 3]


def test_contract_imports_no_torch() -> None:
    code = "import sys, elastisched.train.contract, elastisched.train; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _imports(f: Path) -> list[str]:
    out: list[str] = []
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.append(node.module or "")
    return out


def test_library_imports_nothing_from_scheduler_side() -> None:
    banned = ("elastisched.sim", "elastisched.engine", "elastisched.policies", "elastisched.service",
              "elastisched.backends", "elastisched.models", "elastisched.core", "elastisched.loaning")
    for f in SRC.glob("*.py"):
        for n in _imports(f):
            assert not n.startswith(banned), f"{f.name} imports {n}"


def test_scheduler_core_imports_nothing_from_train() -> None:
    """DESIGN.md: the scheduler core never needs torch or the training library (the simulator neither)."""
    pkg = SRC.parent
    for sub in ("core", "models", "policies", "loaning", "engine", "sim"):
        banned = ("elastisched.train",) if sub == "sim" else ("elastisched.train", "torch")
        for f in (pkg / sub).rglob("*.py"):
            for n in _imports(f):
                assert not n.startswith(banned), f"{sub}/{f.name} imports {n}"


def test_sigterm_ignoring_worker_is_killed_after_grace(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(textwrap.dedent("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    """))
    group = start_workers(script, nproc=2, stdout=subprocess.PIPE)
    for p in group.procs:
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
    t0 = time.monotonic()
    codes = group.stop(grace=0.5)
    assert time.monotonic() - t0 < 5
    assert codes == [-signal.SIGKILL, -signal.SIGKILL]


def test_launch_returns_exit_codes_and_stops_peers_of_a_failed_rank(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(3)\ntime.sleep(60)\n")
    t0 = time.monotonic()
    codes = launch(script, nproc=2, grace=1.0)
    assert codes[1] == 3 and codes[0] != 0 and time.monotonic() - t0 < 15


def test_checkpoint_atomic_and_fallback(tmp_path: Path) -> None:
    save_atomic(tmp_path, 1, {"format": 1, "step": 1})
    save_atomic(tmp_path, 2, {"format": 1, "step": 2})
    (tmp_path / ".ckpt-0000000003.pt.tmp-99").write_bytes(b"partial")  # a writer that died mid-write
    assert load_latest(tmp_path)["step"] == 2  # type: ignore[index]
    (tmp_path / "ckpt-0000000004.pt").write_bytes(b"garbage")  # cannot happen via os.replace; still safe
    assert load_latest(tmp_path)["step"] == 2  # type: ignore[index]
    save_atomic(tmp_path, 5, {"format": 1, "step": 5, "t": torch.ones(2)}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-0000000004.pt", "ckpt-0000000005.pt"]
    assert load_latest(tmp_path)["step"] == 5  # type: ignore[index]
