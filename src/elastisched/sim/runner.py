"""Glue used by the CLI and the benchmarks: load models + workload + cluster, run policies with a progress bar."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError
from elastisched.core.nodes import node_set
from elastisched.core.types import NodeView
from elastisched.models.registry import PerfModels
from elastisched.policies.plugins import BuiltPolicy, build
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
    #: `SimConfig` fields a study's set-up fixes (`--setup sia`: batch changes in place at no cost)
    sim_overrides: dict[str, Any] = field(default_factory=dict)


MAX_CLUSTER_FILE = 1 << 20  # bytes; a cluster file lists node groups, not nodes


def load_cluster(spec: str, profiled: Collection[str] | None = None) -> tuple[NodeView, ...]:
    """A cluster spec string, or a path to a YAML/JSON list of {nodes, gpus_per_node, gpu_type, pool};
    `profiled`: the GPU types the run has profiles for (what `pai`'s GPU types are priced as)."""
    path = Path(spec) if "\0" not in spec else None
    if path is None or path.suffix not in (".yaml", ".yml", ".json"):
        return parse_cluster(spec, profiled=profiled)
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


SIA_TRACES_HINT = "../shared/peer-data/sia/traces"


def check_gpu_types(nodes: tuple[NodeView, ...], models: PerfModels, spec: str) -> None:
    """Every GPU type of the cluster is one a profile covers: a typo (`h900`) is named with the known types; a
    known type without its profile loaded names the `--profiles` folder that adds it."""
    import difflib

    from elastisched.models.profiles import POLLUX_GPU_TYPE, SIA_GPU_TYPES

    known = sorted({POLLUX_GPU_TYPE, *SIA_GPU_TYPES.values()})
    loaded = {t for app in models.apps.values() for t in app.gpu_types}
    for t in sorted({n.gpu_type for n in nodes}):
        if t not in known and t not in loaded:
            close = difflib.get_close_matches(t, known, n=1, cutoff=0.6)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError("--cluster", spec, f"unknown GPU type {t!r}; {guess}known: {', '.join(known)}")
        if t not in loaded:
            raise ConfigError("--cluster", spec, f"GPU type {t!r} has no profile loaded; pass --profiles "
                              f"{SIA_TRACES_HINT} (Sia's per-type traces)")


def profiled_types(models: PerfModels, apps: Collection[str]) -> set[str]:
    """The GPU types every one of `apps` has a profile for."""
    return set.intersection(*(set(models.app(a).gpu_types) for a in sorted(apps))) if apps else set()


def setup(workload: str, cluster: str = DEFAULT_CLUSTER, profiles: str | None = None,
          restart_cost: float | None = None) -> RunSetup:
    if restart_cost is not None:
        try:
            RESTART_COST.check(float(restart_cost))
        except (TypeError, ValueError) as e:
            raise ConfigError("--restart-cost", restart_cost, str(e)) from None
    models = PerfModels.load(profiles, restart_cost=restart_cost)
    nodes = load_cluster(cluster)  # a bad cluster is reported before a long workload is read
    if cluster.strip().lower() != "pai":  # pai's types are chosen from the workload's profiles below
        check_gpu_types(nodes, models, cluster)
    wl = load_workload(workload, models)
    if cluster.strip().lower() == "pai":  # priced with the GPU types the workload's applications are profiled for
        nodes = load_cluster(cluster, profiled_types(models, {j.application for j in wl.jobs}))
    types = set(node_set(nodes).capacity)
    for app in {j.application for j in wl.jobs}:
        missing = types - set(models.app(app).gpu_types)
        if missing:
            raise ConfigError("--cluster", cluster, f"application {app!r} has no profile for GPU type(s) "
                              f"{sorted(missing)}; pass --profiles {SIA_TRACES_HINT} (Sia's per-type traces)")
    # Build every throughput model the runs will ask for now, so that no policy's `wall_seconds` carries this
    # one-off cost (it went to whichever policy ran first).
    for app in sorted({j.application for j in wl.jobs}):
        for t in sorted(types):
            models.app(app).model(t)
    return RunSetup(models, wl, nodes, cluster)


def run_policies(s: RunSetup, policies: Sequence[str | BuiltPolicy], seed: int = 0,
                 progress: Callable[[str], Callable[[float, int, int], None] | None] | None = None,
                 options: dict[str, Any] | None = None, length_estimate: LengthEstimate | None = None
                 ) -> dict[str, SimResult]:
    """Each policy on the same set-up, keyed by its label (`gavel:objective=las` when options are set).
    A policy is a spec (`policies.plugins`: a name, `file.py:Class`, `package.module:Class`, with `:key=value`
    options) or one already built. `options` become `PolicyContext.options` (data the caller loaded for a
    policy, e.g. `{"ones_history": history_table(path)}`: policies do no I/O); `length_estimate`: what jobs
    declare about their length (`sim.length_estimate`; exact by default). Each summary records the policy's
    label, spec and every declared option's value."""

    built = [p if isinstance(p, BuiltPolicy) else build(p) for p in policies]
    labels = [b.label for b in built]
    for label in labels:
        if labels.count(label) > 1:
            raise ConfigError("--policies", label, "named more than once")
    out: dict[str, SimResult] = {}
    for b in built:
        cb = progress(b.label) if progress else None
        cfg = SimConfig(seed=seed, progress=cb, options=dict(options or {}),
                        length_estimate=length_estimate or LengthEstimate(), **s.sim_overrides)
        res = simulate(s.workload, b.policy, s.nodes, s.models, cfg)
        res.summary.update(cluster_spec=s.cluster_spec, policy_spec=b.label, policy_options=b.options,
                           **({"setup_overrides": dict(s.sim_overrides)} if s.sim_overrides else {}))
        out[b.label] = res
    return out
