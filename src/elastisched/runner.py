"""Glue used by the CLI and the benchmarks: load models + workload + cluster, run policies with a progress bar."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError
from elastisched.core.types import NodeView
from elastisched.models.registry import PerfModels
from elastisched.policies.base import make_policy
from elastisched.sim import SimConfig, SimResult, simulate
from elastisched.workloads import Workload, load_workload

DEFAULT_CLUSTER = "16x4:t4"


@dataclass
class RunSetup:
    models: PerfModels
    workload: Workload
    nodes: tuple[NodeView, ...]
    cluster_spec: str


def load_cluster(spec: str) -> tuple[NodeView, ...]:
    """A cluster spec string, or a path to a YAML/JSON list of {nodes, gpus_per_node, gpu_type, pool}."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml", ".json") and path.exists():
        import yaml

        data = yaml.safe_load(path.read_text())
        items = data.get("nodes", data) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ConfigError("--cluster", spec, "file must hold a list of {nodes, gpus_per_node, gpu_type}")
        return parse_cluster(items)
    return parse_cluster(spec)


def setup(workload: str, cluster: str = DEFAULT_CLUSTER, profiles: str | None = None,
          restart_cost: float | None = None) -> RunSetup:
    models = PerfModels.load(profiles, restart_cost=restart_cost)
    nodes = load_cluster(cluster)
    wl = load_workload(workload, models)
    types = {n.gpu_type for n in nodes}
    for app in {j.application for j in wl.jobs}:
        missing = types - set(models.app(app).gpu_types)
        if missing:
            raise ConfigError("--cluster", cluster, f"application {app!r} has no profile for GPU type(s) "
                              f"{sorted(missing)}; pass --profiles with Sia's per-type traces")
    return RunSetup(models, wl, nodes, cluster)


def run_policies(s: RunSetup, policies: Sequence[str], seed: int = 0,
                 progress: Callable[[str], Callable[[float, int, int], None] | None] | None = None,
                 options: dict[str, Any] | None = None) -> dict[str, SimResult]:
    """Each policy on the same set-up; `options` become `PolicyContext.options` (data the caller loaded for a
    policy, e.g. `{"ones_history": history_table(path)}`: policies do no I/O)."""
    out: dict[str, SimResult] = {}
    for name in policies:
        policy = make_policy(name)
        cb = progress(name) if progress else None
        out[name] = simulate(s.workload, policy, s.nodes, s.models, SimConfig(seed=seed, progress=cb,
                                                                                  options=dict(options or {})))
        out[name].summary["cluster_spec"] = s.cluster_spec
    return out
