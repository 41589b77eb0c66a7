"""Writing the outputs of `sim run` and `sim compare` (summary.json/csv, jobs.csv, plots, report.html).

Everything is computed before the first file is written, and files are written to a temporary name and
renamed, so a failed run leaves no half-written output behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from elastisched.report import html
from elastisched.sim.metrics import DECOMPOSITION, SimResult

#: the HTML summary's columns, header with unit (summary.csv keeps every SUMMARY_COLUMNS column)
REPORT_COLUMNS = {"policy": "policy", "n_jobs": "jobs", "avg_jct": "avg JCT (s)", "median_jct": "median JCT (s)",
                  "p95_jct": "p95 JCT (s)", "avg_queue": "avg queue (s)", "makespan": "makespan (s)",
                  "gpu_util_pct": "GPU utilisation (%)", "restarts": "restarts (count)",
                  "preemptions": "preemptions (count)", "wall_seconds": "wall (s)"}
SUMMARY_COLUMNS = ["policy", "n_jobs", "avg_jct", "median_jct", "p95_jct", "p99_jct", "avg_queue", "makespan",
                   "gpu_utilization", "restarts", "preemptions", "decision_ms_p50", "decision_ms_max",
                   "wall_seconds"]


#: header with unit of the decomposition tables (means per finished job; sim.metrics)
DECOMP_COLUMNS = {"policy": "policy", "avg_jct": "avg JCT (s)", **{k: f"{k} (s)" for k in DECOMPOSITION}}
GPU_HOURS_COLUMNS = {"policy": "policy", "restarts": "restarts (count)", "gpu_h_running": "running (GPU-h)",
                     "gpu_h_restarting": "restarting (GPU-h)", "gpu_h_idle": "idle (GPU-h)"}


def decomposition_rows(results: Mapping[str, SimResult]) -> list[dict[str, Any]]:
    """Per policy: where its mean JCT goes (queued + restarting + running; running = best + GPU-count loss +
    batch loss, `sim.metrics`) and its GPU-hours by use."""
    out = []
    for name, r in results.items():
        s = r.summary
        gh = s.get("gpu_hours", {})
        out.append({"policy": name, "avg_jct": s["avg_jct"], **s.get("decomposition", {}), "restarts": s["restarts"],
                    **{f"gpu_h_{k}": gh.get(k, float("nan")) for k in ("running", "restarting", "idle")}})
    return out


#: what each figure of the report means, on the page (the longer version: docs/seeds.md)
DEFINITIONS: dict[str, str] = {
    "avg JCT": "job completion time, submission to end, averaged over the jobs that finished",
    "avg queue": "seconds from submission to the job's first start only (waits after a preemption are not in it; "
                 "they are in `queued`)",
    "queued": "every second a job spent without GPUs: before its first start and after each preemption "
              "(jct - run time); so queued >= avg queue",
    "restarting": "seconds holding GPUs inside a restart or resize window (no progress)",
    "running": "seconds making progress; running = best + loss_gpus + loss_batch",
    "best": "the job's whole work at its best achievable goodput (any GPU count up to its cap, any spread over "
            "servers, any profiled batch) on an empty cluster: a lower bound for that job alone",
    "loss_gpus": "running - best - loss_batch: time lost to the GPU count and placement the job got",
    "loss_batch": "time lost to the batch size: running minus the same progress at the best batch on the very "
                  "GPUs the job had",
    "GPU utilisation": "busy GPU-hours / available GPU-hours over the makespan",
}


def definitions() -> str:
    """The report's terms, defined where they are read."""
    from html import escape

    items = "".join(f"<dt><b>{escape(k)}</b></dt><dd>{escape(v)}</dd>" for k, v in DEFINITIONS.items())
    return f"<dl>{items}</dl><p>jct = queued + restarting + running (per job; the tables show means).</p>"


def write_atomic(path: Path, data: bytes | str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def write_run(out: Path, result: SimResult) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "summary.json", json.dumps(result.summary, indent=2, default=str))
    write_atomic(out / "jobs.csv", result.job_rows.to_csv())  # as DataFrame.to_csv writes it, without pandas
    write_atomic(out / "timeline.csv", result.timeline_rows.to_csv())


def compare_report(results: Mapping[str, SimResult], title: str, config: Mapping[str, Any],
                   extra_sections: list[tuple[str, str]] | None = None) -> dict[str, bytes | str]:
    """Files of a comparison, by name (nothing written yet)."""
    import pandas as pd

    from elastisched.report import plots  # matplotlib: only when there is something to plot (not `sim run`)

    rows = [r.summary for r in results.values()]
    summary = pd.DataFrame(rows)[[c for c in SUMMARY_COLUMNS if c in rows[0]]]
    cdf = plots.jct_cdf(results)
    loaned = any(r.timeline["loaned_servers"].max() > 0 for r in results.values() if len(r.timeline))
    util = plots.utilisation_timeline(results, loaned=loaned)
    shown = [{**r, "gpu_util_pct": 100 * r["gpu_utilization"]} for r in rows]  # as the terminal shows it
    sections = [("Summary", html.unit_table(REPORT_COLUMNS, shown)),
                ("JCT decomposition", html.unit_table(DECOMP_COLUMNS, decomposition_rows(results))),
                ("GPU-hours by use", html.unit_table(GPU_HOURS_COLUMNS, decomposition_rows(results))),
                ("Job completion time", html.img(cdf, "JCT CDF")),
                ("Utilisation", html.img(util, "utilisation timeline")),
                ("Definitions", definitions())]
    sections.insert(0, ("Verdict", overview(results)))
    sections += extra_sections or []
    return {"summary.csv": summary.to_csv(index=False), "jct_cdf.png": cdf, "utilization.png": util,
            "report.html": html.page(title, sections, config)}


def overview(results: Mapping[str, SimResult]) -> str:
    """Which policy wins on average JCT and by how much, and what was simulated (workload, cluster)."""
    from html import escape

    ok = {n: r.summary for n, r in results.items() if r.summary.get("n_finished")}
    first = next(iter(results.values())).summary
    cl = first.get("cluster", {})
    what = (f"{first.get('n_jobs', 0):,} jobs of {escape(str(first.get('workload', '?')))} on "
            f"{cl.get('nodes', '?')} nodes, {cl.get('gpus', '?')} GPUs ({', '.join(cl.get('types', []))}).")
    if not ok:
        return f"<p>{what} No policy finished a job.</p>"
    best = min(ok, key=lambda n: ok[n]["avg_jct"])
    b = ok[best]["avg_jct"]
    others = "; ".join(f"{escape(n)} {s['avg_jct'] / b:.2f}× longer" for n, s in ok.items() if n != best)
    unfinished = [n for n, r in results.items() if r.summary.get("n_finished", 0) < r.summary.get("n_jobs", 0)]
    note = (f" Not every job finished under: {', '.join(map(escape, unfinished))}." if unfinished else "")
    return (f"<p><b>{escape(best)}</b> has the lowest average JCT, {b:,.0f} s"
            + (f" ({others})" if others else "") + f".{note}</p><p>{what}</p>")


def write_files(out: Path, files: Mapping[str, bytes | str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        write_atomic(out / name, data)
