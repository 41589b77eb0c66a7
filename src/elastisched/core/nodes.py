"""One node set and what every consumer derives from it: positions, GPU types, capacity.

Rounds reuse one nodes tuple until the cluster changes (a loan arrives or returns), so the set is built once
per tuple and found again by the tuple's identity (`node_set`); the simulator, the engine's placer and
invariant check, the policies and the experiments all read it instead of rebuilding their own dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Node(Protocol):
    """What a node set reads of a node (`core.types.NodeView`; not imported, since `core.types` uses this)."""

    @property
    def node_id(self) -> str: ...
    @property
    def gpu_type(self) -> str: ...
    @property
    def num_gpus(self) -> int: ...


class NodeSet:
    """The facts of one node tuple: `position` (node → index in `nodes`), `gpu_type` (node → GPU type),
    `gpus` (node → GPUs), `capacity` (GPU type → GPUs, in first-seen type order) and `total_gpus`.
    Read-only by contract (plain dicts typed `Mapping`: hot loops read them, a proxy would slow each lookup);
    `derived` caches a consumer's own structure (the placer's arrays) on the set itself."""

    __slots__ = ("_derived", "capacity", "gpu_type", "gpus", "nodes", "position", "total_gpus")

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        self.nodes = nodes
        self.position: Mapping[str, int] = {n.node_id: i for i, n in enumerate(nodes)}
        self.gpu_type: Mapping[str, str] = {n.node_id: n.gpu_type for n in nodes}
        self.gpus: Mapping[str, int] = {n.node_id: n.num_gpus for n in nodes}
        capacity: dict[str, int] = {}
        for n in nodes:
            capacity[n.gpu_type] = capacity.get(n.gpu_type, 0) + n.num_gpus
        self.capacity: Mapping[str, int] = capacity
        self.total_gpus = sum(capacity.values())
        self._derived: dict[Any, Any] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def derived(self, key: Any, make: Callable[[NodeSet], T]) -> T:
        """`make(self)`, computed once per set and `key` (a consumer's name for what it derives)."""
        hit = self._derived.get(key)
        if hit is None:
            hit = self._derived[key] = make(self)
        return hit  # type: ignore[no-any-return]


_SETS: dict[int, NodeSet] = {}


def node_set(nodes: tuple[Node, ...]) -> NodeSet:
    """The `NodeSet` of `nodes`, built once per tuple (found by its identity; a few recent sets are kept)."""
    hit = _SETS.get(id(nodes))
    if hit is None or hit.nodes is not nodes:
        if len(_SETS) > 64:
            _SETS.clear()
        hit = _SETS[id(nodes)] = NodeSet(nodes)
    return hit
