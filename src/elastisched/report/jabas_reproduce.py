"""`elastisched reproduce jabas`: JABAS vs adaptive-batching baselines on heterogeneous GPUs (docs/jabas.md
"Reproduction").

Models: ResNet-50/ImageNet on the JABAS profiles (V100/P100 measured, the other types of the 9-node 8-type
example cluster derived by TFLOPS) and the Pollux/Sia applications (per-GPU-type throughput from
``PerfModels.load(profiles)``) on a half-size Sia mix (3×4 T4, 2×4 A100, 3×4 RTX 2080Ti).  Gradient
statistics come from the Pollux ``validation-*.csv`` files (ResNet-50 uses the imagenet ones).  Each model is
trained for its full epochs (``report/jabas_sim.py``) under JABAS (time objective, the release; cost
objective, ours), (a) static batch on the initial allocation, (b) adaptive batching with one worker per GPU
on every server, (c) adaptive batching on the fastest homogeneous subset.  Writes ``jabas.json`` (per-model
time and cost, mean ``time_reduction`` / ``cost_reduction`` vs (b)), ``gbs.png``, ``allocation.png`` and
``report.html``.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from elastisched import __version__
from elastisched.models.iidp import IIDPModel
from elastisched.models.iidp_profiles import ServerSpec, derive_cluster_types, load_cluster_info, load_jabas_resnet50
from elastisched.models.registry import PerfModels
from elastisched.models.similarity import AdaptiveBatchingConfig, bundled_pollux_grad_trace
from elastisched.policies.jabas import GPU_TFLOPS, PolluxIIDP, dataset_size, grad_trace
from elastisched.report import html
from elastisched.report.jabas_sim import Backend, IIDPBackend, PolluxBackend, RunResult, simulate

#: Half of Sia's 24 T4 + 16 A100 + 24 RTX 2080Ti, in 4-GPU servers (Sia cluster; issue 5).
SIA_MIX: tuple[tuple[str, int], ...] = (("t4", 3), ("a100", 2), ("rtx", 3))
SIA_APPS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
IMAGENET_SIZE = 1_281_167  # ImageNet-1k training set (digest §7)
V100 = "Tesla V100-PCIE-16GB"
STRATEGIES = ("jabas-time", "jabas-cost", "static", "uniform", "homogeneous")


def default_profiles_dir() -> Path | None:
    """``<repo>/../shared/peer-data/sia/traces`` when it exists."""
    p = Path(__file__).resolve().parents[3] / ".." / "shared" / "peer-data" / "sia" / "traces"
    return p if p.is_dir() else None


def resnet50_backend(gamma: float = 0.1, cost_slack: float | None = None) -> IIDPBackend:
    """ResNet-50 on the 9-node cluster; GBS bounds 256..32768, γ 0.1, 90 epochs (release example)."""
    servers = load_cluster_info()
    prof = derive_cluster_types(load_jabas_resnet50(), servers, V100, 14.13)
    ab = AdaptiveBatchingConfig(gamma, 256, 32768)
    return IIDPBackend("resnet50-jabas", IIDPModel.from_profile(prof), servers, IMAGENET_SIZE, 90, 30.0,
                       bundled_pollux_grad_trace("imagenet"), ab, cost_slack=cost_slack)


def sia_servers(types: Sequence[str], mix: Sequence[tuple[str, int]] = SIA_MIX) -> tuple[ServerSpec, ...]:
    """4-GPU servers of the mix restricted to ``types``; bandwidths are unused by the Pollux model."""
    return tuple(ServerSpec(f"{t}{i}", t, GPU_TFLOPS[t], 4, 15.75e9, 12.5e9)
                 for t, k in mix if t in types for i in range(k))


def pollux_backend(perf: PerfModels, app_name: str, gamma: float = 0.1,
                   cost_slack: float | None = None) -> PolluxBackend:
    """A Pollux/Sia application on the Sia mix; GBS bounds = its validated batch range."""
    app = perf.app(app_name)
    ab = AdaptiveBatchingConfig(gamma, app.init_batch_size, app.max_batch_size)
    return PolluxBackend(app_name, PolluxIIDP(app), sia_servers(app.gpu_types), dataset_size(app),
                         app.max_epochs, app.restart_cost, grad_trace(app), ab, cost_slack=cost_slack)


def run_model(be: Backend, *, gp_restarts: int = 0, max_epochs: int | None = None) -> dict[str, RunResult]:
    """Every strategy on one model."""
    out: dict[str, RunResult] = {}
    for name in STRATEGIES:
        strat, _, obj = name.partition("-")
        out[name] = simulate(be, strat, objective=obj or "time", gp_restarts=gp_restarts,  # type: ignore[arg-type]
                             max_epochs=max_epochs)
    return out


def summarize(results: dict[str, dict[str, RunResult]]) -> dict[str, Any]:
    """Per-model rows and mean reductions of both JABAS variants vs (b) ``uniform``."""
    if not results:
        raise ValueError("no model was run")
    models: dict[str, Any] = {}
    red: dict[str, dict[str, list[float]]] = {v: {"time": [], "cost": []} for v in ("jabas-time", "jabas-cost")}
    for m, runs in results.items():
        base = runs["uniform"]
        row: dict[str, Any] = {s: r.summary() for s, r in runs.items()}
        for v in red:
            tr, cr = 1.0 - runs[v].time_s / base.time_s, 1.0 - runs[v].cost_usd / base.cost_usd
            row[v].update(time_reduction=tr, cost_reduction=cr)
            red[v]["time"].append(tr)
            red[v]["cost"].append(cr)
        models[m] = row
    mean = {v: {"time_reduction": sum(d["time"]) / len(d["time"]), "cost_reduction": sum(d["cost"]) / len(d["cost"])}
            for v, d in red.items()}
    t, c = mean["jabas-time"]["time_reduction"], mean["jabas-time"]["cost_reduction"]
    ct, cc = mean["jabas-cost"]["time_reduction"], mean["jabas-cost"]["cost_reduction"]
    return {
        "models": models,
        "time_reduction": t,
        "cost_reduction": c,
        "cost_aware": mean["jabas-cost"],
        "acceptance": {"time_objective_time_ge_0.30": t >= 0.30, "time_objective_cost_ge_0.50": c >= 0.50,
                       "cost_objective_cost_ge_0.50": cc >= 0.50, "cost_objective_time_reduction": ct},
        "paper": {"time_reduction": 0.333, "cost_reduction": 0.542},
    }


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def plots(results: dict[str, dict[str, RunResult]]) -> dict[str, bytes]:
    """GBS trajectories and allocation timelines (GPUs held), one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}
    for key, title in (("gbs", "global batch size"), ("allocation", "GPUs allocated")):
        fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.4 * len(results)), squeeze=False)
        for ax, (m, runs) in zip(axes[:, 0], results.items(), strict=True):
            for s in ("jabas-time", "jabas-cost", "uniform", "homogeneous"):
                r = runs[s]
                alloc = [(t, g) for t, g, _ in r.allocation]
                pts = r.gbs if key == "gbs" else [*alloc, (r.time_s, r.allocation[-1][1])]
                ax.step([p[0] / 3600.0 for p in pts], [p[1] for p in pts], where="post", label=s)
            ax.set_title(f"{m}: {title}")
            ax.set_xlabel("hours")
            if key == "gbs":
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
        axes[0, 0].legend(fontsize=8)
        out[key] = _png(fig)
    return out


def reproduce(out: Path, profiles: Path | None, apps: Sequence[str], *, gamma: float = 0.1,
              gp_restarts: int = 0, max_epochs: int | None = None, cost_slack: float | None = 0.5,
              resnet: bool = True) -> dict[str, Any]:
    """Run everything, write ``jabas.json``, the plots and ``report.html``; return the JSON document."""
    t0 = time.perf_counter()
    backends: list[Backend] = [resnet50_backend(gamma, cost_slack)] if resnet else []
    if apps:
        perf = PerfModels.load(profiles)
        backends += [pollux_backend(perf, a, gamma, cost_slack) for a in apps]
    results = {be.name: run_model(be, gp_restarts=gp_restarts, max_epochs=max_epochs) for be in backends}
    doc = summarize(results)
    doc["config"] = {"gamma": gamma, "gp_restarts": gp_restarts, "max_epochs": max_epochs, "cost_slack": cost_slack,
                     "profiles": str(profiles) if profiles else None, "apps": list(apps), "sia_mix": SIA_MIX,
                     "version": __version__, "wall_s": time.perf_counter() - t0}
    doc["trajectories"] = {m: {s: {"gbs": r.gbs, "allocation": r.allocation} for s, r in runs.items()}
                           for m, runs in results.items()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "jabas.json").write_text(json.dumps(doc, indent=2, default=str))
    figs = plots(results)
    for k, png in figs.items():
        (out / f"{k}.png").write_bytes(png)
    rows = [{"model": m, "strategy": s, **{k: v for k, v in r.items() if k != "strategy"}}
            for m, row in doc["models"].items() for s, r in row.items()]
    cols = ["model", "strategy", "time_h", "cost_usd", "restarts", "mean_gpus", "time_reduction", "cost_reduction"]
    mean_rows = [{"objective": "time (release)", "time_reduction": doc["time_reduction"],
                  "cost_reduction": doc["cost_reduction"]},
                 {"objective": f"cost (ours, slack {cost_slack})", **doc["cost_aware"]}]
    sections = [("Mean reduction vs (b) adaptive batching, one worker per GPU",
                 html.table(mean_rows, ["objective", "time_reduction", "cost_reduction"])
                 + "<p>Paper (abstract): 33.3 % time, 54.2 % cost vs adaptive training baselines.</p>"),
                ("Per model", html.table(rows, cols)),
                ("Global batch size", html.img(figs["gbs"], "GBS trajectories")),
                ("Allocation timeline", html.img(figs["allocation"], "GPUs over time"))]
    (out / "report.html").write_text(html.page("JABAS reproduction", sections, doc["config"]))
    return doc


def register(app: typer.Typer) -> None:
    """Add the ``jabas`` command to the ``reproduce`` Typer app."""

    @app.command("jabas")
    def jabas_cmd(
        out: Annotated[Path, typer.Option(help="Output directory.")] = Path("out/jabas"),
        profiles: Annotated[Path | None, typer.Option(help="Sia traces directory (per-GPU-type profiles).")] = None,
        apps: Annotated[str, typer.Option(help="Comma-separated Pollux/Sia applications ('' = none).")] = ",".join(
            SIA_APPS),
        resnet: Annotated[bool, typer.Option(help="Include ResNet-50 on the JABAS profiles.")] = True,
        gamma: Annotated[float, typer.Option(help="Similarity target γ.")] = 0.1,
        epochs: Annotated[int | None, typer.Option(help="Cap epochs per model (quick runs).")] = None,
        gp_restarts: Annotated[int, typer.Option(help="GP optimizer restarts of the forecaster (release: 9).")] = 0,
        cost_slack: Annotated[float, typer.Option(help="Cost objective: within (1+slack)× fastest time.")] = 0.5,
    ) -> None:
        """JABAS vs static / uniform / homogeneous adaptive batching (writes jabas.json, plots, report.html)."""
        prof = profiles or default_profiles_dir()
        names = [a for a in apps.split(",") if a]
        if names and prof is None:
            raise typer.BadParameter("Sia profiles not found; pass --profiles or --apps ''", param_hint="--profiles")
        doc = reproduce(out, prof, names, gamma=gamma, gp_restarts=gp_restarts, max_epochs=epochs,
                        cost_slack=cost_slack, resnet=resnet)
        typer.echo(f"time_reduction {doc['time_reduction']:.3f}  cost_reduction {doc['cost_reduction']:.3f}  "
                   f"(cost-aware: {doc['cost_aware']['time_reduction']:.3f} / "
                   f"{doc['cost_aware']['cost_reduction']:.3f})  -> {out / 'jabas.json'}")
