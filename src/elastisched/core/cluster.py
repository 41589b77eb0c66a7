"""Cluster specifications: `16x4:t4`, `6x4:t4,2x8:a100,3x8:rtx`, `pai`, or a dict/list loaded from YAML/JSON.

Counts are bounded (`MAX_NODES` nodes in all, `MAX_GPUS_PER_NODE` per node) and checked before any node is
built, so a typo such as `100000000x4` is an error rather than an unbounded allocation. Digits are ASCII
only and file entries must be real integers (not `true`, `2.5` or `"4"`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.core.types import NodeView, Pool

MAX_NODES = 100_000  # nodes in one cluster (all parts together)
MAX_GPUS_PER_NODE = 64
_TYPE = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_PART = re.compile(r"^\s*([0-9]{1,9})\s*x\s*([0-9]{1,9})\s*(?::\s*([A-Za-z0-9_.-]{1,32}))?\s*"
                   r"(?:@\s*(train|loanable))?\s*$")
_KEYS = ("nodes", "gpus_per_node", "gpu_type", "pool")

#: The GPU machines of Alibaba PAI in 2020 (alibaba/clusterdata `cluster-trace-gpu-v2020`, `pai_machine_spec.csv`,
#: rows counted by `gpu_type` and `cap_gpu`): (PAI GPU type, GPUs per machine, machines). The file's other 83
#: machines have no GPU. A derived table of counts, not the file (whose terms are research use).
PAI_MACHINES: tuple[tuple[str, int, int], ...] = (
    ("T4", 2, 497), ("P100", 2, 798), ("V100", 8, 104), ("V100M32", 8, 135), ("MISC", 8, 280))
PAI_GPUS = sum(g * n for _, g, n in PAI_MACHINES)  # 6,742
#: Each PAI GPU type priced as the first of these the run has profiles for (why: docs/scale.md, "The PAI
#: cluster"): V100M32 is a V100 with 32 GB; a P100 trains at ~0.77 of a V100 (Gavel's measured throughputs),
#: nearest the RTX 2080 Ti of Sia's profiles; MISC are older K40m / K80 / M60, slower than any profiled type.
PAI_TYPE_MAP: dict[str, tuple[str, ...]] = {
    "T4": ("t4",), "P100": ("rtx", "t4"), "V100": ("v100", "t4"), "V100M32": ("v100", "t4"), "MISC": ("t4",)}


def pai_type_map(profiled: Collection[str]) -> dict[str, str]:
    """The profiled type each PAI GPU type is priced as, given the types the run has profiles for."""
    out = {}
    for pai, choices in PAI_TYPE_MAP.items():
        usable = [t for t in choices if t in profiled]
        if not usable:
            raise ConfigError("--cluster", "pai", f"no profile for any of {list(choices)} (PAI {pai} GPUs)")
        out[pai] = usable[0]
    return out


def pai_cluster(profiled: Collection[str] = ("t4",)) -> tuple[NodeView, ...]:
    """The PAI composition (`PAI_MACHINES`, 1,814 GPU machines, 6,742 GPUs), each type priced as
    `pai_type_map(profiled)` says; nodes are named by their PAI type (`p100-17`), so the composition stays
    readable whatever they are priced as."""
    mapping = pai_type_map(profiled)
    nodes: list[NodeView] = []
    for pai, g, n in PAI_MACHINES:
        first = len(nodes)
        nodes.extend([NodeView(f"{pai.lower()}-{k}", mapping[pai], g, Pool.TRAIN, first + k) for k in range(n)])
    return tuple(nodes)


def _count(field: str, v: object, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(field, v[:80] if isinstance(v, str) else v, "must be an integer")
    if not 1 <= v <= hi:
        raise ConfigError(field, v, f"must be in [1, {hi}]")
    return v


def _file_part(i: int, item: object, default_gpu_type: str) -> tuple[int, int, str, Pool]:
    where = f"cluster[{i}]"
    if not isinstance(item, Mapping):
        raise ConfigError(where, item if not isinstance(item, str) else item[:80],
                          "must be a mapping {nodes, gpus_per_node[, gpu_type, pool]}")
    unknown = sorted(str(k)[:40] for k in item if k not in _KEYS)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", item.get(unknown[0]),
                          f"unknown key; known: {', '.join(_KEYS)}")
    for key in ("nodes", "gpus_per_node"):
        if key not in item:
            raise ConfigError(f"{where}.{key}", None, "missing; needs nodes, gpus_per_node[, gpu_type, pool]")
    n = _count(f"{where}.nodes", item["nodes"], MAX_NODES)
    g = _count(f"{where}.gpus_per_node", item["gpus_per_node"], MAX_GPUS_PER_NODE)
    t = item.get("gpu_type", default_gpu_type)
    if not isinstance(t, str) or not _TYPE.fullmatch(t):
        raise ConfigError(f"{where}.gpu_type", t, "must be a name of letters, digits, '_', '.', '-' (<= 32)")
    pool = item.get("pool", "train")
    if pool not in ("train", "loanable"):
        raise ConfigError(f"{where}.pool", pool, "must be train or loanable")
    return n, g, t.lower(), Pool(pool)


def parse_cluster(spec: str | Sequence[Mapping[str, Any]], default_gpu_type: str = "t4",
                  profiled: Collection[str] | None = None) -> tuple[NodeView, ...]:
    """Nodes named `<type>-<i>`; a part may end in `@loanable` for inference servers on loan. `pai` names the
    Alibaba PAI composition (`pai_cluster`), priced with the `profiled` GPU types (default: `default_gpu_type`)."""
    parts: list[tuple[int, int, str, Pool]] = []
    if isinstance(spec, str) and spec.strip().lower() == "pai":
        return pai_cluster(profiled if profiled is not None else (default_gpu_type,))
    if isinstance(spec, str):
        if not spec.strip():
            raise ConfigError("--cluster", spec, "empty cluster spec; expected e.g. 16x4:t4")
        for part in spec.split(","):
            m = _PART.match(part)
            if not m:
                raise ConfigError("--cluster", part[:80], "expected NODESxGPUS[:TYPE][@train|@loanable], e.g. 16x4:t4")
            parts.append((int(m[1]), int(m[2]), (m[3] or default_gpu_type).lower(), Pool(m[4] or "train")))
            n, g = parts[-1][:2]
            if n <= 0 or g <= 0:
                raise ConfigError("--cluster", part.strip(), "node and GPU counts must be > 0")
            if g > MAX_GPUS_PER_NODE:
                raise ConfigError("--cluster", part.strip(), f"at most {MAX_GPUS_PER_NODE} GPUs per node")
    else:
        if isinstance(spec, Mapping) or not isinstance(spec, Sequence) or not spec:
            raise ConfigError("cluster", type(spec).__name__, "must be a non-empty list of node groups")
        parts = [_file_part(i, item, default_gpu_type) for i, item in enumerate(spec)]
    total = sum(n for n, *_ in parts)
    if total > MAX_NODES:
        raise ConfigError("--cluster", spec if isinstance(spec, str) else f"{len(parts)} node groups",
                          f"{total} nodes; at most {MAX_NODES} in a cluster")
    nodes: list[NodeView] = []
    counters: dict[str, int] = {}
    for n, g, t, pool in parts:
        for _ in range(n):
            k = counters.get(t, 0)
            counters[t] = k + 1
            prefix = "loan" if pool is Pool.LOANABLE else t
            nodes.append(NodeView(f"{prefix}-{t}-{k}" if pool is Pool.LOANABLE else f"{t}-{k}", t, g, pool,
                                  len(nodes)))
    return tuple(nodes)
