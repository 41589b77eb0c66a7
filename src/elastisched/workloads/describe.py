"""`elastisched trace describe`: what is in a workload, before anyone simulates it.

Job count, arrival rate over the day and the week, GPU-demand histogram, duration and GPU-time CDFs,
application mix, and the offered load against a cluster. A job's duration is its run time at the
requested size on the cluster's GPU type from the measured profiles of its application
(`Application.run_seconds`, restarts excluded) × `work_scale` — which for raw traces is the traced duration,
since their loader sets `work_scale` so — and the trace's own `duration` only for an unprofiled application
(DeepBoot's training rows carry a placeholder `duration` that is not their length). Offered load = requested
GPU-seconds / (cluster GPUs × arrival span): above 1 the cluster cannot keep up even with perfect packing.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from elastisched.core.nodes import node_set
from elastisched.core.types import JobSpec, NodeView
from elastisched.models.registry import PerfModels
from elastisched.workloads.schema import Workload

DAY, WEEK = 86400.0, 7 * 86400.0


def job_durations(jobs: Sequence[JobSpec], models: PerfModels, gpu_type: str, per_node: int) -> np.ndarray:
    """Seconds per job at its requested size (trace duration, else from the application's profile)."""
    cache: dict[tuple[str, int, int], float] = {}
    out = np.empty(len(jobs))
    for i, j in enumerate(jobs):
        if j.application not in models:
            out[i] = j.duration if j.duration is not None else math.nan
            continue
        key = (j.application, j.num_gpus, j.batch_size)
        if key not in cache:
            app = models.app(j.application)
            gtype = gpu_type if gpu_type in app.gpu_types else app.gpu_types[0]
            cache[key] = app.run_seconds(gtype, j.num_gpus, j.batch_size, per_node)
        out[i] = cache[key] * j.work_scale
    return out


def _quantiles(x: np.ndarray) -> dict[str, float]:
    if not len(x):
        return {}
    q = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
            "max": float(x.max())}


def describe(wl: Workload, models: PerfModels, nodes: Sequence[NodeView]) -> dict[str, Any]:
    """The numbers of the report (JSON-ready)."""
    jobs = wl.jobs
    gpus_total = node_set(tuple(nodes)).total_gpus
    gtype = Counter(n.gpu_type for n in nodes).most_common(1)[0][0] if nodes else "t4"
    per_node = max((n.num_gpus for n in nodes), default=4)
    submit = np.array([j.submit_time for j in jobs], dtype=float)
    demand = np.array([j.num_gpus for j in jobs], dtype=float)
    dur = job_durations(jobs, models, gtype, per_node)
    known = np.isfinite(dur)
    dur, demand_k = dur[known], demand[known]
    gpu_time = dur * demand_k
    span = float(submit.max() - submit.min()) if len(jobs) > 1 else 0.0
    offered = float(gpu_time.sum() / (gpus_total * span)) if span > 0 and gpus_total else math.inf
    hour_of_day = np.bincount(((submit % DAY) // 3600).astype(int), minlength=24)[:24]
    day_of_week = np.bincount(((submit % WEEK) // DAY).astype(int), minlength=7)[:7]
    days = max(span / DAY, 1 / 24)
    return {
        "workload": wl.name, "source": wl.source, "digest": wl.digest, "jobs": len(jobs),
        "span_hours": span / 3600, "arrivals_per_hour": len(jobs) / max(span / 3600, 1e-9) if span else math.nan,
        "arrivals_by_hour_of_day": (hour_of_day / days).tolist(),  # mean jobs per hour, by hour of day
        "arrivals_by_day_of_week": day_of_week.tolist(),
        "gpu_demand": {str(k): int(v) for k, v in sorted(Counter(demand.astype(int).tolist()).items())},
        "duration_s": _quantiles(dur), "gpu_time_s": _quantiles(gpu_time),
        "applications": dict(Counter(j.application for j in jobs).most_common()),
        "elastic_jobs": sum(j.elastic for j in jobs), "jobs_without_length": int((~known).sum()),
        "cluster": {"gpus": gpus_total, "nodes": len(nodes), "gpu_type": gtype},
        "offered_load": offered, "gpu_hours_requested": float(gpu_time.sum() / 3600),
        "largest_job_gpus": int(demand.max()) if len(jobs) else 0,
        "jobs_larger_than_cluster": int((demand > gpus_total).sum()),
        "_durations": dur, "_gpu_time": gpu_time, "_submit": submit,
    }


def figure(d: dict[str, Any]) -> bytes:
    """One figure of six panels, each titled, with labelled axes (units) and a legend where it has series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(14, 7.5))
    a = ax[0, 0]
    a.bar(range(24), d["arrivals_by_hour_of_day"], color="tab:blue", label="mean arrivals")
    a.set(title="Arrivals over the day", xlabel="hour of day (trace clock)", ylabel="jobs per hour")
    a.legend(fontsize=8)
    a = ax[0, 1]
    a.bar(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], d["arrivals_by_day_of_week"], color="tab:green",
          label="arrivals (trace day 0 = Mon)")
    a.set(title="Arrivals over the week", xlabel="day of week", ylabel="jobs")
    a.legend(fontsize=8)
    a = ax[0, 2]
    ks = list(d["gpu_demand"])
    bars = a.bar(ks, [d["gpu_demand"][k] for k in ks], color="tab:orange", label="jobs")
    a.bar_label(bars, fontsize=7)  # a linear axis (bar heights compare as counts); small counts stay readable
    a.set(title="GPU demand", xlabel="GPUs requested per job", ylabel="jobs")
    a.legend(fontsize=8)
    for a, key, label in ((ax[1, 0], "_durations", "duration at requested size (h)"),
                          (ax[1, 1], "_gpu_time", "GPU-time (GPU-hours)")):
        x = np.sort(d[key]) / 3600
        if len(x):
            a.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=f"{len(x)} jobs")
            a.set_xscale("log")
        a.set(title=f"CDF of {label.split(' (')[0]}", xlabel=label, ylabel="fraction of jobs")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    a = ax[1, 2]
    apps = list(d["applications"].items())[:12]
    a.barh([k for k, _ in apps][::-1], [v for _, v in apps][::-1], color="tab:purple", label="jobs")
    a.set(title="Application mix (top 12)", xlabel="jobs", ylabel="application")
    a.legend(fontsize=8)
    fig.suptitle(f"{d['workload']}: {d['jobs']} jobs over {d['span_hours']:.1f} h; offered load "
                 f"{d['offered_load']:.2f} on {d['cluster']['gpus']} {d['cluster']['gpu_type']} GPUs")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def summary_rows(d: dict[str, Any]) -> list[dict[str, str]]:
    """The headline numbers as (quantity, value) rows with units."""
    du, gt = d["duration_s"], d["gpu_time_s"]
    rows = [("jobs", f"{d['jobs']:,}"), ("span", f"{d['span_hours']:,.1f} h"),
            ("arrival rate", f"{d['arrivals_per_hour']:,.1f} jobs/h"),
            ("elastic jobs", f"{d['elastic_jobs']:,}"),
            ("largest request", f"{d['largest_job_gpus']} GPUs"),
            ("jobs larger than the cluster", f"{d['jobs_larger_than_cluster']:,}"),
            ("requested GPU-time", f"{d['gpu_hours_requested']:,.0f} GPU-hours"),
            ("offered load", f"{d['offered_load']:.2f} (of {d['cluster']['gpus']} GPUs)")]
    if du:
        rows += [("duration p50 / p90 / p99", f"{du['p50'] / 3600:.2f} / {du['p90'] / 3600:.2f} / "
                  f"{du['p99'] / 3600:.2f} h"),
                 ("GPU-time p50 / p90 / p99", f"{gt['p50'] / 3600:.2f} / {gt['p90'] / 3600:.2f} / "
                  f"{gt['p99'] / 3600:.2f} GPU-hours")]
    return [{"quantity": k, "value": v} for k, v in rows]


def public(d: dict[str, Any]) -> dict[str, Any]:
    """`d` without the per-job arrays (for JSON)."""
    return {k: v for k, v in d.items() if not k.startswith("_")}
