"""Slurm backend: every job generation is one Slurm job running the user's script on the launch contract
(`elastisched serve --backend slurm`, docs/slurm.md). elastisched decides; Slurm launches, isolates, accounts.

Issue 25 part 1; DESIGN.md "Backends". As `local.py` and `ray.py`:
- Inventory: the nodes `scontrol show node` lists with a typed GPU GRES (`gpu:t4:2`); training nodes are those
  of `--slurm partition=` (default: every GPU node outside the loan partition), loanable servers those of
  `--slurm loan-partition=`. A node that goes DOWN (or stops responding) leaves the inventory, one that comes
  back joins it: a `NodesChanged` event at the next poll.
- Launch: one (heterogeneous) Slurm job named `es-<launch token>` pinned to the placement (`_slurm_launch`),
  rank 0's node address as the rendezvous, Slurm's task ids as ranks (`_slurm_rank`). Jobs run as the user's
  account in isolation mode `users` (`sbatch --uid`, the service running as root). The job's directory (logs,
  exit files, checkpoints, hints) is on `--slurm shared=`, the path every node sees.
- Resize / suspend / cancel: `scancel --signal=TERM` to the ranks → they checkpoint and exit 0 (their exit
  files say so) → after `grace_s`, `scancel` → wait until Slurm has freed the nodes; a resize then submits
  generation + 1. A loaned server that goes back is drained (`scontrol update State=DRAIN`) and resumed for
  its other users once no elastisched job is left on it.
- Node loss: Slurm ends the job of a node that died (NODE_FAIL); the `NodesChanged` naming the node makes the
  daemon suspend the job, and the engine places it again from its last checkpoint. A generation whose ranks
  fail while a node of its placement stops responding is held until Slurm's verdict (`node_loss_wait_s`).
- Service restart: `recover` finds each generation's Slurm job by its name: adopted when wanted and live,
  cancelled when not, settled from the exit files when it ended while the service was down, `lost` (resumed
  from the checkpoint) when it never reached Slurm. A job is never submitted twice.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from elastisched.backends._ray_files import DIED, exit_code, exit_files
from elastisched.backends._slurm_cli import LIVE, SlurmCli, SlurmError, SlurmJob, SlurmNode
from elastisched.backends._slurm_launch import (
    SlurmGen,
    SlurmOptions,
    batch_script,
    components,
    job_name,
    sbatch_args,
    write_launch,
)
from elastisched.backends._slurm_loans import LoanDrains
from elastisched.backends.base import (
    BackendBase,
    BackendEvent,
    GenerationEnded,
    GenerationRecord,
    JobStarted,
    NodesChanged,
    stops_then_launches,
)
from elastisched.backends.hints import write_batch_target
from elastisched.backends.identity import IdentityError, JobUsers, unreadable
from elastisched.backends.job_env import JobEnv
from elastisched.backends.local import LocalBackend
from elastisched.core.enums import GenerationOutcome, GenerationState
from elastisched.core.events import Action, LaunchSpec
from elastisched.core.types import Allocation, NodeView, Pool

log = logging.getLogger("elastisched.service")
__all__ = ["SlurmBackend", "SlurmOptions"]


class SlurmBackend(BackendBase):
    """Slurm jobs through the command-line tools. `apply` blocks for at most `grace_s` (+ Slurm's release) per
    stop."""

    def __init__(self, workdir: str | os.PathLike[str], opts: SlurmOptions | None = None, *,
                 python: str = sys.executable, grace_s: float = 15.0, users: JobUsers | None = None,
                 job_env: JobEnv | None = None, env: Mapping[str, str] | None = None, every_s: float = 1.0,
                 node_loss_wait_s: float = 60.0) -> None:
        self.opts = opts or SlurmOptions()
        self.shared = Path(self.opts.shared or workdir).resolve()
        self.python = python
        self.grace_s = grace_s
        self.users = users or JobUsers("none")
        self.env = job_env or JobEnv(os.environ)
        self.cli = SlurmCli(env)
        self.every_s = every_s
        self.node_loss_wait_s = node_loss_wait_s
        self.gens: dict[str, SlurmGen] = {}
        self._pending: list[BackendEvent] = []
        self._files = LocalBackend(self.shared)  # hints.jsonl and rank logs: same files, same reader
        self._nodes = self.cli.nodes()
        self._nodes_at = time.monotonic()
        self._jobs: dict[str, list[SlurmJob]] = {}
        self._jobs_at = 0.0
        self._asked: set[str] = set()  # the job names the last squeue asked for
        self.drains = LoanDrains(self.cli)

    # ------------------------------------------------------------------ inventory
    def _pool(self, n: SlurmNode) -> Pool | None:
        lp, tp = self.opts.loan_partition, self.opts.partition
        if lp and lp in n.partitions:
            return Pool.LOANABLE
        if tp is None or tp in n.partitions:
            return Pool.TRAIN
        return None

    def inventory(self) -> tuple[NodeView, ...]:
        """Training nodes now (alive, in the training partition), the service's base nodes."""
        live = [n for n in self._nodes if not n.dead and self._pool(n) is Pool.TRAIN]
        return tuple(n.view(i) for i, n in enumerate(live))

    def loanable(self) -> list[NodeView]:
        return [n.view(0, Pool.LOANABLE) for n in self._nodes if not n.dead and self._pool(n) is Pool.LOANABLE]

    def lent(self, node_ids: Sequence[str]) -> None:
        """The servers on loan now (the daemon says so when loans change): drain the ones that went back. Nodes
        still drained by us (before a restart) are resumed once empty, or at once when lent again."""
        ours = {n.name for n in self._nodes if n.drained and n.reason.startswith("elastisched")}
        self.drains.lent(set(node_ids), {n.name for n in self._nodes if self._pool(n) is Pool.LOANABLE}, ours)

    def _refresh_nodes(self, force: bool = False) -> NodesChanged | None:
        if not force and time.monotonic() - self._nodes_at < self.every_s:
            return None
        try:
            now = self.cli.nodes()
        except SlurmError as e:  # slurmctld busy or restarting: keep the last view, say so once a round
            log.warning("Slurm nodes unknown: %s", e)
            return None
        self._nodes_at = time.monotonic()
        alive = lambda ns: {n.name for n in ns if not n.dead and self._pool(n) is not None}  # noqa: E731
        before, after = alive(self._nodes), alive(now)
        self._nodes = now
        if before == after:
            return None
        lost = tuple(sorted(before - after))
        log.warning("Slurm nodes changed: up %s; lost %s", sorted(after), list(lost))
        return NodesChanged(time.time(), self.inventory(), lost)

    def _refresh_jobs(self, extra: Sequence[SlurmGen] = (), force: bool = False) -> dict[str, list[SlurmJob]]:
        """squeue's view of our generations' jobs (those running, and `extra`), at most every `every_s` unless
        `force` or a name not asked for before."""
        names = sorted({job_name(g.token) for g in (*self.gens.values(), *extra)})
        if force or time.monotonic() - self._jobs_at >= self.every_s or not self._asked.issuperset(names):
            try:
                self._jobs = self.cli.jobs(names)
                self._jobs_at, self._asked = time.monotonic(), set(names)
            except SlurmError as e:  # slurmctld busy: keep the last view; nothing is decided from a failed query
                log.warning("Slurm jobs unknown: %s", e)
        return self._jobs

    # ------------------------------------------------------------------ paths
    def job_dir(self, job_id: str) -> Path:
        return self.shared / "jobs" / job_id

    def log_paths(self, job_id: str) -> list[Path]:
        """Per generation: the rank logs, then Slurm's own output file (`srun` and node errors)."""
        slurm = list(self.job_dir(job_id).glob("logs/slurm-g*.out"))
        return sorted([*self._files.log_paths(job_id), *slurm], key=_log_order)

    def set_batch(self, job_id: str, batch_size: int) -> None:
        """An in-place batch change (`backends/hints.py`) through the shared checkpoint directory."""
        g = self.gens.get(job_id)
        if g is not None:
            write_batch_target(self.job_dir(job_id) / "ckpt", batch_size, g.generation)

    # ------------------------------------------------------------------ actions
    def apply(self, actions: Sequence[Action]) -> None:
        stops, launches = stops_then_launches(actions)
        self._stop_many(stops, GenerationOutcome.STOPPED)
        for a, launch in launches:
            self._pending.append(self._launch(a.job_id, a.allocation, launch))

    def cancel(self, job_id: str) -> None:
        self._stop_many([job_id], GenerationOutcome.CANCELLED)
        self._files._hint_pos.pop(job_id, None)

    def _stop_many(self, job_ids: Sequence[str], outcome: str) -> None:
        gens = [self.gens.pop(j) for j in job_ids if j in self.gens]
        self._stop_gens(gens)
        for g in gens:
            codes = self._codes(g)
            end = outcome
            if outcome == GenerationOutcome.STOPPED and codes and codes[0] == 0 and not g.status[0][1]:
                end = GenerationOutcome.SUCCEEDED  # it finished its work before the stop reached it
            self._pending.append(GenerationEnded(time.time(), g.job_id, g.generation, end, tuple(codes)))

    def _stop_gens(self, gens: Sequence[SlurmGen]) -> None:
        """SIGTERM every rank at once (they checkpoint in parallel), wait up to grace for their exit files, then
        cancel the jobs and wait until Slurm has released them (so the next generation can have the GPUs)."""
        ids = [g.slurm_id for g in gens if g.slurm_id]
        if not ids:
            return
        self.cli.signal(ids, "TERM")
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and any(None in self._codes(g) for g in gens):
            jobs = self._refresh_jobs(gens, force=True)
            if not {j.state for g in gens for j in jobs.get(job_name(g.token), ())} & (LIVE - {"PENDING"}):
                break  # still pending, or already gone: no rank will checkpoint
            time.sleep(0.2)
        self.cli.cancel(ids)
        end = time.monotonic() + max(30.0, self.grace_s)
        while time.monotonic() < end and self._any_live(gens, force=True):
            time.sleep(0.3)

    def _any_live(self, gens: Sequence[SlurmGen], force: bool = False) -> bool:
        jobs = self._refresh_jobs(gens, force)
        return any(j.state in LIVE for g in gens for j in jobs.get(job_name(g.token), ()))

    def _codes(self, g: SlurmGen) -> list[int | None]:
        """Exit code per rank from the exit files on the shared path (None: no file yet); `status` keeps whether
        each rank stopped after a signal."""
        files = exit_files(self.job_dir(g.job_id), g.generation, g.world)
        prev = g.status if len(g.status) == g.world else [(None, False)] * g.world
        g.status = [(exit_code(f), len(f) > 1) if f is not None else p for f, p in zip(files, prev, strict=True)]
        return [c for c, _ in g.status]

    def _launch(self, job_id: str, alloc: Allocation, spec: LaunchSpec) -> BackendEvent:
        """Submit generation `spec.generation` (already recorded by the daemon, with its token). What Slurm or the
        account refuses ends the generation as `launch_failed` with the reason: the job fails, not us."""
        gen, jd = spec.generation, self.job_dir(job_id)
        g = SlurmGen(job_id, gen, alloc, spec.token, world=alloc.gpus,
                     nodes=tuple(n for n, k in alloc.placement for _ in range(k)))
        try:
            if any("\x00" in w for w in (spec.script, *spec.args)):
                raise ValueError("an argument holds a NUL byte")
            acct = self.users.account(spec.user)
            why = unreadable(spec.script, acct) if acct is not None else None
            if why:
                raise IdentityError(f"the script {why}")
            nodes = {n.name: n for n in self._nodes}
            comps = components(alloc, nodes, self.opts)
            launch, boot = write_launch(job_id, alloc, spec, jd, nodes, self.python, self.env, acct)
            g.slurm_id = self.cli.submit(sbatch_args(job_id, spec, comps, jd, acct),
                                         batch_script(self.python, launch, len(comps), boot))
        except (OSError, ValueError, RuntimeError, IdentityError) as e:
            why = f"launch of generation {gen} failed: {type(e).__name__}: {e}"[:1000]
            return GenerationEnded(time.time(), job_id, gen, GenerationOutcome.LAUNCH_FAILED, reason=why)
        log.info("job %s generation %d: Slurm job %s on %s", job_id, gen, g.slurm_id, list(alloc.placement))
        self.gens[job_id] = g
        self._jobs_at = 0.0  # look at the queue at the next poll (a new name is asked for anyway)
        return JobStarted(time.time(), job_id, gen, pids=(), devices=tuple(None for _ in g.nodes),
                          external_id=f"slurm:{g.slurm_id}")

    # ------------------------------------------------------------------ events
    def poll(self) -> list[BackendEvent]:
        out, self._pending = self._pending, []
        changed = self._refresh_nodes()
        if changed is not None:
            out.append(changed)
        lost = set(changed.lost) if changed is not None else set()
        jobs = self._refresh_jobs() if self.gens else {}
        for g in list(self.gens.values()):
            if lost & set(g.nodes):
                continue  # the daemon suspends it on the NodesChanged event (its stop cancels what is left)
            h = self._files._hints(g.job_id)
            if h is not None:
                out.append(h)
            ended = self._check(g, jobs.get(job_name(g.token), []), out)
            if ended is not None:
                out.append(ended)
        out += self.drains.settle(self._refresh_jobs() if self.drains.waiting else {})
        return out

    def _check(self, g: SlurmGen, parts: list[SlurmJob], out: list[BackendEvent]) -> GenerationEnded | None:
        """How `g` stands: None while it runs (or is held for Slurm's verdict on a node), else how it ended."""
        codes = self._codes(g)
        if all(c is not None for c in codes):
            return self._ended(g, codes)
        live = any(j.state in LIVE for j in parts)
        g.seen = g.seen or bool(parts)
        if live and not any(c not in (None, 0) for c in codes):
            return None  # running (rank 0 may end first: wait for the others)
        now = time.monotonic()
        if self._sick_nodes(g, out):  # a node of its placement is failing: the NodesChanged requeues the job
            g.held_since = g.held_since or now
            if now - g.held_since < self.node_loss_wait_s:
                return None
        if live:  # a crashed rank leaves its peers blocked in a collective: end the job, then read the files
            if g.killed is None:
                self.cli.cancel([g.slurm_id])
                g.killed = now
            if now - g.killed < 30.0:
                return None
        else:  # gone from Slurm with exit files missing: give the files (and a slow squeue) a moment
            g.gone_since = g.gone_since or now
            if now - g.gone_since < (2.0 if g.seen else 30.0):
                return None
        states = sorted({j.state for j in parts}) or ["unknown to squeue"]
        return self._ended(g, [DIED if c is None else c for c in codes], f"Slurm job {g.slurm_id} {states}")

    def _sick_nodes(self, g: SlurmGen, out: list[BackendEvent]) -> bool:
        change = self._refresh_nodes(force=True)
        if change is not None:
            out.append(change)
        state = {n.name: n for n in self._nodes}
        return any(state[n].dead or "NOT_RESPONDING" in state[n].states for n in g.nodes if n in state)

    def _ended(self, g: SlurmGen, codes: list[int | None], why: str = "") -> GenerationEnded:
        """As the local backend: rank 0 exiting 0 unsignalled finished the job; all 0 after a signal nobody
        asked for is an interruption (resumed); anything else failed."""
        self.gens.pop(g.job_id, None)
        self._files._hint_pos.pop(g.job_id, None)
        t, ok = time.time(), all(c == 0 for c in codes)
        signalled = [s for _, s in g.status] or [False] * len(codes)
        if ok and any(signalled):
            return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.INTERRUPTED, tuple(codes),
                                   "stopped by a signal")
        if ok or (codes and codes[0] == 0 and not signalled[0]):
            return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.SUCCEEDED, tuple(codes))
        return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.FAILED, tuple(codes),
                               f"generation {g.generation} exited with codes {codes}{'; ' + why if why else ''}")

    # ------------------------------------------------------------------ restart
    def recover(self, generations: Sequence[GenerationRecord]) -> list[BackendEvent]:
        """Find each generation's Slurm job by its name: adopt the wanted live ones, cancel the unwanted, settle
        the ended ones from their exit files, report the ones Slurm never had as lost."""
        out: list[BackendEvent] = []
        gens = [SlurmGen(r.job_id, r.generation, r.allocation, r.token, world=r.allocation.gpus,
                         nodes=tuple(n for n, k in r.allocation.placement for _ in range(k))) for r in generations]
        jobs = self._refresh_jobs(gens, force=True)
        for rec, g in zip(generations, gens, strict=True):
            parts = jobs.get(job_name(rec.token), [])
            g.slurm_id = min((j.job_id for j in parts), key=int, default="")
            codes = self._codes(g)
            live = any(j.state in LIVE for j in parts)
            if not rec.keep:
                self._stop_gens([g])
                out.append(GenerationEnded(time.time(), g.job_id, g.generation, GenerationOutcome.STOPPED,
                                           tuple(self._codes(g))))
            elif live and None in codes and rec.state != GenerationState.STOPPING:
                self.gens[g.job_id] = g
                out.append(JobStarted(time.time(), g.job_id, g.generation, adopted=True,
                                      devices=tuple(None for _ in g.nodes), external_id=f"slurm:{g.slurm_id}"))
            elif g.world and None not in codes and rec.state != GenerationState.STOPPING:
                out.append(self._ended(g, codes))
            else:  # never reached Slurm, or cut short mid-stop: resume from the checkpoint
                self._stop_gens([g])
                out.append(GenerationEnded(time.time(), g.job_id, g.generation, GenerationOutcome.LOST,
                                           tuple(codes), "gone while the service was down"))
        return out + self.poll()

    def close(self) -> None:
        """Slurm jobs keep running (a restarted service adopts them)."""
        self.gens.clear()


def _log_order(p: Path) -> tuple[int, int, int]:
    """`g3-r1.log` → (3, 0, 1); `slurm-g3.out` → (3, 1, 0): a generation's ranks, then Slurm's file."""
    if p.suffix == ".out":
        return int(p.stem.rsplit("-g", 1)[1]), 1, 0
    g, r = p.stem.split("-")
    return int(g[1:]), 0, int(r[1:])
