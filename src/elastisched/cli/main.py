"""The `elastisched` command (Typer). `elastisched --help` lists the verbs; each has its own --help."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from elastisched import __version__
from elastisched.cli.common import progress_bars, stage
from elastisched.cli.policies import register as register_policies
from elastisched.cli.reproduce import LazyExperimentGroup
from elastisched.cli.tools import register as register_tools
from elastisched.core.errors import ConfigError

app = typer.Typer(help="elastisched: elastic scheduling of deep-learning training on shared GPU clusters.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
sim_app = typer.Typer(help="Trace-driven simulation of scheduling policies.", no_args_is_help=True)
reproduce_app = typer.Typer(help="Reproduce published results (writes JSON, plots and report.html).",
                            no_args_is_help=True, cls=LazyExperimentGroup)
app.add_typer(sim_app, name="sim")
app.add_typer(reproduce_app, name="reproduce")
register_tools(sim_app, app)
register_policies(app)

WorkloadOpt = Annotated[str, typer.Option(
    "--workload", "-w", help="pollux:workload-N (bundled), philly[:sample=N,seed=S,days=D], "
    "synthetic:num_jobs=N,rate=R,seed=S, or a path (.csv Pollux/Sia/DeepBoot or raw trace, .trace Gavel).")]
ClusterOpt = Annotated[str | None, typer.Option(
    "--cluster", "-c", show_default=False, help="NODESxGPUS[:TYPE] parts, comma-separated (e.g. 6x4:t4,2x8:a100), "
    "or a YAML/JSON file [default: 16x4:t4; with --setup sia, Sia's cluster].")]
PolicyOpt = Annotated[str, typer.Option(
    "--policy", "-p", metavar="SPEC", help="A policy: a name from `elastisched policies`, path/file.py:Class or "
    "package.module:Class, optionally with options NAME:key=value,... (`elastisched policies NAME` lists them), "
    "e.g. gavel:objective=max_sum_throughput,interval=360.")]
PolicyOptionsOpt = Annotated[str | None, typer.Option(
    "--policy-options", metavar="FILE.yaml", help="Policy options from a YAML file mapping each policy name to its "
    "options ({gavel: {interval: 360}}); options in the spec override it.")]
SetupOpt = Annotated[str | None, typer.Option(
    "--setup", metavar="STUDY", help="A reproduced study's set-up: `sia` = Sia's cluster, its per-type profiles "
    "alone (--profiles: the traces folder, default ../shared/peer-data/sia/traces), its restart costs and "
    "calibration on a Saturn CSV, batch changes in place; `sim run` then matches `reproduce sia`.")]
ProfilesOpt = Annotated[str | None, typer.Option(
    "--profiles", help="Directory of Sia per-GPU-type traces (e.g. ../shared/peer-data/sia/traces) "
    "adding V100/A100/RTX profiles to the bundled Pollux T4 ones.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (runs are deterministic per seed).")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output directory (created; nothing written on failure).")]
# `sim` options arrive as text and are parsed strictly by `options` (Click's INT/FLOAT take nan, inf, 1_000, +5)
SimSeedOpt = Annotated[str, typer.Option("--seed", metavar="INT", help="Random seed in [0, 2^32-1] (runs are "
                                         "deterministic per seed).")]
SimOutOpt = Annotated[str, typer.Option("--out", "-o", metavar="DIR", help="Output directory (created; nothing "
                                        "written on failure; an existing directory is written into).")]
LengthEstimateOpt = Annotated[str, typer.Option(
    "--length-estimate", metavar="KIND", help="What each job declares about its length, as the policies see it: "
    "exact (default), lognormal:SIGMA (the truth × a seeded log-normal factor, median 1) or none. The truth always "
    "ends the job; `elastisched policies` says which policies read the declared length.")]
RestartCostOpt = Annotated[str | None, typer.Option("--restart-cost", metavar="SECONDS",
                                                    help="Seconds per restart, in [0, 86400] (default: 30 per app).")]


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


@sim_app.command("run")
def sim_run(workload: WorkloadOpt, policy: PolicyOpt, out: SimOutOpt = "results/run", cluster: ClusterOpt = None,
            seed: SimSeedOpt = "0", profiles: ProfilesOpt = None, restart_cost: RestartCostOpt = None,
            length_estimate: LengthEstimateOpt = "exact", policy_options: PolicyOptionsOpt = None,
            setup: SetupOpt = None) -> None:
    """Simulate one policy on one workload; writes summary.json, jobs.csv and timeline.csv."""
    from elastisched.cli import options
    from elastisched.report.compare import write_run
    from elastisched.sim.length_estimate import LengthEstimate
    from elastisched.sim.runner import run_policies

    with options.cli_errors():
        built = options.policy_specs(policy, policy_options, "--policy")
        if len(built) != 1:
            raise ConfigError("--policy", policy[:80], "names several policies; `sim compare` runs several")
        seed_n, cost, out_path = options.seed(seed), options.restart_cost(restart_cost), options.out_dir(out)
        estimate = LengthEstimate.parse(length_estimate)
        with stage(f"loading {workload[:60]} and the performance models"):
            s = options.run_setup(workload, cluster, profiles, cost, setup)
        with progress_bars() as bars:
            res = next(iter(run_policies(s, built, seed_n, bars, length_estimate=estimate).values()))
        write_run(out_path, res)
    sm = res.summary
    from elastisched.cli.common import console

    console.print(f"{built[0].label}: {sm['n_finished']}/{sm['n_jobs']} jobs, avg JCT {sm['avg_jct']:.1f} s, "
                  f"avg queue {sm['avg_queue']:.1f} s, utilisation {sm['gpu_utilization']:.1%}, "
                  f"{sm['wall_seconds']:.2f} s wall → {out}", markup=False, highlight=False)


@sim_app.command("compare")
def sim_compare(workload: WorkloadOpt, out: SimOutOpt = "results/compare",
                policies: Annotated[str, typer.Option("--policies", "-p", metavar="SPEC,...", help="Comma-separated "
                                                      "policy specs (see `sim run --help`), e.g. "
                                                      "tiresias,gavel:interval=360,~/p/ljf.py:LJF.")]
                = "fifo,srtf,tiresias,optimus",
                cluster: ClusterOpt = None, seed: SimSeedOpt = "0", profiles: ProfilesOpt = None,
                length_estimate: LengthEstimateOpt = "exact", policy_options: PolicyOptionsOpt = None,
                setup: SetupOpt = None) -> None:
    """Simulate several policies on the same workload; writes summary.csv, plots and report.html."""
    from elastisched.cli import options
    from elastisched.report.compare import compare_report, write_files, write_run
    from elastisched.sim.length_estimate import LengthEstimate
    from elastisched.sim.runner import run_policies

    with options.cli_errors():
        built, seed_n = options.policy_specs(policies, policy_options), options.seed(seed)
        out_path, estimate = options.out_dir(out), LengthEstimate.parse(length_estimate)
        with stage(f"loading {workload[:60]} and the performance models"):
            s = options.run_setup(workload, cluster, profiles, None, setup)
        with progress_bars() as bars:
            results = run_policies(s, built, seed_n, bars, length_estimate=estimate)
        config = {"workload": workload, "digest": s.workload.digest, "cluster": s.cluster_spec, "seed": seed_n,
                  "policies": [b.label for b in built], "policy_options": {b.label: b.options for b in built},
                  "setup": setup, "length_estimate": str(estimate), "version": __version__}
        with stage(f"writing the report ({len(results)} policies: plots, tables, jobs.csv)"):
            files = compare_report(results, f"Policy comparison on {s.workload.name}", config)
            write_files(out_path, files)
            for name, r in results.items():
                write_run(out_path / name, r)
    from rich.console import Console
    from rich.table import Table

    t = Table("policy", "avg JCT (s)", "p95 JCT (s)", "avg queue (s)", "util", "restarts", "wall (s)")
    for name, r in results.items():
        m = r.summary
        t.add_row(name, f"{m['avg_jct']:.1f}", f"{m['p95_jct']:.1f}", f"{m['avg_queue']:.1f}",
                  f"{m['gpu_utilization']:.1%}", str(m["restarts"]), f"{m['wall_seconds']:.2f}")
    Console().print(t)
    from elastisched.cli.common import console

    console.print(f"report: {out_path / 'report.html'}", markup=False, highlight=False)


def _optional_plugins() -> None:
    """Commands contributed by optional parts (training library, service). The `reproduce NAME` commands (one
    per registered experiment) are generated on first use by `cli.reproduce.LazyExperimentGroup`."""
    import importlib

    for module in ("elastisched.train.commands", "elastisched.cli.service"):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # the part is absent, or its optional extra is not installed
            if e.name in (module, "torch", "fastapi", "uvicorn", "sqlalchemy", "ray", "httpx"):
                continue
            raise
        register = getattr(mod, "register", None)
        if register is not None:
            register(app)


_optional_plugins()


if __name__ == "__main__":
    app()
