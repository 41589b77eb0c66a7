"""Cluster specifications: `16x4:t4`, `6x4:t4,2x8:a100,3x8:rtx`, or a dict/list loaded from YAML/JSON."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.core.types import NodeView, Pool

_PART = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*(?::\s*([A-Za-z0-9_.-]+))?\s*(?:@\s*(train|loanable))?\s*$")


def parse_cluster(spec: str | Sequence[Mapping[str, Any]], default_gpu_type: str = "t4") -> tuple[NodeView, ...]:
    """Nodes named `<type>-<i>`; a part may end in `@loanable` for inference servers on loan."""
    parts: list[tuple[int, int, str, Pool]] = []
    if isinstance(spec, str):
        if not spec.strip():
            raise ConfigError("--cluster", spec, "empty cluster spec; expected e.g. 16x4:t4")
        for part in spec.split(","):
            m = _PART.match(part)
            if not m:
                raise ConfigError("--cluster", part, "expected NODESxGPUS[:TYPE][@train|@loanable], e.g. 16x4:t4")
            parts.append((int(m[1]), int(m[2]), (m[3] or default_gpu_type).lower(), Pool(m[4] or "train")))
    else:
        for i, item in enumerate(spec):
            try:
                parts.append((int(item["nodes"]), int(item["gpus_per_node"]),
                              str(item.get("gpu_type", default_gpu_type)).lower(), Pool(item.get("pool", "train"))))
            except (KeyError, ValueError, TypeError) as e:
                raise ConfigError(f"cluster[{i}]", dict(item), f"needs nodes, gpus_per_node[, gpu_type, pool]: {e}"
                                  ) from None
    nodes: list[NodeView] = []
    counters: dict[str, int] = {}
    for n, g, t, pool in parts:
        if n <= 0 or g <= 0:
            raise ConfigError("--cluster", f"{n}x{g}:{t}", "node and GPU counts must be > 0")
        for _ in range(n):
            k = counters.get(t, 0)
            counters[t] = k + 1
            prefix = "loan" if pool is Pool.LOANABLE else t
            nodes.append(NodeView(f"{prefix}-{t}-{k}" if pool is Pool.LOANABLE else f"{t}-{k}", t, g, pool,
                                  len(nodes)))
    return tuple(nodes)
