"""Small helpers shared by the rule-based policies (free GPUs per type, type of a node)."""

from __future__ import annotations

from elastisched.core.types import Allocation, ClusterSnapshot


def take(free: dict[str, int], snap: ClusterSnapshot, a: Allocation) -> None:
    """Subtract an allocation's GPUs from the free count of their types."""
    types = node_types(snap)
    for n, g in a.placement:
        t = types.get(n)
        if t is not None:
            free[t] -= g


_TYPES_CACHE: dict[int, tuple[object, dict[str, str]]] = {}  # node tuple identity -> node types


def node_types(snap: ClusterSnapshot) -> dict[str, str]:
    """node id -> GPU type, cached per node set (rounds reuse the same tuple)."""
    hit = _TYPES_CACHE.get(id(snap.nodes))
    if hit is None or hit[0] is not snap.nodes:
        if len(_TYPES_CACHE) > 64:
            _TYPES_CACHE.clear()
        hit = _TYPES_CACHE[id(snap.nodes)] = (snap.nodes, {n.node_id: n.gpu_type for n in snap.nodes})
    return hit[1]


def fits(free: dict[str, int], types: tuple[str, ...], need: int) -> str | None:
    """GPU type with enough free GPUs for a whole job (jobs run on one type), most free first."""
    best = None
    for t, f in free.items():
        if (not types or t in types) and f >= need and (best is None or f > free[best]):
            best = t
    return best
