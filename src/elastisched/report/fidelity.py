"""Fidelity against a peer: our Tiresias / Optimus on the eight Pollux workloads vs the Pollux artifact.

The artifact's own results (`results-jobload/<policy>-1.0/summary.json`, bundled as
`workloads/data/pollux/reference/`) give the average JCT per workload for its simulator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from elastisched import __version__
from elastisched.report import html, plots
from elastisched.report.compare import write_files
from elastisched.runner import run_policies, setup

WORKLOADS = tuple(f"workload-{i}" for i in range(1, 9))


def reference(policy: str) -> dict[str, float]:
    path = resources.files("elastisched.workloads") / "data" / "pollux" / "reference" / f"{policy}-1.0.json"
    return {k: float(v) for k, v in json.loads(path.read_text())["avgs"].items()}


def run_fidelity(out: Path, policies: Sequence[str],
                 progress: Callable[[str], Callable[[float, int, int], None] | None] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"cluster": "16x4:t4", "version": __version__, "policies": {}}
    sections = []
    for pol in policies:
        ref = reference(pol)
        ours: dict[str, float] = {}
        for w in WORKLOADS:
            s = setup(f"pollux:{w}", "16x4:t4")
            r = run_policies(s, [pol], 0, (lambda n, w=w: progress(f"{n} {w}")) if progress else None)[pol]
            ours[w] = r.summary["avg_jct"]
        err = {w: ours[w] / ref[w] - 1 for w in WORKLOADS}
        mean_ours = sum(ours.values()) / len(ours)
        mean_ref = sum(ref[w] for w in WORKLOADS) / len(WORKLOADS)
        result["policies"][pol] = {
            "avg_jct": ours, "reference": {w: ref[w] for w in WORKLOADS}, "error": err,
            "mean_avg_jct": mean_ours, "reference_mean": mean_ref, "mean_error": mean_ours / mean_ref - 1,
            "worst_error": max(err.values(), key=abs)}
        rows = [{"workload": w, "elastisched (s)": ours[w], "Pollux artifact (s)": ref[w], "error": f"{err[w]:+.2%}"}
                for w in WORKLOADS]
        rows.append({"workload": "mean", "elastisched (s)": mean_ours, "Pollux artifact (s)": mean_ref,
                     "error": f"{mean_ours / mean_ref - 1:+.2%}"})
        sections.append((f"{pol}: average JCT per workload",
                         html.table(rows, ["workload", "elastisched (s)", "Pollux artifact (s)", "error"])
                         + html.img(plots.bar(ours, f"{pol} avg JCT", "seconds", reference=ref), pol)))
    files = {"fidelity.json": json.dumps(result, indent=2),
             "report.html": html.page("Fidelity against the Pollux artifact (16x4 T4)", sections, result)}
    write_files(out, files)
    return result
