"""The simulated cluster's GPU usage: per node and per type, kept up to date per change of allocation."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from elastisched.core.nodes import NodeSet
from elastisched.core.types import Allocation


class ClusterUsage:
    """`busy` GPUs in all, `node_used` (GPUs in use per node, in node-set order) and `free` (free GPUs per
    type) over the node set the cluster has now. Updated per allocation change so a round costs O(changes);
    rebuilt from the running allocations only when the node set changes (loans come and go; rare)."""

    def __init__(self) -> None:
        self.busy = 0
        self.free: dict[str, int] = {}
        self.node_used = np.zeros(0, dtype=np.int64)
        self._used = memoryview(self.node_used)  # `node_used`'s cells as Python ints (a numpy item costs 3x more)
        self._for: NodeSet | None = None
        self._copy: np.ndarray | None = None  # the read-only view of `node_used` (`snapshot_copy`)

    def is_for(self, nodes: NodeSet) -> bool:
        """Whether `node_used` and `free` are of `nodes` (else `sync` rebuilds them)."""
        return self._for is nodes

    def sync(self, nodes: NodeSet, running: Iterable[Allocation]) -> None:
        """Rebuild `node_used` and `free` for `nodes` when they are of another node set."""
        if self._for is nodes:
            return
        pos, types = nodes.position, nodes.gpu_type
        self.node_used = np.zeros(len(nodes), dtype=np.int64)
        self._used = memoryview(self.node_used)
        self.free = dict(nodes.capacity)
        self._copy = None
        for alloc in running:
            for n, g in alloc.placement:
                i = pos.get(n)
                if i is not None:
                    self._used[i] += g
                    self.free[types[n]] -= g
        self._for = nodes

    def account(self, nodes: NodeSet, alloc: Allocation, sign: int) -> None:
        """Add (+1) or release (-1) `alloc`; per node only while the aggregates are of `nodes` (else the next
        `sync` rebuilds them)."""
        if not alloc.placement:
            return
        self.busy += sign * alloc.gpus
        if self._for is not nodes:
            return
        pos, types, used, free = nodes.position, nodes.gpu_type, self._used, self.free
        for n, g in alloc.placement:
            i = pos.get(n)
            if i is not None:
                used[i] += sign * g
                free[types[n]] -= sign * g

    def snapshot_copy(self) -> np.ndarray:
        """A read-only view of `node_used` for a round's snapshot (made once per node set). A view,
        not a copy: the round reads it (the placer) before any of its changes is applied, and a snapshot is valid
        for its round only (`ClusterSnapshot`); the copy of every node's count cost more than the round's work."""
        if self._copy is None:
            self._copy = self.node_used.view()
            self._copy.flags.writeable = False
        return self._copy
