"""Commands for researchers and operators: `sim sweep`, `plan`, `trace describe` (apart from `cli.py` so that
it stays small; every heavy import happens inside the command)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def register(sim_app: typer.Typer, app: typer.Typer) -> None:
    _register_sweep(sim_app)
    _register_plan(app)
    trace_app = typer.Typer(help="Look inside a workload trace before simulating it.", no_args_is_help=True)
    app.add_typer(trace_app, name="trace")
    _register_describe(trace_app)


def _register_sweep(sim_app: typer.Typer) -> None:
    @sim_app.command("sweep")
    def sim_sweep(
        workload: Annotated[list[str], typer.Option(
            "--workload", "-w", help="A workload (repeat the option for several); NAME1..N expands a numbered "
            "range, e.g. pollux:workload-1..8.")],
        out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (cells.csv, summary.csv, "
                                          "summary.json, avg_jct.png, report.html).")] = Path("results/sweep"),
        policies: Annotated[str, typer.Option("--policies", "-p", help="Comma-separated policy names.")]
        = "fifo,srtf,tiresias,optimus",
        seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 0,1,2 or 0..2.")] = "0,1,2",
        cluster: Annotated[list[str] | None, typer.Option(
            "--cluster", "-c", help="Cluster spec (repeat for several); default 16x4:t4.")] = None,
        workers: Annotated[int, typer.Option(help="Local worker processes (ignored with --ray-address).")] = 1,
        ray_address: Annotated[str | None, typer.Option(
            "--ray-address", help="Run cells as Ray tasks on this cluster (auto, or HOST:PORT).")] = None,
        profiles: Annotated[str | None, typer.Option(help="Directory of Sia per-GPU-type traces.")] = None,
        length_estimate: Annotated[str, typer.Option(
            "--length-estimate", metavar="KIND", help="exact (default), lognormal:SIGMA or none: what each job "
            "declares about its length, as the policies see it (see `sim run --help`).")] = "exact",
    ) -> None:
        """Run policies × workloads × seeds (× clusters) in parallel; one aggregated summary and report.

        A cell that fails is listed with its error; the others still finish (exit code 1 only if every
        cell failed). Results equal serial runs: every cell is a deterministic simulation of its seed.
        """
        from elastisched import __version__
        from elastisched.cli.common import console
        from elastisched.cli.common import errors as _errors
        from elastisched.report.sweep import write_sweep
        from elastisched.sim.sweep import expand, make_cells, parse_seeds, run_sweep

        with _errors():
            wls = [x for w in workload for x in expand(w)]
            cls = [x for c in (cluster or ["16x4:t4"]) for x in expand(c)]
            names = [p.strip() for p in policies.split(",") if p.strip()]
            cells = make_cells(wls, names, parse_seeds(seeds), cls, profiles, length_estimate=length_estimate)
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
                          TimeElapsedColumn(), console=console) as prog:
                task = prog.add_task("sweep", total=len(cells))
                results = run_sweep(cells, workers, ray_address,
                                    progress=lambda done, _total: prog.update(task, completed=done))
            config = {"workloads": wls, "clusters": cls, "policies": names, "seeds": parse_seeds(seeds),
                      "workers": workers, "ray_address": ray_address, "profiles": profiles,
                      "length_estimate": length_estimate, "version": __version__}
            write_sweep(out, results, config)
        failed = sum(not r.ok for r in results)
        console.print(f"{len(results) - failed}/{len(results)} cells finished"
                      + (f", {failed} failed (see {out / 'cells.csv'})" if failed else "")
                      + f"; report: {out / 'report.html'}")
        if failed == len(results):
            raise typer.Exit(1)


def _register_plan(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)


def plan_cmd(
    workload: Annotated[str, typer.Option("--workload", "-w",
                                          help="The workload to plan for (any -w of sim run).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (plan.csv, plan.json, plan.png, "
                                      "report.html).")] = Path("results/plan"),
    cluster_sizes: Annotated[str, typer.Option(help="Cluster sizes in GPUs, comma-separated.")]
    = "32,48,64,96",
    policies: Annotated[str, typer.Option("--policies", "-p", help="Comma-separated policy names.")]
    = "fifo,tiresias",
    gpu_type: Annotated[str, typer.Option(help="GPU type of every node.")] = "t4",
    gpus_per_node: Annotated[int, typer.Option(min=1, max=64, help="GPUs per node.")] = 4,
    target_p95_queue: Annotated[float, typer.Option(min=0.0, help="p95 queueing delay to meet (s).")] = 3600.0,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds: 0,1,2 or 0..2.")] = "0",
    workers: Annotated[int, typer.Option(min=1, help="Local worker processes.")] = 1,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Run on a Ray cluster.")] = None,
    profiles: Annotated[str | None, typer.Option(help="Directory of Sia per-GPU-type traces.")] = None,
) -> None:
    """How many GPUs does WORKLOAD need? Queueing, JCT and GPU-hours against cluster size, per policy.

    Marks the smallest size whose p95 queueing delay meets --target-p95-queue and the knee of the JCT
    curve (the point of diminishing returns).
    """
    from elastisched import __version__
    from elastisched.cli.common import console
    from elastisched.cli.common import errors as _errors
    from elastisched.core.errors import ConfigError
    from elastisched.sim.plan import analyse, cluster_specs
    from elastisched.sim.sweep import make_cells, parse_seeds

    with _errors():
        try:
            sizes_list = [int(x) for x in cluster_sizes.split(",") if x.strip()]
        except ValueError:
            raise ConfigError("--cluster-sizes", cluster_sizes, "must be integers, e.g. 32,48,64") from None
        sizes = cluster_specs(sorted(set(sizes_list)), gpus_per_node, gpu_type)
        names = [p.strip() for p in policies.split(",") if p.strip()]
        cells = make_cells([workload], names, parse_seeds(seeds), list(sizes), profiles)
        plan = analyse(_run_cells(cells, workers, ray_address), sizes, target_p95_queue)
        config = {"workload": workload, "cluster_sizes": list(sizes.values()), "gpu_type": gpu_type,
                  "gpus_per_node": gpus_per_node, "policies": names, "seeds": parse_seeds(seeds),
                  "target_p95_queue_s": target_p95_queue, "version": __version__}
        _write_plan(out, plan, config, workload, target_p95_queue)
    for pol, p in plan.items():
        need = (f"{p['needed_gpus']} GPUs meet" if p["needed_gpus"] else "none of the sizes tried meets")
        console.print(f"{pol}: {need} p95 queue ≤ {target_p95_queue:g} s; knee of the JCT curve at "
                      f"{p['knee_gpus'] or '–'} GPUs")
    console.print(f"report: {out / 'report.html'}")


def _run_cells(cells: list[Any], workers: int, ray_address: str | None) -> list[Any]:
    """The plan's simulations, with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from elastisched.cli.common import console
    from elastisched.sim.sweep import run_sweep

    with Progress(TextColumn("plan"), BarColumn(), MofNCompleteColumn(), TextColumn("simulations"),
                  TimeElapsedColumn(), console=console) as prog:
        task = prog.add_task("plan", total=len(cells))
        return run_sweep(cells, workers, ray_address, progress=lambda done, _t: prog.update(task, completed=done))


def _write_plan(out: Path, plan: dict[str, Any], config: dict[str, Any], workload: str,
                target_p95_queue: float) -> None:
    """plan.csv, plan.png, plan.json and report.html (the verdict, the curves, one row per size)."""
    import json

    from elastisched.report import html
    from elastisched.report.compare import write_files
    from elastisched.report.sweep import _csv
    from elastisched.sim.plan import plan_plot

    title = f"Capacity plan for {workload}"
    png = plan_plot(plan, target_p95_queue, title)
    rows = [{"policy": pol, "gpus": g, "p95_queue_h": q / 3600, "avg_jct_h": j / 3600, "gpu_hours": h,
             "jobs_finished": f}
            for pol, p in plan.items()
            for g, q, j, h, f in zip(p["gpus"], p["p95_queue"], p["avg_jct"], p["gpu_hours"], p["finished"],
                                     strict=True)]
    answers = [{"policy": pol, "GPUs needed for the target": p["needed_gpus"] or "none of the sizes",
                "knee of the JCT curve (GPUs)": p["knee_gpus"] or "–", "failed simulations": p["failed"]}
               for pol, p in plan.items()]
    verdict = "; ".join(f"{a['policy']}: {a['GPUs needed for the target']}" for a in answers)
    sections = [("Verdict", f"<p>GPUs needed for a p95 queueing delay ≤ {target_p95_queue / 3600:g} h — "
                            f"{verdict}.</p>" + html.table(answers, list(answers[0]))),
                ("Curves", html.img(png, title)),
                ("Per size", html.table([{"policy": r["policy"], "GPUs": r["gpus"],
                                          "p95 queue (h)": round(r["p95_queue_h"], 2),
                                          "avg JCT (h)": round(r["avg_jct_h"], 2),
                                          "GPU-hours": round(r["gpu_hours"], 1),
                                          "jobs finished": r["jobs_finished"]} for r in rows],
                                        ["policy", "GPUs", "p95 queue (h)", "avg JCT (h)", "GPU-hours",
                                         "jobs finished"]))]
    write_files(out, {"plan.csv": _csv(rows), "plan.png": png, "report.html": html.page(title, sections, config),
                      "plan.json": json.dumps({"config": config, "plan": plan}, indent=2, default=str)})


def _register_describe(trace_app: typer.Typer) -> None:
    @trace_app.command("describe")
    def describe_cmd(
        workload: Annotated[str, typer.Argument(help="Any workload -w of sim run accepts (pollux:workload-N, "
                                                "philly[:...], a Pollux/Sia/DeepBoot CSV, a raw trace, ...).")],
        out: Annotated[Path, typer.Option("--out", "-o", help="Output directory (describe.json, describe.png, "
                                          "report.html).")] = Path("results/describe"),
        cluster: Annotated[str, typer.Option("--cluster", "-c", help="Cluster the offered load is computed "
                                             "against (NODESxGPUS:TYPE parts or a YAML/JSON file).")] = "16x4:t4",
        profiles: Annotated[str | None, typer.Option(help="Directory of Sia per-GPU-type traces.")] = None,
    ) -> None:
        """Job count, arrival rate over the day and week, GPU demand, duration and GPU-time CDFs, application
        mix and offered load against --cluster: one HTML page with the plots and a JSON summary."""
        import json

        from elastisched.cli.common import console
        from elastisched.cli.common import errors as _errors
        from elastisched.models.registry import PerfModels
        from elastisched.report import html
        from elastisched.report.compare import write_files
        from elastisched.sim.runner import load_cluster
        from elastisched.workloads import load_workload
        from elastisched.workloads.describe import describe, figure, public, summary_rows

        with _errors():
            models = PerfModels.load(profiles)
            nodes = load_cluster(cluster)
            wl = load_workload(workload, models)
            d = describe(wl, models, nodes)
            png = figure(d)
            title = f"Workload {wl.name}"
            rows = summary_rows(d)
            apps = [{"application": k, "jobs": v, "share (%)": f"{100 * v / max(d['jobs'], 1):.1f}"}
                    for k, v in d["applications"].items()]
            sections = [("Summary", html.table(rows, ["quantity", "value"])), ("Plots", html.img(png, title)),
                        ("Applications", html.table(apps, ["application", "jobs", "share (%)"]))]
            config = {"workload": workload, "cluster": cluster, "profiles": profiles, "digest": wl.digest}
            write_files(out, {"describe.json": json.dumps(public(d), indent=2, default=str), "describe.png": png,
                              "report.html": html.page(title, sections, config)})
        for r in rows:
            console.print(f"{r['quantity']:>30}: {r['value']}")
        console.print(f"report: {out / 'report.html'}")
