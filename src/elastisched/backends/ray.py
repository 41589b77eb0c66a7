"""Ray backend: every job generation is a Ray placement group with one bundle per worker, each worker a Ray
actor that runs the user's script on the launch contract (`elastisched serve --backend ray`).

Issue 12 part 1; DESIGN.md "Backends". The engine decides, the backend executes, as `local.py` does:
- Inventory: the alive Ray nodes with a `gpu_<type>` resource, their pool from the node label `pool`
  (`_ray_nodes.py`). Nodes joining or leaving are reported as a `NodesChanged` event at the next poll.
- Launch: a placement group named `es-<launch token>` (detached, so it outlives the service) with one bundle
  `{gpu_<type>: 1}` (plus `GPU: 1` on nodes with real GPUs) per worker, each bundle pinned to its node by the
  label selector `ray.io/node-id`; one detached actor `es-<token>-r<rank>` (`_ray_worker.RankRunner`) per
  bundle starts `python -u -m elastisched.train._entry SCRIPT ARGS` with rank 0's node IP and a port free
  there as the torch.distributed rendezvous (the library picks nccl where the worker sees a GPU, else gloo).
- Files: logs (`jobs/<id>/logs/g<gen>-r<rank>.log`, the local backend's names), exit files and checkpoints
  are written by the workers into the service workdir, which every node must see at the same path (a
  shared file system; docs/ray.md). The service reads logs and hints from there as for the local backend.
- Resize / suspend / cancel: SIGTERM every affected worker at once → they checkpoint and exit 0 → after
  `grace_s` SIGKILL → kill the actors, remove the placement group; a resize then launches generation + 1.
- Node loss: a generation with a worker on a node that left is not reported as ended; the `NodesChanged`
  event names the node and the daemon suspends (and the engine replaces) the jobs placed on it, which resume
  from their last checkpoint. A rank's actor gone while Ray still calls its node alive holds the generation
  (peers' errors included) until that verdict, up to `node_loss_wait_s`; a rank failing on a live node fails it.
- Service restart: `recover` finds each generation's placement group and actors by the launch token in
  their names: adopted when wanted and running, stopped when not, settled from the exit files when they
  ended while the service was down, `lost` (resumed from the checkpoint) when nothing is left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elastisched.backends._ray_files import DIED, NodeLeft, exit_code, exit_files
from elastisched.backends._ray_launch import _Group, _Rank, place_generation, start_ranks
from elastisched.backends._ray_nodes import RayNode, parse_nodes, train_views
from elastisched.backends.base import (
    BackendBase,
    BackendEvent,
    GenerationEnded,
    GenerationRecord,
    JobStarted,
    NodesChanged,
    stops_then_launches,
)
from elastisched.backends.local import LocalBackend
from elastisched.core.enums import GenerationOutcome, GenerationState
from elastisched.core.events import Action, LaunchSpec
from elastisched.core.types import Allocation, NodeView, Pool

log = logging.getLogger("elastisched.service")
NAMESPACE = "elastisched"
__all__ = ["NAMESPACE", "RayBackend", "_Group", "_Rank"]


class RayBackend(BackendBase):
    """Placement groups and actors on a Ray cluster. `apply` blocks for at most `grace_s` per stop."""

    def __init__(self, workdir: str | os.PathLike[str], *, address: str = "auto", grace_s: float = 15.0,
                 extra_env: dict[str, str] | None = None, ready_timeout_s: float = 60.0,
                 nodes_every_s: float = 1.0, node_loss_wait_s: float = 30.0,
                 alive_every_s: float = 2.0, namespace: str = NAMESPACE) -> None:
        import ray

        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, namespace=namespace, log_to_driver=False, logging_level="WARNING")
        from elastisched.backends._ray_worker import RankRunner

        self.runner = RankRunner
        self.namespace = namespace
        self.workdir = Path(workdir).resolve()
        self.grace_s = grace_s
        self.extra_env = dict(extra_env or {})
        self.ready_timeout_s = ready_timeout_s
        self.nodes_every_s = nodes_every_s
        self.node_loss_wait_s = node_loss_wait_s
        self.alive_every_s = alive_every_s  # Ray's GCS declares a node dead after missed health checks
        self.groups: dict[str, _Group] = {}
        self._pending: list[BackendEvent] = []
        self._hints = LocalBackend(self.workdir)  # hints.jsonl and log paths: same files, same reader
        self._nodes = parse_nodes(ray.nodes())
        self._nodes_at = time.monotonic()

    # ------------------------------------------------------------------ inventory
    def inventory(self) -> tuple[NodeView, ...]:
        """Training nodes now (the service's base nodes)."""
        return train_views(self._nodes)

    def loanable(self) -> list[NodeView]:
        """Alive nodes of the `loanable` pool: the inference servers a loan offer may name."""
        return [n.view(0) for n in self._nodes if n.pool is Pool.LOANABLE]

    def _node(self, name: str) -> RayNode | None:
        return next((n for n in self._nodes if n.name == name), None)

    def _refresh_nodes(self, force: bool = False) -> NodesChanged | None:
        if not force and time.monotonic() - self._nodes_at < self.nodes_every_s:
            return None
        now = parse_nodes(self.ray.nodes())
        self._nodes_at = time.monotonic()
        before, after = {n.name: n for n in self._nodes}, {n.name: n for n in now}
        if before == after:
            return None
        self._nodes = now
        lost = tuple(sorted(set(before) - set(after)))
        log.warning("Ray nodes changed: now %s; lost %s", sorted(after), list(lost))
        return NodesChanged(time.time(), train_views(now), lost)

    # ------------------------------------------------------------------ paths
    def job_dir(self, job_id: str) -> Path:
        return self.workdir / "jobs" / job_id

    def log_paths(self, job_id: str) -> list[Path]:
        return self._hints.log_paths(job_id)

    # ------------------------------------------------------------------ actions
    def apply(self, actions: Sequence[Action]) -> None:
        stops, launches = stops_then_launches(actions)
        self._stop_many(stops, GenerationOutcome.STOPPED)
        for a, launch in launches:
            self._pending.append(self._launch(a.job_id, a.allocation, launch))

    def cancel(self, job_id: str) -> None:
        self._stop_many([job_id], GenerationOutcome.CANCELLED)
        self._hints._hint_pos.pop(job_id, None)

    def _stop_many(self, job_ids: Sequence[str], outcome: str) -> None:
        groups = [self.groups.pop(j) for j in job_ids if j in self.groups]
        self._stop_groups(groups)
        for g in groups:
            self._pending.append(GenerationEnded(time.time(), g.job_id, g.generation, outcome,
                                                 tuple(c for c, _ in g.status)))

    def _stop_groups(self, groups: Sequence[_Group]) -> None:
        """SIGTERM all at once (they checkpoint in parallel), wait up to grace, SIGKILL, then free Ray."""
        for g in groups:
            self._signal(g, "SIGTERM")
        deadline = time.monotonic() + self.grace_s
        for g in groups:
            self._codes(g)  # learns which actors are already gone (their exit file will never come)
        while time.monotonic() < deadline and any(self._codes(g, ask=False).count(None) for g in groups):
            time.sleep(0.1)
        for g in groups:
            if None in self._codes(g):
                self._signal(g, "SIGKILL")
                end = time.monotonic() + 5.0
                while None in self._codes(g) and time.monotonic() < end:
                    time.sleep(0.05)
            self._release(g.ranks, g.pg)

    def _signal(self, g: _Group, sig: str) -> None:
        refs = [r.actor.signal.remote(sig) for r in g.ranks]
        with contextlib.suppress(Exception):
            self.ray.wait(refs, num_returns=len(refs), timeout=10)

    def _release(self, ranks: Sequence[_Rank], pg: Any) -> None:
        """Kill the actors (their children die with them: PDEATHSIG) and remove the placement group."""
        for r in ranks:
            with contextlib.suppress(Exception):
                self.ray.kill(r.actor, no_restart=True)
        if pg is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(pg)

    def _codes(self, g: _Group, ask: bool = True) -> list[int | None]:
        """Exit code per rank (None: running, or not answering yet; DIED: its actor is gone), and whether each
        was signalled. The exit files on the shared directory answer for ranks that ended (a stat per rank);
        Ray is asked (`ask`) only to learn whether the others' actors are still alive, which the poll does
        every `alive_every_s` rather than every tick (each question is an RPC to every actor). Never blocks
        long: an actor on a vanished node answers only once Ray declares the node dead."""
        files = exit_files(self.job_dir(g.job_id), g.generation, len(g.ranks))
        prev = g.status if len(g.status) == len(g.ranks) else [(None, False)] * len(g.ranks)
        out = [(exit_code(f), len(f) > 1) if f is not None else p for f, p in zip(files, prev, strict=True)]
        if ask and any(c is None for c, _ in out):
            g.asked = time.monotonic()
            idx = [i for i, (c, _) in enumerate(out) if c is None]
            refs = [g.ranks[i].actor.status.remote() for i in idx]
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=2.0)
            done = set(ready)
            for i, ref in zip(idx, refs, strict=True):
                if ref not in done:
                    continue
                try:
                    code, signalled, _pid = self.ray.get(ref, timeout=1.0)
                    out[i] = (code, signalled)
                except Exception:  # RayActorError / ActorDiedError: the worker is gone
                    out[i] = (DIED, False)
                    g.gone.add(i)
        g.status = out
        return [c for c, _ in out]

    def _launch(self, job_id: str, alloc: Allocation, spec: LaunchSpec) -> BackendEvent:
        """Placement group + actors for generation `spec.generation` (recorded by the daemon with its token).
        What cannot start ends the generation as `launch_failed` with the reason (the job fails, not us); a
        launch a node loss cut short ends as `lost` after the `NodesChanged` (the job requeues, not retried)."""
        gen, pg, ranks = spec.generation, None, []
        names = [n for n, k in alloc.placement for _ in range(k)]
        try:
            pg, rnodes = place_generation(self, names, spec)
            port = start_ranks(self, job_id, alloc, spec, pg, rnodes, ranks)
        except Exception as e:  # Ray errors, timeouts, contract errors: this job's launch, not the service
            if isinstance(e, NodeLeft) or (isinstance(e, self.ray.exceptions.RayError) and self._left(names, True)):
                self._release(ranks, pg)  # the NodesChanged queued first requeues the job: this end is moot
                return GenerationEnded(time.time(), job_id, gen, GenerationOutcome.LOST,
                                       reason=f"launch of generation {gen}: {e}")
            self._release(ranks, pg)
            why = f"launch of generation {gen} failed: {type(e).__name__}: {e}"[:1000]
            return GenerationEnded(time.time(), job_id, gen, GenerationOutcome.LAUNCH_FAILED, reason=why)
        self.groups[job_id] = _Group(job_id, gen, alloc, spec.token, ranks, pg)
        return JobStarted(time.time(), job_id, gen, pids=tuple((r.pid, r.ticks) for r in ranks),
                          devices=tuple(None for _ in ranks), port=port)

    def _left(self, names: Sequence[str], force: bool = False) -> list[str]:
        """Which of `names` Ray reports gone since the last look (the `NodesChanged` saying so is queued first, so
        the daemon requeues the job before it reads the generation's end as `lost`)."""
        change = self._refresh_nodes(force=force)
        if change is None:
            return []
        self._pending.append(change)
        return sorted(set(names) & set(change.lost))

    # ------------------------------------------------------------------ events
    def poll(self) -> list[BackendEvent]:
        out, self._pending = self._pending, []
        changed = self._refresh_nodes()
        if changed is not None:
            out.append(changed)
        lost = set(changed.lost) if changed is not None else set()
        for g in list(self.groups.values()):
            if lost & {r.node for r in g.ranks}:
                continue  # the daemon suspends it on the NodesChanged event (its stop frees what is left)
            h = self._hints._hints(g.job_id)
            if h is not None:
                out.append(h)
            codes = self._codes(g, ask=time.monotonic() - g.asked >= self.alive_every_s)
            if all(c is None for c in codes):
                continue
            if None in codes:  # some ranks ended: learn now whether the others' actors still live
                codes = self._codes(g)
            if g.gone and self._may_be_node_loss(g, out):
                continue
            if any(c not in (None, 0) for c in codes) and None in codes:
                if g.killed is None:  # a crashed rank leaves its peers blocked in a collective
                    self._signal(g, "SIGKILL")
                    g.killed = time.monotonic()
                codes = self._codes(g)
                if g.gone and self._may_be_node_loss(g, out):
                    continue
                if None in codes and time.monotonic() - g.killed < self.node_loss_wait_s:
                    continue  # an actor that has not answered yet: its exit file or its death will
            elif None in codes:
                continue  # rank 0 done first; wait for the others
            out.append(self._ended(g, codes))
        return out

    def _may_be_node_loss(self, g: _Group, out: list[BackendEvent]) -> bool:
        """An actor of `g` is gone without an exit file: its node may be leaving, and then its peers' failures
        (a collective's connection reset) are that loss, not the job's. Hold the generation until Ray declares
        the node dead (`NodesChanged`: the daemon suspends the job, which resumes from its checkpoint elsewhere)
        or `node_loss_wait_s` passes (then it failed: a bounded retry)."""
        if g.dead_since is None:
            log.warning("job %s generation %d: the actors of ranks %s are gone (codes %s)", g.job_id,
                        g.generation, sorted(g.gone), [c for c, _ in g.status])
            g.dead_since = time.monotonic()
            change = self._refresh_nodes(force=True)
            if change is not None:
                out.append(change)
        return time.monotonic() - g.dead_since < self.node_loss_wait_s

    def _ended(self, g: _Group, codes: list[int | None]) -> GenerationEnded:
        """As the local backend: rank 0 exiting 0 unsignalled finished the job; all 0 after a signal nobody
        asked for is an interruption (resumed); anything else failed."""
        self.groups.pop(g.job_id, None)
        self._hints._hint_pos.pop(g.job_id, None)
        self._release(g.ranks, g.pg)
        t, ok = time.time(), all(c == 0 for c in codes)
        signalled = [s for _, s in g.status] or [False] * len(codes)
        if ok and any(signalled):
            return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.INTERRUPTED, tuple(codes),
                                   "stopped by a signal")
        if ok or (codes[0] == 0 and not signalled[0]):
            return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.SUCCEEDED, tuple(codes))
        return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.FAILED, tuple(codes),
                               f"generation {g.generation} exited with codes {codes}")

    # ------------------------------------------------------------------ restart
    def recover(self, generations: Sequence[GenerationRecord]) -> list[BackendEvent]:
        """Find each generation's actors and placement group by its launch token: adopt the wanted running
        ones, stop the unwanted, settle the ended ones from their exit files, report the vanished as lost."""
        from ray.util.placement_group import get_placement_group

        out: list[BackendEvent] = []
        for rec in generations:
            jid, n = rec.job_id, rec.generation
            names = [x for x, k in rec.allocation.placement for _ in range(k)]
            ranks: list[_Rank] = []
            for r, node in enumerate(names):
                with contextlib.suppress(Exception):
                    ranks.append(_Rank(self.ray.get_actor(f"es-{rec.token}-r{r}", namespace=self.namespace), node))
            pg = None
            with contextlib.suppress(Exception):
                pg = get_placement_group(f"es-{rec.token}")
            g = _Group(jid, n, rec.allocation, rec.token, ranks, pg)
            if not rec.keep:
                self._stop_groups([g])
                out.append(GenerationEnded(time.time(), jid, n, GenerationOutcome.STOPPED,
                                           tuple(c for c, _ in g.status)))
                continue
            codes = self._codes(g) if ranks else []
            running = all(c is None for c in codes) or (None in codes and not any(codes))  # rank 0 may end first
            if len(ranks) == len(names) and names and running:
                st = [self.ray.get(r.actor.status.remote(), timeout=30) for r in ranks]
                for r, (_c, _s, pid) in zip(ranks, st, strict=True):
                    r.pid = int(pid)
                self.groups[jid] = g
                out.append(JobStarted(time.time(), jid, n, adopted=True, pids=tuple((r.pid, None) for r in ranks),
                                      devices=tuple(None for _ in ranks)))
                continue
            files = exit_files(self.job_dir(jid), n, len(names))
            if names and all(f is not None for f in files) and rec.state != GenerationState.STOPPING:
                g.status = [(exit_code(f), len(f) > 1) for f in files if f is not None]
                out.append(self._ended(g, [c for c, _ in g.status]))
                continue
            self._stop_groups([g])  # partly started, or gone while we were down: resume from the checkpoint
            out.append(GenerationEnded(time.time(), jid, n, GenerationOutcome.LOST, tuple(codes),
                                       "gone while the service was down"))
        return out + self.poll()

    def close(self) -> None:
        """Disconnect; the detached actors and placement groups keep running (a restarted service adopts them)."""
        self.groups.clear()
        with contextlib.suppress(Exception):
            self.ray.shutdown()
