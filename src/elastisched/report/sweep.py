"""Outputs of `elastisched sim sweep`: cells.csv, summary.csv, summary.json, plots and one report.html."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elastisched.report import html
from elastisched.report.compare import write_files
from elastisched.sim.sweep import METRICS, CellResult, aggregate, cell_rows


def _csv(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _fmt(v: Any, metric: str) -> str:
    if not isinstance(v, float) or not math.isfinite(v):
        return "–" if isinstance(v, float) else str(v)
    if metric == "gpu_utilization":
        return f"{100 * v:.1f}"
    if metric in ("restarts", "n_finished") and v.is_integer():
        return f"{v:,.0f}"  # counts: a whole mean is shown whole
    return f"{v:,.2f}" if metric == "wall_seconds" else f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"


TABLE_METRICS = ("avg_jct", "p95_jct", "avg_queue", "p95_queue", "gpu_utilization", "gpu_hours", "restarts")


def _table(rows: Sequence[Mapping[str, Any]], multi_cluster: bool) -> str:
    """Mean over seeds with its 95 % half-width under it (keeps the table inside a 1,280 px page)."""
    from html import escape

    keys = ["policy", "workload", *(["cluster"] if multi_cluster else []), "seeds"]
    head = "".join(f"<th>{escape(k)}</th>" for k in keys) + "".join(
        f"<th>{escape(METRICS[m])}</th>" for m in TABLE_METRICS)
    body = []
    for r in rows:
        cells = [f"<td>{escape(str(r[k]))}" + (f" <b>({r['failed']} failed)</b>" if k == "seeds" and r["failed"]
                                               else "") + "</td>" for k in keys]
        for m in TABLE_METRICS:
            ci = r[f"{m}_ci95"]
            sub = f"<br><small>± {_fmt(ci, m)}</small>" if isinstance(ci, float) and math.isfinite(ci) else ""
            if r.get("seed_invariant"):
                sub = "<br><small>same every seed</small>"
            cells.append(f"<td>{_fmt(r[m], m)}{sub}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def jct_plot(rows: Sequence[Mapping[str, Any]], metric: str = "avg_jct") -> bytes:
    """Grouped bars: mean of `metric` per workload (× cluster) and policy, with 95 % interval whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r["workload"], r["cluster"]) for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows if math.isfinite(r[metric])))
    by = {(r["workload"], r["cluster"], r["policy"]): r for r in rows}
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(groups) * max(1, len(policies)) * 0.4 + 2), 4.2))
    for k, pol in enumerate(policies):
        xs, ys, es = [], [], []
        for g, (wl, cl) in enumerate(groups):
            r = by.get((wl, cl, pol))
            if r is None or not math.isfinite(r[metric]):
                continue
            xs.append(g + (k - (len(policies) - 1) / 2) * width)
            ys.append(r[metric])
            e = r[f"{metric}_ci95"]
            es.append(e if math.isfinite(e) else 0.0)
        ax.bar(xs, ys, width, yerr=es, capsize=2, label=pol)
    multi_cluster = len({c for _, c in groups}) > 1
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{w}\n{c}" if multi_cluster else w for w, c in groups], rotation=30, ha="right",
                       fontsize=8)
    ax.set_xlabel("workload" + (" / cluster" if multi_cluster else ""))
    ax.set_ylabel(METRICS[metric])
    ax.set_title(f"{METRICS[metric].split(' (')[0]} per workload (mean over seeds, 95 % interval)")
    ax.legend(title="policy", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per workload (and cluster): the policy with the lowest mean average JCT and how much longer the others
    take; which policies gave the same run for every seed (their interval is no measure of spread)."""
    from html import escape

    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        if math.isfinite(r["avg_jct"]):
            groups.setdefault((r["workload"], r["cluster"]), []).append(r)
    multi = len({c for _, c in groups}) > 1
    lines = []
    for (wl, cl), rs in groups.items():
        best = min(rs, key=lambda r: r["avg_jct"])
        others = "; ".join(f"{escape(r['policy'])} {r['avg_jct'] / best['avg_jct']:.2f}× longer"
                           for r in rs if r is not best)
        where = escape(wl) + (f" on {escape(cl)}" if multi else "")
        lines.append(f"<b>{escape(best['policy'])}</b> has the lowest average JCT on {where}, "
                     f"{best['avg_jct']:,.0f} s over {best['seeds']} seed(s)" + (f" ({others})" if others else "")
                     + ".")
    fixed = sorted({r["policy"] for r in rows if r.get("seed_invariant")})
    if fixed:
        lines.append(f"{escape(', '.join(fixed))} gave the same run for every seed (deterministic policy and "
                     "workload: the seed changes nothing, so no interval is shown for them).")
    return "".join(f"<p>{x}</p>" for x in lines)


def sweep_files(results: Sequence[CellResult], config: Mapping[str, Any]) -> dict[str, bytes | str]:
    """Every output of a sweep, by file name (nothing written yet)."""
    rows = aggregate(results)
    cells = cell_rows(results)
    failed = [c for c in cells if c["status"] != "ok"]
    tbl = _table(rows, multi_cluster=len({r["cluster"] for r in rows}) > 1)
    files: dict[str, bytes | str] = {"cells.csv": _csv(cells), "summary.csv": _csv(rows)}
    sections = [("Verdict", verdict(rows) + f"<p>{len(cells) - len(failed)} of {len(cells)} cells finished"
                 + (f"; <b>{len(failed)} failed</b> (listed below)" if failed else "") + ".</p>"),
                ("Summary (mean ± 95 % interval over seeds)", f"<div style='overflow-x:auto'>{tbl}</div>")]
    if any(math.isfinite(r["avg_jct"]) for r in rows):
        files["avg_jct.png"] = jct_plot(rows, "avg_jct")
        sections.append(("Average JCT", html.img(files["avg_jct.png"], "average JCT per workload and policy")))
    if failed:
        sections.append(("Failed cells", html.table(failed, ["workload", "cluster", "policy", "seed", "error"])))
    files["summary.json"] = json.dumps({"config": dict(config), "summary": rows, "failed": failed}, indent=2,
                                       default=str, allow_nan=True)
    files["report.html"] = html.page("Simulation sweep", sections, config)
    return files


def write_sweep(out: Path, results: Sequence[CellResult], config: Mapping[str, Any]) -> dict[str, bytes | str]:
    files = sweep_files(results, config)
    write_files(out, files)
    return files
