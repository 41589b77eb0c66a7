"""Building one Ray generation: its placement group (one bundle per worker, pinned to its node) and its rank
actors started on the launch contract. Apart from `ray.py`, which supervises generations once they run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from elastisched.backends._local_procs import TOKEN
from elastisched.backends._ray_files import NodeLeft
from elastisched.backends._ray_nodes import RayNode
from elastisched.core.events import LaunchSpec
from elastisched.core.types import Allocation
from elastisched.train.contract import CHECKPOINT_DIR, PREFIX, worker_envs


class RayLauncher(Protocol):
    """What building a generation needs of the Ray backend (`ray.RayBackend` is one)."""

    ray: Any
    runner: Any
    namespace: str
    ready_timeout_s: float
    extra_env: dict[str, str]

    def job_dir(self, job_id: str) -> Path: ...

    def _left(self, names: Sequence[str], force: bool = False) -> list[str]: ...

    def _node(self, name: str) -> RayNode | None: ...


@dataclass
class _Rank:
    actor: Any
    node: str  # node name (NodeView id)
    pid: int = 0
    ticks: int | None = None


@dataclass
class _Group:
    job_id: str
    generation: int
    allocation: Allocation
    token: str
    ranks: list[_Rank]
    pg: Any
    dead_since: float | None = None  # when a dead actor was first seen on a node Ray still calls alive
    gone: set[int] = field(default_factory=set)  # ranks whose actor is gone without writing an exit file
    killed: float | None = None  # when its surviving ranks were SIGKILLed after a peer failed
    status: list[tuple[int | None, bool]] = field(default_factory=list)
    asked: float = 0.0  # when Ray was last asked whether the actors live


def place_generation(b: RayLauncher, names: list[str], spec: LaunchSpec) -> tuple[Any, list[RayNode]]:
    """The generation's placement group, ready: one bundle `{gpu_<type>: 1}` (plus `GPU: 1` on nodes with real
    GPUs) per worker, each pinned to its node. A node that left since the plan raises `NodeLeft` (that loss,
    not the job's failure); one Ray does not know, or a group not ready in time, raises RuntimeError."""
    from ray.util.placement_group import placement_group

    if left := b._left(names, force=True):
        raise NodeLeft(f"node {', '.join(left)} left the Ray cluster")
    nodes = [b._node(n) for n in names]
    missing = sorted({n for n, rn in zip(names, nodes, strict=True) if rn is None})
    if missing:
        raise RuntimeError(f"node {', '.join(missing)} is not an alive node of the Ray cluster")
    rnodes = [n for n in nodes if n is not None]
    bundles = [{f"gpu_{n.gpu_type}": 1.0, **({"GPU": 1.0} if n.has_cuda else {})} for n in rnodes]
    pg = placement_group(bundles, strategy="PACK", name=f"es-{spec.token}", lifetime="detached",
                         bundle_label_selector=[{"ray.io/node-id": n.ray_id} for n in rnodes])
    ready_ref, until = pg.ready(), time.monotonic() + b.ready_timeout_s
    while not (ready := b.ray.wait([ready_ref], timeout=1.0)[0]) and time.monotonic() < until:
        if left := b._left(names):  # a bundle's node died: it would wait forever
            raise NodeLeft(f"node {', '.join(left)} left the Ray cluster")
    if not ready:
        raise RuntimeError(f"placement group not ready after {b.ready_timeout_s:g} s (bundles {bundles} on {names})")
    return pg, rnodes


def start_ranks(b: RayLauncher, job_id: str, alloc: Allocation, spec: LaunchSpec, pg: Any, rnodes: list[RayNode],
                ranks: list[_Rank]) -> int:
    """One detached actor per bundle (appended to `ranks` as it is made, so a failure can release it) running
    `python -u -m elastisched.train._entry SCRIPT ARGS`, rank 0's node IP and a port free there as the
    rendezvous; returns that port. Each rank's PID and start ticks are filled in."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    gen, jd = spec.generation, b.job_dir(job_id)
    names = [n for n, k in alloc.placement for _ in range(k)]
    for r, n in enumerate(rnodes):
        actor = b.runner.options(
            name=f"es-{spec.token}-r{r}", namespace=b.namespace, lifetime="detached",
            num_gpus=1 if n.has_cuda else 0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=r),
        ).remote()
        ranks.append(_Rank(actor, n.name))
    _rid, ip, port = b.ray.get(ranks[0].actor.where.remote(), timeout=b.ready_timeout_s)
    accum = [int((alloc.accumulation or {}).get(n, 1)) for n in names]
    envs = worker_envs(nproc=len(names), master_port=port, master_addr=ip, job_id=job_id, generation=gen,
                       accum=accum, local_batch=alloc.local_batch, global_batch=spec.batch_size,
                       checkpoint_dir=str(jd / "ckpt"))
    per_node = {n: names.count(n) for n in names}
    refs = []
    for r, (le, rank) in enumerate(zip(envs, ranks, strict=True)):
        env = {**le.to_env(), "LOCAL_WORLD_SIZE": str(per_node[rank.node]), **b.extra_env, **spec.env,
               PREFIX + "NODE": rank.node, CHECKPOINT_DIR: str(jd / "ckpt"), TOKEN: spec.token}
        env.setdefault("OMP_NUM_THREADS", "1")
        refs.append(rank.actor.start.remote([spec.script, *spec.args], env, str(jd),
                                            str(jd / "logs" / f"g{gen}-r{r}.log"),
                                            str(jd / "run" / f"g{gen}-r{r}.exit")))
    for rank, (pid, ticks) in zip(ranks, b.ray.get(refs, timeout=b.ready_timeout_s), strict=True):
        rank.pid, rank.ticks = int(pid), int(ticks)
    return int(port)
