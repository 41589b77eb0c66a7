"""`elastisched sim sweep`: the command line of `sweep.py` (kept apart so `cli.py` stays small)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(sim_app: typer.Typer) -> None:
    @sim_app.command("sweep")
    def sim_sweep(
        out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (cells.csv, summary.csv, "
                                          "summary.json, avg_jct.png, report.html).")],
        workload: Annotated[list[str], typer.Option(
            "--workload", "-w", help="A workload (repeat the option for several); NAME1..N expands a numbered "
            "range, e.g. pollux:workload-1..8.")],
        policies: Annotated[str, typer.Option("--policies", "-p", help="Comma-separated policy names.")]
        = "fifo,srtf,tiresias,optimus",
        seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 0,1,2 or 0..2.")] = "0,1,2",
        cluster: Annotated[list[str] | None, typer.Option(
            "--cluster", "-c", help="Cluster spec (repeat for several); default 16x4:t4.")] = None,
        workers: Annotated[int, typer.Option(help="Local worker processes (ignored with --ray-address).")] = 1,
        ray_address: Annotated[str | None, typer.Option(
            "--ray-address", help="Run cells as Ray tasks on this cluster (auto, or HOST:PORT).")] = None,
        profiles: Annotated[str | None, typer.Option(help="Directory of Sia per-GPU-type traces.")] = None,
    ) -> None:
        """Run policies × workloads × seeds (× clusters) in parallel; one aggregated summary and report.

        A cell that fails is listed with its error; the others still finish (exit code 1 only if every
        cell failed). Results equal serial runs: every cell is a deterministic simulation of its seed.
        """
        from elastisched import __version__
        from elastisched.cli import _errors, console
        from elastisched.report.sweep import write_sweep
        from elastisched.sweep import expand, make_cells, parse_seeds, run_sweep

        with _errors():
            wls = [x for w in workload for x in expand(w)]
            cls = [x for c in (cluster or ["16x4:t4"]) for x in expand(c)]
            names = [p.strip() for p in policies.split(",") if p.strip()]
            cells = make_cells(wls, names, parse_seeds(seeds), cls, profiles)
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
                          TimeElapsedColumn(), console=console) as prog:
                task = prog.add_task("sweep", total=len(cells))
                results = run_sweep(cells, workers, ray_address,
                                    progress=lambda done, _total: prog.update(task, completed=done))
            config = {"workloads": wls, "clusters": cls, "policies": names, "seeds": parse_seeds(seeds),
                      "workers": workers, "ray_address": ray_address, "profiles": profiles, "version": __version__}
            write_sweep(out, results, config)
        failed = sum(not r.ok for r in results)
        console.print(f"{len(results) - failed}/{len(results)} cells finished"
                      + (f", {failed} failed (see {out / 'cells.csv'})" if failed else "")
                      + f"; report: {out / 'report.html'}")
        if failed == len(results):
            raise typer.Exit(1)
