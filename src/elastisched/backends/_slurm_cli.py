"""Slurm's command-line tools, run and parsed: the nodes (`scontrol show node -o`), elastisched's jobs
(`squeue`), submitting (`sbatch`), signalling and cancelling (`scancel`), draining (`scontrol update`).

Why the command-line tools and not slurmrestd (docs/slurm.md, "Why the command-line tools"): they are on every
login node of every Slurm cluster and need nothing from the admin beyond a user account (slurmrestd is often not
run, needs JWT keys configured, and its API version changes with Slurm's major release: v0.0.38 in 22.05 was
removed by 24.05); their `-o` formats and `scontrol -o` key=value lines have stayed stable across majors; and
munge authenticates them as the service's own user, which is what `--uid` (jobs as each user) rests on. pyslurm
is bound to one Slurm major. The cost is a process per call, so the backend batches calls and polls at most
every `every_s`.

Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from elastisched.core.types import NodeView, Pool

#: states (scontrol's, `+`-joined) in which a node cannot run work: its jobs are lost. NOT_RESPONDING alone is not
#: one (a slow slurmd on a loaded host): Slurm itself ends jobs only once it sets the node DOWN
DEAD = frozenset({"DOWN", "FAIL", "FAILING", "POWERED_DOWN", "POWERING_DOWN", "FUTURE"})
#: squeue states of a job that still holds (or will hold) its nodes
LIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                  "SIGNALING", "STAGE_OUT", "STOPPED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
GRES_GPU = re.compile(r"(?:^|,)gpu:([A-Za-z0-9_.-]+):(\d+)")


class SlurmError(RuntimeError):
    """A Slurm command failed: the message holds the command and what it printed."""


@dataclass(frozen=True, slots=True)
class SlurmNode:
    name: str
    addr: str
    gpu_type: str
    num_gpus: int
    partitions: tuple[str, ...]
    states: frozenset[str]
    reason: str = ""  # the first word of its Reason (a drain's)

    @property
    def dead(self) -> bool:
        return bool(self.states & DEAD)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.states

    def view(self, index: int, pool: Pool = Pool.TRAIN) -> NodeView:
        return NodeView(self.name, self.gpu_type, self.num_gpus, pool, index)


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One component of a (possibly heterogeneous) Slurm job, as squeue lists it."""

    job_id: str  # the het job's leader id (the one scancel takes)
    name: str
    state: str
    nodes: str
    reason: str


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class SlurmCli:
    """Runs Slurm's tools with `env` (e.g. `SLURM_CONF`) and a time limit; every failure is a `SlurmError`."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> None:
        self.env = dict(os.environ if env is None else env)
        self.timeout_s = timeout_s

    def run(self, *cmd: str, stdin: str | None = None, check: bool = True) -> str:
        """Run one tool. A tool killed with the service (PDEATHSIG) never submits after a crash it outlived."""
        try:
            p = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True, env=self.env,
                               timeout=self.timeout_s, preexec_fn=_die_with_parent)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmError(f"{' '.join(cmd[:3])}: {e}") from None
        if check and p.returncode != 0:
            raise SlurmError(f"{' '.join(cmd[:3])}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[:500]}")
        return p.stdout

    def nodes(self) -> list[SlurmNode]:
        return parse_nodes(self.run("scontrol", "show", "node", "-o"))

    def jobs(self, names: Sequence[str]) -> dict[str, list[SlurmJob]]:
        """The jobs (any state squeue still remembers) of these names, by name: only ours are asked for, so a
        busy cluster's queue costs nothing."""
        if not names:
            return {}
        out = self.run("squeue", "-h", "-a", "-t", "all", f"--name={','.join(names)}", "-o", "%F|%j|%T|%N|%r")
        return parse_jobs(out, "")

    def submit(self, args: Sequence[str], script: str) -> str:
        """`sbatch --parsable ARGS` with the batch script on stdin; the job id."""
        out = self.run("sbatch", "--parsable", *args, stdin=script).strip()
        job_id = out.split(";")[0].split("+")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed {out!r}, not a job id")
        return job_id

    def signal(self, job_ids: Sequence[str], sig: str = "TERM") -> None:
        """Signal the job steps (the ranks), not the batch shell: `scancel --signal=TERM` without `--full`."""
        if job_ids:
            self.run("scancel", f"--signal={sig}", *job_ids, check=False)

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.run("scancel", *job_ids, check=False)

    def set_node(self, node: str, state: str, reason: str = "") -> None:
        self.run("scontrol", "update", f"NodeName={node}", f"State={state}",
                 *([f"Reason={reason}"] if reason else []))


def _fields(line: str) -> dict[str, str]:
    """`scontrol -o` key=value words (values hold no spaces, except a trailing `Reason=` we do not need)."""
    out: dict[str, str] = {}
    for word in line.split():
        k, sep, v = word.partition("=")
        if sep and k not in out:
            out[k] = v
    return out


def parse_nodes(text: str) -> list[SlurmNode]:
    """Nodes with a typed GPU GRES (`Gres=gpu:t4:2`), in name order; the others cannot run a GPU job."""
    out = []
    for line in text.splitlines():
        f = _fields(line)
        m = GRES_GPU.search(f.get("Gres", ""))
        if "NodeName" not in f or m is None:
            continue
        out.append(SlurmNode(f["NodeName"], f.get("NodeAddr", f["NodeName"]), m.group(1).lower(), int(m.group(2)),
                             tuple(p for p in f.get("Partitions", "").split(",") if p),
                             frozenset(s.strip("*~#!%$@^-") for s in f.get("State", "").upper().split("+")),
                             f.get("Reason", "")))
    return sorted(out, key=lambda n: n.name)


def parse_jobs(text: str, prefix: str) -> dict[str, list[SlurmJob]]:
    out: dict[str, list[SlurmJob]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 5 or not parts[1].startswith(prefix):
            continue
        het, name, state, nodes, reason = parts
        out.setdefault(name, []).append(SlurmJob(het.strip(), name, state.strip().upper(), nodes.strip(),
                                                 reason.strip()))
    return out
