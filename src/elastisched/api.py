"""The Python API: `elastisched.simulate`, `elastisched.compare`, `elastisched.sweep` (docs/python.md).

Each takes the same specs as the CLI (a workload: `pollux:workload-6`, `philly:sample=1000`, a path; a policy:
`tiresias`, `gavel:objective=max_sum_throughput`, `path/file.py:Class`; a cluster: `16x4:t4`) and runs the same
code (`sim.runner`, `sim.sweep`), so a result equals what the CLI writes for the same arguments. Results hold
pandas DataFrames (`jobs`, `timeline`, `summary`) and write the CLI's files with `.report(path)`. This module is
the stable surface: names here keep their meaning across versions; the modules behind it may change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from elastisched.policies.plugins import BuiltPolicy
    from elastisched.sim.metrics import SimResult
    from elastisched.sim.runner import RunSetup
    from elastisched.sim.sweep import CellResult

__all__ = ["Comparison", "Run", "Sweep", "compare", "simulate", "sweep"]


def _flat(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's plain figures (nested ones, e.g. `cluster`, `decomposition`, as `cluster.gpus` columns)."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in _flat(value).items()})
        elif not isinstance(value, list | tuple):
            out[key] = value
    return out


@dataclass
class Run:
    """One policy on one workload: `summary.json`'s figures (`summary_dict`), `jobs.csv`, `timeline.csv`."""

    label: str
    result: SimResult
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def jobs(self) -> pd.DataFrame:
        return self.result.jobs

    @property
    def timeline(self) -> pd.DataFrame:
        return self.result.timeline

    @property
    def summary_dict(self) -> dict[str, Any]:
        """The run's summary exactly as `summary.json` holds it."""
        return self.result.summary

    @property
    def summary(self) -> pd.DataFrame:
        """One row (indexed by the policy's label) of the summary's figures."""
        import pandas as pd

        return pd.DataFrame([_flat(self.result.summary)], index=pd.Index([self.label], name="policy"))

    def report(self, path: str | Path) -> Path:
        """Write what `sim run` writes (summary.json, jobs.csv, timeline.csv) and a report.html; its path."""
        return Comparison({self.label: self}, self.config).report(path, per_policy=False)


@dataclass
class Comparison:
    """Several policies on the same workload and cluster, keyed by label (as `sim compare` names them)."""

    runs: dict[str, Run]
    config: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, label: str) -> Run:
        return self.runs[label]

    @property
    def summary(self) -> pd.DataFrame:
        import pandas as pd

        return pd.concat([r.summary for r in self.runs.values()])

    def _stacked(self, part: str) -> pd.DataFrame:
        import pandas as pd

        frames = [getattr(r, part).assign(policy=label) for label, r in self.runs.items()]
        out = pd.concat(frames, ignore_index=True)
        return out[["policy", *[c for c in out.columns if c != "policy"]]]

    @property
    def jobs(self) -> pd.DataFrame:
        """Every policy's `jobs.csv`, one above the other, with a `policy` column first."""
        return self._stacked("jobs")

    @property
    def timeline(self) -> pd.DataFrame:
        return self._stacked("timeline")

    def report(self, path: str | Path, per_policy: bool = True) -> Path:
        """Write what `sim compare` writes (report.html, summary.csv, plots, one folder per policy); the
        report's path."""
        from elastisched.report.compare import compare_report, write_files, write_run

        out = Path(path)
        results = {label: r.result for label, r in self.runs.items()}
        first = next(iter(results.values())).summary
        files = compare_report(results, f"Policy comparison on {first.get('workload', '?')}", self.config)
        write_files(out, files)
        for label, r in results.items():
            write_run(out / label if per_policy else out, r)
        return out / "report.html"


@dataclass
class Sweep:
    """Policies × workloads × seeds (× clusters): each cell's summary figures, and the aggregate."""

    results: list[CellResult]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def cells(self) -> pd.DataFrame:
        """One row per simulation (workload, cluster, policy, seed, status and its figures)."""
        import pandas as pd

        from elastisched.sim.sweep import cell_rows

        return pd.DataFrame(cell_rows(self.results))

    @property
    def summary(self) -> pd.DataFrame:
        """One row per (policy, workload, cluster): each figure's mean over the seeds and its 95 % interval."""
        import pandas as pd

        from elastisched.sim.sweep import aggregate

        return pd.DataFrame(aggregate(self.results))

    def report(self, path: str | Path) -> Path:
        """Write what `sim sweep` writes (cells.csv, summary.csv, summary.json, plot, report.html)."""
        from elastisched.report.sweep import write_sweep

        write_sweep(Path(path), self.results, self.config)
        return Path(path) / "report.html"


def run_setup(workload: str, cluster: str | None = None, profiles: str | None = None,
              restart_cost: float | None = None, setup: str | None = None) -> RunSetup:
    """The models, workload and cluster of a run: the default set-up, or a reproduced study's (`setup="sia"`)."""
    from elastisched.core.errors import ConfigError
    from elastisched.sim.runner import DEFAULT_CLUSTER
    from elastisched.sim.runner import setup as default_setup

    if setup is None:
        return default_setup(workload, DEFAULT_CLUSTER if cluster is None else cluster, profiles, restart_cost)
    if setup != "sia":
        raise ConfigError("--setup", setup, "unknown set-up; known: sia")
    if restart_cost is not None:
        raise ConfigError("--restart-cost", restart_cost, "--setup sia uses Sia's restart cost per application")
    from elastisched.experiments.sia import run_setup as sia_setup

    return sia_setup(workload, cluster, profiles)


def build_policies(texts: Sequence[str], extra: Mapping[str, Mapping[str, Any]] | None = None,
                   where: str = "--policies", extra_where: str = "policy_options") -> list[BuiltPolicy]:
    """Policy specs (each text comma-separated, `policies.options.split_specs`) built and checked before anything
    runs: unknown policies, unknown options, bad values, options for a policy not named, the same run twice."""
    from elastisched.core.errors import ConfigError
    from elastisched.policies.options import split_specs
    from elastisched.policies.plugins import build, load_class

    specs = [s for t in texts for s in split_specs(t, where)]
    names = {load_class(s.ref, where).name for s in specs}
    extra = dict(extra or {})
    for name in extra:
        if name not in names:
            raise ConfigError(extra_where, name, f"names a policy not run here ({', '.join(sorted(names))})")
    built = [build(s, extra.get(load_class(s.ref, where).name), where) for s in specs]
    labels = [b.label for b in built]
    dupes = sorted({n for n in labels if labels.count(n) > 1})
    if dupes:
        raise ConfigError(where, dupes[0], "named more than once")
    return built


def compare(workload: str, policies: str | Sequence[str], cluster: str | None = None, seed: int = 0, *,
            profiles: str | None = None, restart_cost: float | None = None, length_estimate: str = "exact",
            setup: str | None = None, policy_options: Mapping[str, Mapping[str, Any]] | None = None
            ) -> Comparison:
    """Several policies on one workload, as `sim compare` runs them. `policies`: a comma-separated text or a
    list of specs; `policy_options`: per policy name, options as Python values (a spec's own override them)."""
    from elastisched import __version__
    from elastisched.sim.length_estimate import LengthEstimate
    from elastisched.sim.runner import run_policies

    built = build_policies([policies] if isinstance(policies, str) else list(policies), policy_options, "policies")
    estimate = LengthEstimate.parse(length_estimate)
    s = run_setup(workload, cluster, profiles, restart_cost, setup)
    results = run_policies(s, built, int(seed), length_estimate=estimate)
    config = {"workload": workload, "digest": s.workload.digest, "cluster": s.cluster_spec, "seed": int(seed),
              "policies": [b.label for b in built], "policy_options": {b.label: b.options for b in built},
              "setup": setup, "length_estimate": str(estimate), "version": __version__}
    return Comparison({label: Run(label, r, config) for label, r in results.items()}, config)


def simulate(workload: str, policy: str, cluster: str | None = None, seed: int = 0, *, profiles: str | None = None,
             restart_cost: float | None = None, length_estimate: str = "exact", setup: str | None = None,
             options: Mapping[str, Any] | None = None) -> Run:
    """One policy on one workload, as `sim run` runs it; `options` are the policy's (Python values)."""
    from elastisched.policies.options import parse_spec
    from elastisched.policies.plugins import load_class

    name = load_class(parse_spec(policy, "policy").ref, "policy").name
    comparison = compare(workload, [policy], cluster, seed, profiles=profiles, restart_cost=restart_cost,
                         length_estimate=length_estimate, setup=setup, policy_options={name: dict(options or {})})
    return next(iter(comparison.runs.values()))


def sweep(workloads: str | Sequence[str], policies: str | Sequence[str], seeds: str | Sequence[int] = (0, 1, 2),
          clusters: str | Sequence[str] = ("16x4:t4",), *, workers: int = 1, profiles: str | None = None,
          length_estimate: str = "exact") -> Sweep:
    """The cross product, as `sim sweep` runs it (`pollux:workload-1..8` ranges, seeds `0..2`), in `workers`
    processes; each cell's figures are the same as a serial run's."""
    from elastisched import __version__
    from elastisched.sim.sweep import expand, make_cells, parse_seeds, run_sweep

    wls = [x for w in ([workloads] if isinstance(workloads, str) else workloads) for x in expand(w)]
    cls = [x for c in ([clusters] if isinstance(clusters, str) else clusters) for x in expand(c)]
    names = [b.spec for b in build_policies([policies] if isinstance(policies, str) else list(policies))]
    seed_list = parse_seeds(seeds) if isinstance(seeds, str) else [int(s) for s in seeds]
    cells = make_cells(wls, names, seed_list, cls, profiles, length_estimate=length_estimate)
    config = {"workloads": wls, "clusters": cls, "policies": names, "seeds": seed_list, "workers": workers,
              "length_estimate": length_estimate, "version": __version__}
    return Sweep(run_sweep(cells, workers), config)
