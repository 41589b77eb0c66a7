"""The launch contract between a backend and a training worker.

Every backend (local processes, Ray, Kubernetes) starts workers with these environment variables, and
the training library reads them back. This module imports nothing heavy (no torch) so that backends can
import it cheaply. The contract is versioned: a worker refuses to run under a different major version.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

CONTRACT_VERSION = "1"

PREFIX = "ELASTISCHED_"
JOB_ID = PREFIX + "JOB_ID"
GENERATION = PREFIX + "GENERATION"
RANK = PREFIX + "RANK"
WORLD_SIZE = PREFIX + "WORLD_SIZE"
MASTER_ADDR = PREFIX + "MASTER_ADDR"
MASTER_PORT = PREFIX + "MASTER_PORT"
CHECKPOINT_DIR = PREFIX + "CHECKPOINT_DIR"
LOCAL_BATCH = PREFIX + "LOCAL_BATCH"
ACCUM_STEPS = PREFIX + "ACCUM_STEPS"
GLOBAL_BATCH = PREFIX + "GLOBAL_BATCH"
VERSION = PREFIX + "CONTRACT_VERSION"
#: A file the worker's supervisor (local `_wrap`, the Ray rank actor) reads after the worker exits: the training
#: library writes "library" into it at start and "checkpointed" when it leaves on a stop request, so a SIGTERM
#: that arrives after the last step is not mistaken for a checkpointed stop (which would run the job again).
STOP_NOTE = PREFIX + "STOP_NOTE"
#: Set only by the profiler: run this many steps, record step times, exit.
PROFILE_STEPS = PREFIX + "PROFILE_STEPS"
PROFILE_OUT = PREFIX + "PROFILE_OUT"
#: In the checkpoint dir, written by the service: {"batch_size": B} — the global batch the scheduler chose for
#: the job's current GPUs; rank 0 reads it at a step boundary and all ranks switch together (no restart).
BATCH_TARGET_FILE = "batch-target.json"

#: torch.distributed's standard variables, written alongside ours so plain torch code works too.
TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class ContractError(ValueError):
    """A launch variable is missing or malformed; the message names the variable and value."""


def _int(env: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ContractError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ContractError(f"{name}={value} must be >= {minimum}")
    return value


@dataclass(frozen=True, slots=True)
class LaunchEnv:
    """What one worker is told at start. Defaults describe a standalone single process."""

    job_id: str = "local"
    generation: int = 0
    rank: int = 0
    world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    checkpoint_dir: str | None = None
    local_batch: int | None = None
    accum_steps: int = 1
    global_batch: int | None = None
    local_rank: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ContractError(f"{WORLD_SIZE}={self.world_size} must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ContractError(f"{RANK}={self.rank} must be in [0, {self.world_size})")
        if self.accum_steps < 1:
            raise ContractError(f"{ACCUM_STEPS}={self.accum_steps} must be >= 1")
        if self.local_batch is not None and self.local_batch < 1:
            raise ContractError(f"{LOCAL_BATCH}={self.local_batch} must be >= 1")
        if self.global_batch is not None and self.global_batch < 1:
            raise ContractError(f"{GLOBAL_BATCH}={self.global_batch} must be >= 1")
        if self.world_size > 1 and self.master_port is None:
            raise ContractError(f"{MASTER_PORT} is required when {WORLD_SIZE}={self.world_size} > 1")

    @property
    def distributed(self) -> bool:
        """True when a process group must be formed (more than one worker or an explicit rendezvous)."""
        return self.world_size > 1 or self.master_port is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LaunchEnv:
        """Read our variables, falling back to torch's RANK/WORLD_SIZE/MASTER_* (torchrun launches)."""
        env = os.environ if env is None else env
        version = env.get(VERSION)
        if version and version.split(".")[0] != CONTRACT_VERSION:
            raise ContractError(f"{VERSION}={version!r} is not supported (library speaks {CONTRACT_VERSION})")
        rank = _int(env, RANK, None, 0)
        if rank is None:
            rank = _int(env, "RANK", 0, 0)
        world = _int(env, WORLD_SIZE, None, 1)
        if world is None:
            world = _int(env, "WORLD_SIZE", 1, 1)
        port = _int(env, MASTER_PORT, None, 1)
        if port is None:
            port = _int(env, "MASTER_PORT", None, 1)
        assert rank is not None and world is not None
        return cls(
            job_id=env.get(JOB_ID) or "local",
            generation=_int(env, GENERATION, 0, 0) or 0,
            rank=rank,
            world_size=world,
            master_addr=env.get(MASTER_ADDR) or env.get("MASTER_ADDR") or "127.0.0.1",
            master_port=port,
            checkpoint_dir=env.get(CHECKPOINT_DIR) or None,
            local_batch=_int(env, LOCAL_BATCH, None, 1),
            accum_steps=_int(env, ACCUM_STEPS, 1, 1) or 1,
            global_batch=_int(env, GLOBAL_BATCH, None, 1),
            local_rank=_int(env, "LOCAL_RANK", None, 0),
        )

    def to_env(self) -> dict[str, str]:
        """The variables a backend sets for this worker (ours plus torch's standard ones)."""
        out: dict[str, str] = {
            VERSION: CONTRACT_VERSION,
            JOB_ID: self.job_id,
            GENERATION: str(self.generation),
            RANK: str(self.rank),
            WORLD_SIZE: str(self.world_size),
            MASTER_ADDR: self.master_addr,
            ACCUM_STEPS: str(self.accum_steps),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.rank if self.local_rank is None else self.local_rank),
            "MASTER_ADDR": self.master_addr,
        }
        if self.master_port is not None:
            out[MASTER_PORT] = out["MASTER_PORT"] = str(self.master_port)
        if self.checkpoint_dir is not None:
            out[CHECKPOINT_DIR] = self.checkpoint_dir
        if self.local_batch is not None:
            out[LOCAL_BATCH] = str(self.local_batch)
        if self.global_batch is not None:
            out[GLOBAL_BATCH] = str(self.global_batch)
        out.update(self.extra)
        return out


def worker_envs(
    *,
    nproc: int,
    master_port: int,
    job_id: str = "local",
    generation: int = 0,
    accum: list[int] | None = None,
    local_batch: int | None = None,
    global_batch: int | None = None,
    checkpoint_dir: str | None = None,
    master_addr: str = "127.0.0.1",
) -> list[LaunchEnv]:
    """One LaunchEnv per rank of a single-node job; the global batch defaults to local × Σ accum."""
    accum = list(accum) if accum else [1] * nproc
    if len(accum) != nproc:
        raise ContractError(f"--accum has {len(accum)} entries but --nproc is {nproc}")
    if any(a < 1 for a in accum):
        raise ContractError(f"--accum={accum} entries must be >= 1")
    if global_batch is None and local_batch is not None:
        global_batch = local_batch * sum(accum)
    return [
        LaunchEnv(
            job_id=job_id,
            generation=generation,
            rank=r,
            world_size=nproc,
            master_addr=master_addr,
            master_port=master_port,
            checkpoint_dir=checkpoint_dir,
            local_batch=local_batch,
            accum_steps=accum[r],
            global_batch=global_batch,
            local_rank=r,
        )
        for r in range(nproc)
    ]
