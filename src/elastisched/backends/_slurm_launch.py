"""Building one Slurm generation: its launch file on the shared path, its `sbatch` arguments and batch script.

A generation is one Slurm job named `es-<launch token>` (a restarted service finds it by that name), pinned to
the placement's nodes: one component per node of a heterogeneous job (`sbatch A : B`, as TorchX launches one
component per replica group), each `--nodelist=NODE -N1 -n K --gres=gpu:TYPE:K` in that node's partition, so
a placement of 2 GPUs on one node and 1 on another asks Slurm for exactly that. The batch script `exec`s one
`srun` over every component; each task is `_slurm_rank`, which becomes the rank. Apart from `slurm.py`, which
supervises generations once they are submitted.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elastisched.backends import _jobfiles
from elastisched.backends._local_procs import TOKEN
from elastisched.backends._slurm_cli import SlurmNode
from elastisched.backends.identity import Account
from elastisched.backends.job_env import JobEnv
from elastisched.core.events import LaunchSpec
from elastisched.core.types import Allocation
from elastisched.train.contract import CHECKPOINT_DIR, PREFIX, worker_envs

NAME_PREFIX = "es-"


@dataclass(frozen=True)
class SlurmOptions:
    """`serve --slurm KEY=VALUE`: where jobs run and what every node sees."""

    partition: str | None = None  # training nodes (None: every partition's GPU nodes but the loan one)
    loan_partition: str | None = None  # the inference servers a loan may name
    account: str | None = None
    shared: str | None = None  # the path every node sees (job dirs: checkpoints, logs, exit files)
    extra: tuple[str, ...] = ()  # more sbatch options for every component (--time, --qos, --mem-per-gpu...)
    cpus_per_gpu: int = 1

    @staticmethod
    def parse(items: Sequence[str]) -> SlurmOptions:
        """`--slurm KEY=VALUE` words; a ValueError names the bad one."""
        keys = {"partition": "partition", "loan-partition": "loan_partition", "account": "account",
                "shared": "shared", "cpus-per-gpu": "cpus_per_gpu"}
        out: dict[str, object] = {}
        extra: list[str] = []
        for item in items:
            k, eq, v = item.partition("=")
            if not eq or not v.strip():
                raise ValueError(f"{item!r} is not KEY=VALUE (keys: {', '.join([*keys, 'arg'])})")
            if k == "arg":
                extra.append(v)
            elif k not in keys:
                raise ValueError(f"unknown key {k!r} (keys: {', '.join([*keys, 'arg'])})")
            elif k == "cpus-per-gpu":
                if not v.isdigit() or not 1 <= int(v) <= 1024:
                    raise ValueError(f"cpus-per-gpu={v!r} must be a whole number from 1 to 1024")
                out[keys[k]] = int(v)
            else:
                out[keys[k]] = v
        return SlurmOptions(**out, extra=tuple(extra))  # type: ignore[arg-type]


@dataclass
class SlurmGen:
    """A submitted generation: the Slurm job behind it and what the service knows of its ranks."""

    job_id: str
    generation: int
    allocation: Allocation
    token: str
    slurm_id: str = ""
    world: int = 0
    nodes: tuple[str, ...] = ()
    status: list[tuple[int | None, bool]] = field(default_factory=list)
    seen: bool = False  # squeue has listed it
    held_since: float | None = None  # when a node of its placement was first seen failing
    gone_since: float | None = None  # when the Slurm job was first seen ended while exit files were missing
    killed: float | None = None  # when the surviving ranks were cancelled after a peer failed


def job_name(token: str) -> str:
    return f"{NAME_PREFIX}{token}"


def components(alloc: Allocation, nodes: Mapping[str, SlurmNode], opts: SlurmOptions) -> list[list[str]]:
    """sbatch options per component: one per node of the placement, in placement order (= rank order)."""
    out = []
    for name, k in alloc.placement:
        n = nodes.get(name)
        if n is None:
            raise RuntimeError(f"node {name} is not a GPU node of the Slurm cluster")
        part = opts.loan_partition if opts.loan_partition and opts.loan_partition in n.partitions else (
            opts.partition or (n.partitions[0] if n.partitions else None))
        out.append([f"--nodelist={name}", "--nodes=1", f"--ntasks={k}", f"--gres=gpu:{n.gpu_type}:{k}",
                    f"--cpus-per-task={opts.cpus_per_gpu}", *([f"--partition={part}"] if part else []),
                    *([f"--account={opts.account}"] if opts.account else []), *opts.extra])
    return out


def sbatch_args(job_id: str, spec: LaunchSpec, comps: Sequence[Sequence[str]], jd: Path,
                acct: Account | None) -> list[str]:
    """Options for the whole job, then each component's after a `:`."""
    common = [f"--job-name={job_name(spec.token)}", f"--comment=elastisched job={job_id} gen={spec.generation}",
              f"--output={jd / 'logs' / f'slurm-g{spec.generation}.out'}", "--open-mode=append", "--export=NONE",
              f"--chdir={jd / 'home'}", "--kill-on-invalid-dep=yes", "--no-requeue"]
    if acct is not None:  # Slurm runs, confines and accounts the job as the user's account (the service is root)
        common += [f"--uid={acct.uid}", f"--gid={acct.gid}"]
    out: list[str] = [*common, *comps[0]]
    for c in comps[1:]:
        out += [":", *c]
    return out


#: what the interpreter needs before `_slurm_rank` sets a rank's environment (the job runs with --export=NONE)
BOOT_ENV = ("PATH", "PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH")


def batch_script(python: str, launch_file: Path, world_components: int, boot: dict[str, str]) -> str:
    groups = f" --het-group=0-{world_components - 1}" if world_components > 1 else ""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(boot.items()))
    return ("#!/bin/sh\n# elastisched generation: one srun over every component; each task becomes a rank\n"
            f"{exports}exec srun --export=ALL --kill-on-bad-exit=0{groups} {shlex.quote(python)} -m "
            f"elastisched.backends._slurm_rank {shlex.quote(str(launch_file))}\n")


def write_launch(job_id: str, alloc: Allocation, spec: LaunchSpec, jd: Path, nodes: Mapping[str, SlurmNode],
                 python: str, env: JobEnv, acct: Account | None) -> tuple[Path, dict[str, str]]:
    """The launch file the ranks read (`_slurm_rank`): per rank its environment, log and exit file; the job's
    directory is prepared for `acct` and the rank logs created as its files (the service reads them). Returns
    the file and the variables the interpreter needs to start (`BOOT_ENV`)."""
    gen = spec.generation
    _jobfiles.prepare(jd, acct)
    argv = _jobfiles.write_owned(jd / f"g{gen}.argv", json.dumps([spec.script, *spec.args]).encode(), acct)
    names = [n for n, k in alloc.placement for _ in range(k)]
    master = nodes[names[0]].addr
    envs = worker_envs(nproc=len(names), master_port=0, master_addr=master, job_id=job_id, generation=gen,
                       local_batch=alloc.local_batch, global_batch=spec.batch_size, checkpoint_dir=str(jd / "ckpt"),
                       accum=[int((alloc.accumulation or {}).get(n, 1)) for n in names])
    ranks = []
    for r, le in enumerate(envs):
        contract = {**le.to_env(), "LOCAL_WORLD_SIZE": str(names.count(names[r])), PREFIX + "NODE": names[r],
                    CHECKPOINT_DIR: str(jd / "ckpt"), TOKEN: spec.token}
        log = jd / "logs" / f"g{gen}-r{r}.log"
        os.close(_jobfiles.open_owned(log, acct))
        ranks.append({"env": env.build(spec.env, contract, home=str(jd / "home"), user=acct.name if acct else None),
                      "log": str(log), "exit": str(jd / "run" / f"g{gen}-r{r}.exit")})
    os.close(_jobfiles.open_owned(jd / "logs" / f"slurm-g{gen}.out", acct))
    doc = {"python": python, "argv": str(argv), "cwd": str(jd / "home"), "ranks": ranks,
           "port_file": str(jd / "run" / f"g{gen}.port"),
           "port_keys": sorted(k for k in ranks[0]["env"] if k.endswith("MASTER_PORT"))}
    boot = {k: v for k, v in ranks[0]["env"].items() if k in BOOT_ENV}
    return _jobfiles.write_owned(jd / f"g{gen}.launch.json", json.dumps(doc).encode(), acct), boot
