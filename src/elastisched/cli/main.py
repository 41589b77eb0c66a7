"""The `elastisched` command (Typer). `elastisched --help` lists the verbs; each has its own --help."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from elastisched import __version__
from elastisched.cli.common import progress_bars
from elastisched.cli.reproduce import LazyExperimentGroup
from elastisched.cli.tools import register as register_tools

app = typer.Typer(help="elastisched: elastic scheduling of deep-learning training on shared GPU clusters.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
sim_app = typer.Typer(help="Trace-driven simulation of scheduling policies.", no_args_is_help=True)
reproduce_app = typer.Typer(help="Reproduce published results (writes JSON, plots and report.html).",
                            no_args_is_help=True, cls=LazyExperimentGroup)
app.add_typer(sim_app, name="sim")
app.add_typer(reproduce_app, name="reproduce")
register_tools(sim_app, app)

WorkloadOpt = Annotated[str, typer.Option(
    "--workload", "-w", help="pollux:workload-N (bundled), philly[:sample=N,seed=S,days=D], "
    "synthetic:num_jobs=N,rate=R,seed=S, or a path (.csv Pollux/Sia/DeepBoot or raw trace, .trace Gavel).")]
ClusterOpt = Annotated[str, typer.Option(
    "--cluster", "-c", help="NODESxGPUS[:TYPE] parts, comma-separated (e.g. 6x4:t4,2x8:a100), or a YAML/JSON file.")]
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


@app.command("policies")
def policies_cmd(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List the registered scheduling policies."""
    from rich.console import Console
    from rich.table import Table

    from elastisched.policies.base import registered

    pols = registered()
    if as_json:
        typer.echo(json.dumps([{"name": n, "description": c.description, "interval": c.interval,  # type: ignore[attr-defined]
                                "elastic": c.elastic, "knows_length": str(c.knows_length)}  # type: ignore[attr-defined]
                               for n, c in pols.items()], indent=2))
        return
    t = Table("policy", "round", "elastic", "knows of a job's length", "description")
    for n, c in pols.items():
        t.add_row(n, f"{c.interval:g} s" if c.interval else "on events", "yes" if c.elastic else "no",  # type: ignore[attr-defined]
                  str(c.knows_length), c.description)  # type: ignore[attr-defined]
    Console().print(t)


@sim_app.command("run")
def sim_run(workload: WorkloadOpt, policy: Annotated[str, typer.Option("--policy", "-p", help="Policy name.")],
            out: SimOutOpt = "results/run", cluster: ClusterOpt = "16x4:t4", seed: SimSeedOpt = "0",
            profiles: ProfilesOpt = None, restart_cost: RestartCostOpt = None,
            length_estimate: LengthEstimateOpt = "exact") -> None:
    """Simulate one policy on one workload; writes summary.json, jobs.csv and timeline.csv."""
    from elastisched.cli import options
    from elastisched.report.compare import write_run
    from elastisched.sim.length_estimate import LengthEstimate
    from elastisched.sim.runner import run_policies, setup

    with options.cli_errors():
        policy, seed_n = options.policy(policy), options.seed(seed)
        cost, out_path = options.restart_cost(restart_cost), options.out_dir(out)
        estimate = LengthEstimate.parse(length_estimate)
        s = setup(workload, cluster, profiles, cost)
        with progress_bars() as bars:
            res = run_policies(s, [policy], seed_n, bars, length_estimate=estimate)[policy]
        write_run(out_path, res)
    sm = res.summary
    from elastisched.cli.common import console

    console.print(f"{policy}: {sm['n_finished']}/{sm['n_jobs']} jobs, avg JCT {sm['avg_jct']:.1f} s, "
                  f"avg queue {sm['avg_queue']:.1f} s, utilisation {sm['gpu_utilization']:.1%}, "
                  f"{sm['wall_seconds']:.2f} s wall → {out}", markup=False, highlight=False)


@sim_app.command("compare")
def sim_compare(workload: WorkloadOpt, out: SimOutOpt = "results/compare",
                policies: Annotated[str, typer.Option("--policies", "-p", help="Comma-separated policy names.")]
                = "fifo,srtf,tiresias,optimus",
                cluster: ClusterOpt = "16x4:t4", seed: SimSeedOpt = "0", profiles: ProfilesOpt = None,
                length_estimate: LengthEstimateOpt = "exact") -> None:
    """Simulate several policies on the same workload; writes summary.csv, plots and report.html."""
    from elastisched.cli import options
    from elastisched.report.compare import compare_report, write_files, write_run
    from elastisched.sim.length_estimate import LengthEstimate
    from elastisched.sim.runner import run_policies, setup

    with options.cli_errors():
        names, seed_n, out_path = options.policies(policies), options.seed(seed), options.out_dir(out)
        estimate = LengthEstimate.parse(length_estimate)
        s = setup(workload, cluster, profiles)
        with progress_bars() as bars:
            results = run_policies(s, names, seed_n, bars, length_estimate=estimate)
        config = {"workload": workload, "digest": s.workload.digest, "cluster": cluster, "seed": seed_n,
                  "policies": names, "length_estimate": str(estimate), "version": __version__}
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
