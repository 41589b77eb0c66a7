"""Process-level state of an elastic worker: process group, SIGTERM flag, checkpoints, hints.

Resizing is checkpoint-restart: SIGTERM only sets a flag; the flag rides along in the next gradient
all-reduce, so every rank learns in the same step that one of them was asked to stop. All ranks then
finish that step, rank 0 writes one checkpoint atomically (tmp file, fsync, os.replace) and every rank
exits 0. A new generation, at any world size, resumes from the newest complete checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import sys
import time
import zlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist

from elastisched.train._entry import hard_exit
from elastisched.train.adaptive import NoiseEstimate
from elastisched.train.contract import BATCH_TARGET_FILE, PROFILE_OUT, PROFILE_STEPS, STOP_NOTE, LaunchEnv
from elastisched.train.handles import LoaderHandle, ModelHandle

CKPT_RE = re.compile(r"^ckpt-(\d{10})\.pt$")
HINTS_FILE = "hints.jsonl"
CHECKPOINT_FORMAT = 1


class Stateful(Protocol):
    def state_dict(self) -> Any: ...
    def load_state_dict(self, state: Any) -> Any: ...


_CURRENT: ElasticContext | None = None


def current_context() -> ElasticContext:
    """The context made by `init()` in this process (the one a script's loader and model share)."""
    if _CURRENT is None:
        raise RuntimeError("call elastisched.train.init() before building ElasticDataLoader/ElasticDataParallel")
    return _CURRENT


def init(backend: str | None = None, *, stats_interval: int = 100, checkpoint_interval: int | None = None,
         env: LaunchEnv | None = None, timeout_s: float = 120.0, fast_exit: bool = True) -> ElasticContext:
    """Form the process group from the launch contract and install the SIGTERM handler.

    `backend` defaults to `default_backend(env)`: nccl when this worker has a GPU of its own, else gloo.
    Standalone (no launcher) is a world of one without a process group; `ctx.device` is then this
    worker's GPU when it has one. Move the model (ElasticDataParallel does) and every batch to `ctx.device`.
    """
    global _CURRENT
    le = env or LaunchEnv.from_env()
    if le.distributed and not dist.is_initialized():
        backend = backend or default_backend(le)
        if backend == "nccl":
            if not own_gpu(le):
                raise RuntimeError(f"backend 'nccl' needs a GPU for local rank {le.local_rank or 0}, but "
                                   f"{torch.cuda.device_count()} CUDA device(s) are visible; use backend='gloo'")
            torch.cuda.set_device(le.local_rank or 0)
        dist.init_process_group(
            backend,
            init_method=f"tcp://{le.master_addr}:{le.master_port}",
            rank=le.rank,
            world_size=le.world_size,
            timeout=timedelta(seconds=timeout_s),
        )
    _CURRENT = ElasticContext(le, stats_interval=stats_interval, checkpoint_interval=checkpoint_interval,
                              fast_exit=fast_exit)
    return _CURRENT


def own_gpu(env: LaunchEnv) -> bool:
    """Whether this worker has a CUDA device of its own (its local rank indexes a visible device)."""
    return torch.cuda.is_available() and (env.local_rank or 0) < torch.cuda.device_count()


def default_backend(env: LaunchEnv) -> str:
    """nccl when every local worker can have its own GPU (nccl needs one device per rank), else gloo: a
    machine with CUDA but fewer GPUs than workers (or a CPU-only launch on a GPU host) still trains."""
    return "nccl" if own_gpu(env) else "gloo"


class ElasticContext:
    """Everything one worker process shares between its loader, its model wrapper and the launcher."""

    def __init__(self, env: LaunchEnv, *, stats_interval: int = 100, checkpoint_interval: int | None = None,
                 fast_exit: bool = True):
        self.env = env
        self.fast_exit = fast_exit
        self.rank = env.rank
        self.world_size = env.world_size
        self.stats_interval = stats_interval
        self.checkpoint_interval = checkpoint_interval
        self.checkpoint_dir = Path(env.checkpoint_dir) if env.checkpoint_dir else None
        # a world of one (no process group) uses its GPU when it has one
        nccl = dist.get_backend() == "nccl" if dist.is_initialized() else own_gpu(env)
        self.device = torch.device("cuda", env.local_rank or 0) if nccl else torch.device("cpu")
        self.stop_requested = False
        self.stop_agreed = False
        self.step = 0  # optimizer steps done by the job (all generations)
        self.epoch = 0
        self.loader: LoaderHandle | None = None  # the `ElasticDataLoader`, once built
        self.model: ModelHandle | None = None  # the `ElasticDataParallel`, once built
        self.states: dict[str, Stateful] = {}
        self.noise = NoiseEstimate()
        self.batch_target = 0  # global batch the scheduler asked for, agreed by all ranks (0 = none yet)
        self._target_seen: tuple[int, int] | None = None  # (mtime_ns, size) of the target file last read
        self._target = 0
        self.started_at = time.monotonic()
        self._ckpt: dict[str, Any] | None = None
        self._ckpt_loaded = False
        self.profile_steps = int(os.environ.get(PROFILE_STEPS, "0") or 0)
        self.profile_out = os.environ.get(PROFILE_OUT)
        self.profile_times: list[tuple[float, float]] = []
        self.accum = self._gather_accum()
        signal.signal(signal.SIGTERM, self._on_signal)
        self._note("library")  # from here on, exit 0 after a SIGTERM is a checkpointed stop only if we say so
        if self.checkpoint_dir is not None:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        ck = self.checkpoint()
        if ck is not None:
            self.step, self.epoch = int(ck["step"]), int(ck["epoch"])
        self._rng_pending = ck is not None

    # ------------------------------------------------------------------ collectives
    @property
    def distributed(self) -> bool:
        return dist.is_initialized() and self.world_size > 1

    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        """In-place SUM across ranks (a no-op in a world of one)."""
        if self.distributed:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def _gather_accum(self) -> list[int]:
        """Accumulation steps of every rank (each rank is told only its own)."""
        if not self.distributed:
            return [self.env.accum_steps]
        t = torch.zeros(self.world_size, dtype=torch.int64, device=self.device)
        t[self.rank] = self.env.accum_steps
        dist.all_reduce(t)
        return [int(x) for x in t.tolist()]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    # ------------------------------------------------------------------ signals
    @staticmethod
    def _note(word: str) -> None:
        """Tell this worker's supervisor how it is leaving (the stop note of the launch contract)."""
        path = os.environ.get(STOP_NOTE)
        if path:
            with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as f:
                f.write(word)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_requested = True

    def register_state(self, name: str, obj: Stateful) -> None:
        """Checkpoint `obj` too (e.g. a metric accumulator); restored now if a checkpoint has it."""
        self.states[name] = obj
        ck = self.checkpoint()
        if ck is not None and name in ck.get("user", {}):
            obj.load_state_dict(ck["user"][name])

    # ------------------------------------------------------------------ epochs
    def remaining_epochs_until(self, epochs: int) -> Iterator[int]:
        """Epoch numbers still to run, starting from the restored one (AdaptDL's API)."""
        while self.epoch < epochs:
            yield self.epoch

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> dict[str, Any] | None:
        """The newest complete checkpoint of this job, loaded once (None when starting fresh)."""
        if not self._ckpt_loaded:
            self._ckpt_loaded = True
            self._ckpt = load_latest(self.checkpoint_dir) if self.checkpoint_dir else None
        return self._ckpt

    def _rng_state(self) -> dict[str, Any]:
        return {"python": random.getstate(), "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}

    def restore_rng(self) -> None:
        """Put back the checkpointed RNG streams once, when training starts (called by the loader), so
        that model construction and other setup after init() do not shift them."""
        ck = self.checkpoint()
        if self._rng_pending and ck is not None:
            self._restore_rng(ck["rng"])
        self._rng_pending = False

    def _restore_rng(self, states: list[dict[str, Any]]) -> None:
        if self.rank < len(states):
            st = states[self.rank]
            random.setstate(st["python"])
            np.random.set_state(st["numpy"])
            torch.set_rng_state(st["torch"])
            if st.get("cuda") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(st["cuda"])
        else:  # a rank that did not exist before: a fresh but reproducible stream
            seed = zlib.crc32(f"{self.env.job_id}/{self.env.generation}/{self.rank}".encode())
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)

    def save_checkpoint(self) -> Path | None:
        """Collective: gather RNG states, rank 0 writes tmp → fsync → rename. Returns the path on rank 0."""
        rng = [self._rng_state()]
        if self.distributed:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, rng[0])
            rng = gathered
        if self.rank != 0 or self.checkpoint_dir is None:
            return None
        state: dict[str, Any] = {
            "format": CHECKPOINT_FORMAT, "step": self.step, "epoch": self.epoch, "rng": rng,
            "job_id": self.env.job_id, "generation": self.env.generation, "world_size": self.world_size,
            "time": time.time(), "user": {k: v.state_dict() for k, v in self.states.items()},
        }
        if self.model is not None:
            state.update(self.model.checkpoint_state())
        if self.loader is not None:
            state["loader"] = self.loader.state_dict()
        return save_atomic(self.checkpoint_dir, self.step, state)

    def after_step(self) -> None:
        """Called by the loader when a step is complete on all ranks: checkpoint, stop, profile."""
        if self.profile_steps and self.step >= self.profile_steps:
            self._finish_profile()
        if self.stop_agreed:
            path = self.save_checkpoint()
            if path is not None:  # rank 0 says what happened, so a stopped job's log is not silent
                print(f"elastisched: stop requested (SIGTERM); checkpoint at step {self.step}, epoch "
                      f"{self.epoch} written to {path}; exiting (the scheduler relaunches the job from it unless the "
                      "job was cancelled)", file=sys.stderr, flush=True)
            self.barrier()
            self._note("checkpointed")
            self.exit()
        if self.checkpoint_interval and self.step % self.checkpoint_interval == 0:
            self.save_checkpoint()

    # ------------------------------------------------------------------ scheduler's batch target
    def requested_batch(self) -> int:
        """Rank 0: the global batch in the service's `batch-target.json` for this generation (0 when none;
        one stat a step, the file is parsed only when it changed). Other ranks return 0: the value reaches
        them in the next all-reduce (`ElasticDataParallel.sync`), so every rank switches at the same step."""
        if self.rank != 0 or self.checkpoint_dir is None:
            return 0
        path = self.checkpoint_dir / BATCH_TARGET_FILE
        try:
            st = path.stat()
        except OSError:
            return self._target
        key = (st.st_mtime_ns, st.st_size)
        if key != self._target_seen:
            self._target_seen = key
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
                value = doc["batch_size"]
                if doc.get("generation") != self.env.generation:
                    self._target = 0  # written for an earlier generation: this one's batch came with its launch
                elif isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 1 << 24:
                    self._target = value  # exact in the float32 all-reduce buffer
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a file we cannot read keeps the last target
        return self._target

    # ------------------------------------------------------------------ hints and profiling
    def write_hints(self, payload: dict[str, Any]) -> None:
        """Rank 0 appends one JSON line to <checkpoint_dir>/hints.jsonl (read by backends/service)."""
        if self.rank != 0 or self.checkpoint_dir is None:
            return
        payload = {"time": time.time(), "job_id": self.env.job_id, "generation": self.env.generation,
                   "step": self.step, "epoch": self.epoch, "world_size": self.world_size, **payload}
        with open(self.checkpoint_dir / HINTS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(payload) + "\n")

    def record_profile(self, step_time: float, sync_time: float) -> None:
        if self.profile_steps:
            self.profile_times.append((step_time, sync_time))

    def _finish_profile(self) -> None:
        """Profile mode: median step/sync time after warm-up to PROFILE_OUT (rank 0), then exit 0."""
        warm = self.profile_times[min(2, len(self.profile_times) - 1):]
        steps = torch.tensor([s for s, _ in warm], dtype=torch.float64)
        syncs = torch.tensor([c for _, c in warm], dtype=torch.float64)
        step_t, sync_t = float(steps.median()), float(syncs.median())
        if self.rank == 0 and self.profile_out:
            lb = self.loader.local_batch if self.loader is not None else None
            with open(self.profile_out, "w", encoding="utf-8") as f:
                json.dump({"world_size": self.world_size, "local_bsz": lb, "step_time": step_t,
                           "sync_time": sync_t, "steps": len(warm)}, f)
        self.barrier()
        self.exit()

    def exit(self) -> None:
        """Leave with status 0 after a checkpoint. With fast_exit (default) skip the interpreter teardown
        (about 1 s with torch loaded, all of it resize downtime) but first flush every open file object and
        run atexit handlers, so nothing a script wrote is lost."""
        if not self.fast_exit:
            if dist.is_initialized():
                dist.destroy_process_group()
            sys.exit(0)
        hard_exit(0, wait_threads=False)


def save_atomic(directory: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write `state` as ckpt-<step>.pt without ever exposing a partial file; keep the newest `keep`."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"ckpt-{step:010d}.pt"
    tmp = directory / f".ckpt-{step:010d}.pt.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    for old in list_checkpoints(directory)[:-keep]:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if CKPT_RE.match(p.name))


def load_latest(directory: Path) -> dict[str, Any] | None:
    """The newest checkpoint that loads; a corrupt one (should never happen) falls back to the older."""
    for path in reversed(list_checkpoints(directory)):
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:
            print(f"elastisched: skipping unreadable checkpoint {path}: {exc}", file=sys.stderr)
            continue
        if state.get("format") == CHECKPOINT_FORMAT:
            return state
    return None
