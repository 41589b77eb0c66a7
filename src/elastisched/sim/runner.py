"""Glue used by the CLI and the benchmarks: load models + workload + cluster, run policies with a progress bar."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError
from elastisched.core.nodes import node_set
from elastisched.core.types import NodeView
from elastisched.models.registry import PerfModels
from elastisched.policies.base import make_policy
from elastisched.sim import SimConfig, SimResult, simulate
from elastisched.sim.length_estimate import LengthEstimate
from elastisched.workloads import Workload, load_workload
from elastisched.workloads.schema import RESTART_COST

DEFAULT_CLUSTER = "16x4:t4"


@dataclass
class RunSetup:
    models: PerfModels
    workload: Workload
    nodes: tuple[NodeView, ...]
    cluster_spec: str


MAX_CLUSTER_FILE = 1 << 20  # bytes; a cluster file lists node groups, not nodes


def load_cluster(spec: str) -> tuple[NodeView, ...]:
    """A cluster spec string, or a path to a YAML/JSON list of {nodes, gpus_per_node, gpu_type, pool}."""
    path = Path(spec) if "\0" not in spec else None
    if path is None or path.suffix not in (".yaml", ".yml", ".json"):
        return parse_cluster(spec)
    import json

    import yaml

    try:
        if not path.is_file():
            raise ConfigError("--cluster", spec, "no such file" if not path.exists() else "not a regular file")
        if path.stat().st_size > MAX_CLUSTER_FILE:
            raise ConfigError("--cluster", spec, f"file larger than {MAX_CLUSTER_FILE} bytes")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as e:
        raise ConfigError("--cluster", spec, f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError("--cluster", spec, f"not UTF-8 text (byte offset {e.start})") from None
    try:
        if path.suffix == ".json":
            data = json.loads(text, parse_constant=lambda c: _bad_constant(spec, c))
        else:
            data = yaml.safe_load(text)
    except ConfigError:
        raise
    except json.JSONDecodeError as e:
        raise ConfigError("--cluster", spec, f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        why = str(getattr(e, "problem", None) or type(e).__name__)
        raise ConfigError("--cluster", spec, f"invalid YAML{where}: {why}") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer literal of thousands of digits
        raise ConfigError("--cluster", spec, f"unreadable: {str(e)[:120] or type(e).__name__}") from None
    items = data.get("nodes", data) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ConfigError("--cluster", spec, "file must hold a list of {nodes, gpus_per_node, gpu_type}")
    return parse_cluster(items)


def _bad_constant(spec: str, c: str) -> None:
    raise ConfigError("--cluster", spec, f"{c} is not a valid number in a cluster file")


def setup(workload: str, cluster: str = DEFAULT_CLUSTER, profiles: str | None = None,
          restart_cost: float | None = None) -> RunSetup:
    if restart_cost is not None:
        try:
            RESTART_COST.check(float(restart_cost))
        except (TypeError, ValueError) as e:
            raise ConfigError("--restart-cost", restart_cost, str(e)) from None
    models = PerfModels.load(profiles, restart_cost=restart_cost)
    nodes = load_cluster(cluster)
    wl = load_workload(workload, models)
    types = set(node_set(nodes).capacity)
    for app in {j.application for j in wl.jobs}:
        missing = types - set(models.app(app).gpu_types)
        if missing:
            raise ConfigError("--cluster", cluster, f"application {app!r} has no profile for GPU type(s) "
                              f"{sorted(missing)}; pass --profiles with Sia's per-type traces")
    # Build every throughput model the runs will ask for now, so that no policy's `wall_seconds` carries this
    # one-off cost (it went to whichever policy ran first).
    for app in sorted({j.application for j in wl.jobs}):
        for t in sorted(types):
            models.app(app).model(t)
    return RunSetup(models, wl, nodes, cluster)


def run_policies(s: RunSetup, policies: Sequence[str], seed: int = 0,
                 progress: Callable[[str], Callable[[float, int, int], None] | None] | None = None,
                 options: dict[str, Any] | None = None, length_estimate: LengthEstimate | None = None
                 ) -> dict[str, SimResult]:
    """Each policy on the same set-up; `options` become `PolicyContext.options` (data the caller loaded for a
    policy, e.g. `{"ones_history": history_table(path)}`: policies do no I/O); `length_estimate`: what jobs
    declare about their length (`sim.length_estimate`; exact by default)."""
    out: dict[str, SimResult] = {}
    for name in policies:
        policy = make_policy(name)
        cb = progress(name) if progress else None
        cfg = SimConfig(seed=seed, progress=cb, options=dict(options or {}),
                        length_estimate=length_estimate or LengthEstimate())
        out[name] = simulate(s.workload, policy, s.nodes, s.models, cfg)
        out[name].summary["cluster_spec"] = s.cluster_spec
    return out
