"""The `elastisched` command (Typer). `elastisched --help` lists the verbs; each has its own --help."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from elastisched import __version__
from elastisched.cli_tools import register as register_tools
from elastisched.core.errors import ElastischedError

app = typer.Typer(help="elastisched: elastic scheduling of deep-learning training on shared GPU clusters.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
sim_app = typer.Typer(help="Trace-driven simulation of scheduling policies.", no_args_is_help=True)
reproduce_app = typer.Typer(help="Reproduce published results (writes JSON, plots and report.html).",
                            no_args_is_help=True)
app.add_typer(sim_app, name="sim")
app.add_typer(reproduce_app, name="reproduce")
register_tools(sim_app, app)
console = Console(stderr=True)

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


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except ElastischedError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


@contextmanager
def progress_bars() -> Iterator[Callable[[str], Callable[[float, int, int], None]]]:
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} jobs"),
                  TextColumn("sim t={task.fields[t]}"), TimeElapsedColumn(), console=console,
                  transient=not sys.stderr.isatty()) as prog:
        def factory(name: str) -> Callable[[float, int, int], None]:
            task = prog.add_task(name, total=None, t="0h")

            def update(t: float, done: int, total: int) -> None:
                prog.update(task, completed=done, total=total, t=f"{t / 3600:.1f}h")
            return update
        yield factory


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


@app.command("policies")
def policies_cmd(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List the registered scheduling policies."""
    from elastisched.policies.base import registered

    pols = registered()
    if as_json:
        typer.echo(json.dumps([{"name": n, "description": c.description, "interval": c.interval,  # type: ignore[attr-defined]
                                "elastic": c.elastic} for n, c in pols.items()], indent=2))  # type: ignore[attr-defined]
        return
    t = Table("policy", "round", "elastic", "description")
    for n, c in pols.items():
        t.add_row(n, f"{c.interval:g} s" if c.interval else "on events", "yes" if c.elastic else "no",  # type: ignore[attr-defined]
                  c.description)  # type: ignore[attr-defined]
    Console().print(t)


@sim_app.command("run")
def sim_run(workload: WorkloadOpt, policy: Annotated[str, typer.Option("--policy", "-p", help="Policy name.")],
            out: OutOpt, cluster: ClusterOpt = "16x4:t4", seed: SeedOpt = 0, profiles: ProfilesOpt = None,
            restart_cost: Annotated[float | None, typer.Option(help="Seconds per restart (default: 30 per app).")]
            = None) -> None:
    """Simulate one policy on one workload; writes summary.json, jobs.csv and timeline.csv."""
    from elastisched.report.compare import write_run
    from elastisched.runner import run_policies, setup

    with _errors():
        s = setup(workload, cluster, profiles, restart_cost)
        with progress_bars() as bars:
            res = run_policies(s, [policy], seed, bars)[policy]
        write_run(out, res)
    sm = res.summary
    console.print(f"{policy}: {sm['n_finished']}/{sm['n_jobs']} jobs, avg JCT {sm['avg_jct']:.1f} s, "
                  f"avg queue {sm['avg_queue']:.1f} s, utilisation {sm['gpu_utilization']:.1%}, "
                  f"{sm['wall_seconds']:.2f} s wall → {out}")


@sim_app.command("compare")
def sim_compare(workload: WorkloadOpt, out: OutOpt,
                policies: Annotated[str, typer.Option("--policies", help="Comma-separated policy names.")]
                = "fifo,srtf,tiresias,optimus",
                cluster: ClusterOpt = "16x4:t4", seed: SeedOpt = 0, profiles: ProfilesOpt = None) -> None:
    """Simulate several policies on the same workload; writes summary.csv, plots and report.html."""
    from elastisched.report.compare import compare_report, write_files, write_run
    from elastisched.runner import run_policies, setup

    names = [p.strip() for p in policies.split(",") if p.strip()]
    with _errors():
        if not names:
            raise ElastischedError("--policies is empty")
        s = setup(workload, cluster, profiles)
        with progress_bars() as bars:
            results = run_policies(s, names, seed, bars)
        config = {"workload": workload, "digest": s.workload.digest, "cluster": cluster, "seed": seed,
                  "policies": names, "version": __version__}
        files = compare_report(results, f"Policy comparison on {s.workload.name}", config)
        write_files(out, files)
        for name, r in results.items():
            write_run(out / name, r)
    t = Table("policy", "avg JCT (s)", "p95 JCT (s)", "avg queue (s)", "util", "restarts", "wall (s)")
    for name, r in results.items():
        m = r.summary
        t.add_row(name, f"{m['avg_jct']:.1f}", f"{m['p95_jct']:.1f}", f"{m['avg_queue']:.1f}",
                  f"{m['gpu_utilization']:.1%}", str(m["restarts"]), f"{m['wall_seconds']:.2f}")
    Console().print(t)
    console.print(f"report: {out / 'report.html'}")


@reproduce_app.command("pollux")
def reproduce_pollux(out: OutOpt, policies: Annotated[str, typer.Option(help="Policies with reference results.")]
                     = "tiresias,optimus") -> None:
    """Fidelity check: the 8 Pollux workloads on 16x4 T4 against the Pollux artifact's own avg JCTs."""
    from elastisched.report.fidelity import run_fidelity

    with _errors(), progress_bars() as bars:
        result = run_fidelity(out, [p.strip() for p in policies.split(",")], bars)
    for pol, r in result["policies"].items():
        console.print(f"{pol}: mean avg JCT {r['mean_avg_jct']:.1f} s vs artifact {r['reference_mean']:.1f} s "
                      f"({r['mean_error']:+.2%}); worst workload {r['worst_error']:+.2%}")
    console.print(f"report: {out / 'report.html'}")


def _optional_plugins() -> None:
    """Commands contributed by optional parts (training library, Lyra, ONES, JABAS, service)."""
    import importlib

    for module, target in (("elastisched.train.commands", app), ("elastisched.loaning.reproduce", reproduce_app),
                           ("elastisched.report.ones_reproduce", reproduce_app),
                           ("elastisched.service.commands", app)):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:  # the part is absent, or its optional extra is not installed
            if e.name in (module, "torch", "fastapi", "uvicorn", "sqlalchemy", "ray", "httpx"):
                continue
            raise
        register = getattr(mod, "register", None)
        if register is None:
            continue
        if module == "elastisched.loaning.reproduce":
            from elastisched.runner import lyra_runner

            register(target, lyra_runner)
        else:
            register(target)


_optional_plugins()


if __name__ == "__main__":
    app()
