"""The cluster inventory read from Ray: which alive nodes exist, their GPU type, count and pool.

Convention (docs/ray.md): a node advertises its GPU type as a custom resource `gpu_<type>` whose amount is
its number of GPUs (`ray start --resources '{"gpu_t4": 4}'`; CPU-only machines can stand in with e.g.
`gpu_cpu`), and its pool as the node label `pool=train|loanable` (Ray 2.60 node labels, `ray start
--labels pool=loanable`). Labels work on this Ray; a node without the label falls back to the custom
resource `pool_loanable` (any amount > 0 = loanable), else it is a training node. Nodes without a
`gpu_<type>` resource (e.g. a head that only hosts the GCS) are not schedulable and are left out.

Node names are what the store, the API and `ls` show: the label `name` when set, else `<type>-<id6>` for
training nodes and `loan-<type>-<id6>` for loanable ones (<id6> = the first 6 hex digits of the Ray node id),
stable for the life of a Ray node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elastisched.core.types import NodeView, Pool

GPU_PREFIX = "gpu_"
POOL_LABEL = "pool"
POOL_FALLBACK = "pool_loanable"


@dataclass(frozen=True, slots=True)
class RayNode:
    name: str
    ray_id: str
    ip: str
    gpu_type: str
    num_gpus: int
    pool: Pool
    has_cuda: bool  # Ray also counts real GPUs (`GPU`) here: bundles then ask for one and nccl is used

    def view(self, index: int) -> NodeView:
        return NodeView(self.name, self.gpu_type, self.num_gpus, self.pool, index)


def parse_nodes(raw: Iterable[Mapping[str, Any]]) -> list[RayNode]:
    """Alive schedulable nodes of `ray.nodes()`, training before loanable, each in name order."""
    out: list[RayNode] = []
    for n in raw:
        if not n.get("Alive"):
            continue
        res: Mapping[str, float] = n.get("Resources") or {}
        types = sorted(k for k in res if k.startswith(GPU_PREFIX) and res[k] >= 1)
        if not types:
            continue
        labels: Mapping[str, str] = n.get("Labels") or {}
        gpu_type = types[0][len(GPU_PREFIX):].lower()
        pool_label = labels.get(POOL_LABEL, "").lower()
        loanable = pool_label == "loanable" or (not pool_label and res.get(POOL_FALLBACK, 0) > 0)
        rid = str(n["NodeID"])
        name = labels.get("name") or f"{'loan-' if loanable else ''}{gpu_type}-{rid[:6]}"
        out.append(RayNode(name, rid, str(n.get("NodeManagerAddress") or ""), gpu_type, int(res[types[0]]),
                           Pool.LOANABLE if loanable else Pool.TRAIN, res.get("GPU", 0) >= 1))
    out.sort(key=lambda r: (r.pool is Pool.LOANABLE, r.name))
    return out


def train_views(nodes: Iterable[RayNode]) -> tuple[NodeView, ...]:
    return tuple(n.view(i) for i, n in enumerate(x for x in nodes if x.pool is Pool.TRAIN))
