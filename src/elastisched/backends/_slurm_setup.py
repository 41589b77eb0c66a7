"""`serve --backend slurm`: the Slurm backend and its nodes from the `--slurm KEY=VALUE` options, checked before the
service starts (the tools are there, slurmctld answers, the shared path exists, the partitions hold GPU nodes),
each problem one `ConfigError` naming the option."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elastisched.backends._slurm_cli import SlurmError
from elastisched.backends._slurm_launch import SlurmOptions
from elastisched.core.errors import ConfigError
from elastisched.core.types import NodeView


def slurm_backend(work: Path, python: str, grace_s: float, jobs: Any, mode: str,
                  items: Sequence[str] | None) -> tuple[Any, tuple[NodeView, ...]]:
    from elastisched.backends.slurm import SlurmBackend

    try:
        opts = SlurmOptions.parse(items or ())
    except ValueError as e:
        raise ConfigError("--slurm", " ".join(items or ()), str(e)) from None
    missing = [t for t in ("sbatch", "squeue", "scancel", "scontrol") if shutil.which(t) is None]
    if missing:
        raise ConfigError("--backend", "slurm", f"needs Slurm's tools on PATH ({', '.join(missing)} not found)")
    shared = Path(opts.shared).resolve() if opts.shared else work
    if not shared.is_dir():
        raise ConfigError("--slurm shared", str(shared), "is not a directory (it must be a path every node sees)")
    users, env = jobs.runtime(mode, python, shared)
    try:
        b = SlurmBackend(work, SlurmOptions(**{**opts.__dict__, "shared": str(shared)}), python=python,
                         grace_s=grace_s, users=users, job_env=env)
    except SlurmError as e:
        raise ConfigError("--backend", "slurm", f"cannot reach slurmctld: {e}") from None
    partitions = {p for n in b._nodes for p in n.partitions}
    for flag, part in (("--slurm partition", opts.partition), ("--slurm loan-partition", opts.loan_partition)):
        if part and part not in partitions:
            raise ConfigError(flag, part, f"is no partition with GPU nodes (typed GRES gpu:TYPE:N); there are "
                              f"{sorted(partitions) or 'none'}")
    nodes = b.inventory()
    if not nodes:
        raise ConfigError("--slurm partition", opts.partition or "(any)", "has no node that is up with a typed GPU "
                          "GRES (gpu:TYPE:N; docs/slurm.md)")
    return b, nodes
