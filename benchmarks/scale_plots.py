"""The figures of docs/scale.md, drawn from benchmarks/results/scale.json (written by benchmarks/scale.py).

One PNG per figure, for every section the JSON holds (schemas in scale.py's docstring):
- replay:    `replay_cpu.png` (simulation CPU against jobs, per policy, log-log, with the linear slope through
             the smallest size and the 60 s target) and `replay_rss.png` (peak RSS against jobs, 2 GiB target),
             the latest from source (`replay`, `replay_source*`), dashed the latest compiled (`replay_compiled*`);
- decisions: `decisions.png` (p99 decision CPU against GPUs, per policy, active jobs growing with GPUs, the
             1 s target; a point decided under a time budget is drawn hollow);
- philly:    `philly.png` (CPU seconds per policy and cluster on the full Philly trace, the 10 min target, and
             mean JCT beside it).
The `live` section is a table in docs/scale.md, not a figure. Usage: `python benchmarks/scale_plots.py
[--json benchmarks/results/scale.json] [--out docs/scale]`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "scale.json"
DEFAULT_OUT = HERE.parent / "docs" / "scale"


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def replay(section: dict[str, Any], out: Path, compiled: dict[str, Any] | None = None) -> list[Path]:
    """Per policy, from source (solid) and, when measured (`replay_compiled`), with the compiled core (dashed)."""
    def when(sec: dict[str, Any]) -> str:  # (two sections may be measured hours apart, on a machine that varies)
        return str(sec.get("measured_at", "?"))[:16].replace("T", " ")

    series = [(section["runs"], f" (source, {when(section)})" if compiled else "", "o-")]
    if compiled:
        series.append((compiled["runs"], f" (compiled, {when(compiled)})", "s--"))
    target = section.get("targets", {})
    paths = []
    for key, name, label, limit in (("cpu_s", "replay_cpu.png", "simulation CPU (s)", target.get("cpu_s")),
                                    ("peak_rss_mib", "replay_rss.png", "peak RSS (MiB)", target.get("peak_rss_mib"))):
        fig, ax = plt.subplots(figsize=(6, 4))
        for runs, suffix, style, policy in ((r, x, st, p) for r, x, st in series
                                            for p in dict.fromkeys(run["policy"] for run in r)):
            pts = sorted((r["jobs"], r[key]) for r in runs if r["policy"] == policy)
            ax.plot([j for j, _ in pts], [v for _, v in pts], style, label=policy + suffix)
            if key == "cpu_s" and len(pts) > 1 and style == "o-":  # linear growth from the smallest size
                j0, v0 = pts[0]
                ax.plot([j0, pts[-1][0]], [v0, v0 * pts[-1][0] / j0], ":", color="grey", linewidth=1)
        if limit:
            ax.axhline(limit, color="red", linestyle="--", linewidth=1, label=f"target {limit:g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("jobs (philly:jobs=N)")
        ax.set_ylabel(label)
        ax.set_title(f"replay on {section.get('cluster', '?')}" + (" (dotted: linear)" if key == "cpu_s" else ""))
        ax.legend(fontsize=7)
        paths.append(_save(fig, out / name))
    return paths


def decisions(section: dict[str, Any], out: Path) -> list[Path]:
    """Thread-CPU p99 per round (the bar's clock) against GPUs; active jobs grow with GPUs (1,000 at 8,192), so
    one panel holds every point. Hollow markers: the policy ran with a time budget."""
    points = section["points"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy in sorted({p["policy"] for p in points}):
        pts = sorted((p["gpus"], max(p["cpu_p99_s"], 1e-4), bool(p.get("budget_s"))) for p in points
                     if p["policy"] == policy)
        line, = ax.plot([g for g, _, _ in pts], [v for _, v, _ in pts], "o-", label=policy)
        hollow = [(g, v) for g, v, b in pts if b]
        if hollow:
            ax.plot(*zip(*hollow, strict=True), "o", mfc="white", color=line.get_color())
    ax.axhline(1.0, color="red", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("GPUs (three types; active jobs = 1,000 x GPUs / 8,192)")
    ax.set_ylabel("decision CPU per round, p99 (s)")
    ax.legend(fontsize=7, ncol=2)
    return [_save(fig, out / "decisions.png")]


def philly(section: dict[str, Any], out: Path) -> list[Path]:
    runs = section["runs"]
    done = ["avg_jct" in r for r in runs]  # an unfinished run was stopped: its CPU is how far it got
    # (a run stopped at its cap and one of the same options let finish are two bars, not one)
    labels = [f"{r['policy']} {_options(r)}{'' if d else ' (stopped)'}\n{r['cluster']}"
              for r, d in zip(runs, done, strict=True)]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 0.6 * len(runs) + 1.5))
    a.barh(labels, [r["cpu_s"] for r in runs], color=["C0" if d else "C7" for d in done])
    for y, (r, d) in enumerate(zip(runs, done, strict=True)):
        if not d:
            a.text(r["cpu_s"], y, f" stopped at day {r.get('sim_time_reached_s', 0) / 86400:.1f}", va="center",
                   fontsize=7)
    a.axvline(600, color="red", linestyle="--", linewidth=1)
    a.set_xlabel("CPU seconds, whole trace\n(target 600; grey: stopped unfinished)")
    b.barh(labels, [r["avg_jct"] / 3600 if d else 0.0 for r, d in zip(runs, done, strict=True)])
    b.set_xlabel("mean JCT (hours;\nnone for a run stopped unfinished)")
    b.set_yticks([])
    fig.suptitle("full Philly trace")
    return [_save(fig, out / "philly.png")]


def latest_replay(data: dict[str, Any], compiled: bool) -> dict[str, Any] | None:
    """The most recently measured replay with the compiled core (`replay_compiled*` keys) or from source
    (`replay`, `replay_source*`), None if none."""
    keys = [k for k in data if k.startswith("replay_compiled")] if compiled else \
        [k for k in data if k == "replay" or k.startswith("replay_source")]
    return max((data[k] for k in keys), key=lambda sec: str(sec.get("measured_at", "")), default=None)


def _options(run: dict[str, Any]) -> str:
    opts = run.get("options") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(opts.items()))


PLOTS: dict[str, Callable[[dict[str, Any], Path], list[Path]]] = {  # section -> its plots, from the whole JSON
    "replay": lambda data, out: replay(latest_replay(data, compiled=False) or data["replay"], out,
                                       latest_replay(data, compiled=True)),
    "decisions": lambda data, out: decisions(data["decisions"], out),
    "philly": lambda data, out: philly(data["philly"], out)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="scale.json to read (default: %(default)s)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for the PNGs (default: %(default)s)")
    args = p.parse_args(argv)
    if not args.json.is_file():
        p.error(f"--json: no such file {args.json} (run benchmarks/scale.py first)")
    data = json.loads(args.json.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    for name, plot in PLOTS.items():
        if name in data:
            for path in plot(data, args.out):
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
