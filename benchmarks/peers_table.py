"""Every policy on the eight Pollux workloads (16x4 T4) and on Sia's Saturn workloads 1-5 (Sia's cluster).

One command (docs/peers.md):

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/peers_table.py --out results/peers

writes `peers_table.json` (config, one record per cell: summary figures or the reason it is n/a) and
`peers_table.md` (the tables of docs/peers.md). Each cell is one simulation in its own process, so a cell that
fails or runs past `--cell-timeout` is recorded as n/a with its reason and the others go on.

Set-ups: Pollux workloads as `elastisched sim run` runs them (bundled profiles, per-application restart cost,
in-place batch changes free); Saturn workloads as the `sia` experiment runs them (`experiments/sia.run_one`:
Sia's per-type profiles, its restart costs and calibration). Policy options: the policies' defaults, except
sia (`retune_batch=True`, as its artifact), gavel on Saturn (360 s rounds, max-sum-throughput, as Sia's
artifact) and pollux on Saturn (`unaware=True`: heterogeneity-unaware, as Sia's artifact runs it).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

POLICIES = ("fifo", "srtf", "tiresias", "optimus", "lyra", "ones", "jabas", "pollux", "sia", "gavel")
POLLUX_CLUSTER = "16x4:t4"
#: policy options per suite (empty: the policy's defaults)
OPTIONS: dict[str, dict[str, dict[str, Any]]] = {
    "pollux": {"sia": {"retune_batch": True}},
    "saturn": {"sia": {"retune_batch": True}, "gavel": {"interval": 360.0, "objective": "max_sum_throughput"},
               "pollux": {"unaware": True}},
}


def run_cell(suite: str, number: int, policy: str, seed: int, queue: Any) -> None:
    """One simulation in a child process; puts (summary | None, error | None) on `queue`."""
    try:
        from threadpoolctl import threadpool_limits

        t0, c0 = time.perf_counter(), time.process_time()
        opts = OPTIONS[suite].get(policy, {})
        with threadpool_limits(1):
            if suite == "pollux":
                from elastisched.policies.base import make_policy
                from elastisched.sim import SimConfig, simulate
                from elastisched.sim.runner import setup

                s = setup(f"pollux:workload-{number}", POLLUX_CLUSTER)
                t0, c0 = time.perf_counter(), time.process_time()
                res = simulate(s.workload, make_policy(policy, **opts), s.nodes, s.models, SimConfig(seed=seed))
            else:
                from elastisched.experiments import sia

                models = sia.sia_models(sia.default_root() / "traces")
                wl = sia.saturn_workload(sia.default_root() / "workloads" / "saturn" / f"workload-{number}.csv",
                                         models)
                t0, c0 = time.perf_counter(), time.process_time()
                res = sia.run_one(policy, wl, models, seed, opts)
        sm = res.summary
        out = {"avg_jct": float(sm["avg_jct"]), "p95_jct": float(sm["p95_jct"]), "makespan": float(sm["makespan"]),
               "gpu_hours": float(res.jobs["gpu_seconds"].sum()) / 3600.0 if len(res.jobs) else 0.0,
               "restarts": int(sm["restarts"]), "n_finished": int(sm.get("n_finished", len(res.jobs))),
               "n_jobs": len(res.jobs), "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
               "options": opts}
        queue.put((out, None))
    except Exception as e:  # recorded as the cell's n/a reason
        queue.put((None, f"{type(e).__name__}: {e}"[:300]))


def run_all(cells: list[tuple[str, int, str, int]], workers: int, timeout: float, log: Any,
            partial: Path | None = None) -> dict[tuple[str, int, str, int], dict[str, Any]]:
    """Every cell in its own process, `workers` at a time; after each cell the finished ones go to `partial`
    (a file `--reuse` reads), so an interrupted run loses only the cells in flight."""
    ctx = mp.get_context("spawn")
    todo = list(cells)
    running: dict[tuple[str, int, str, int], tuple[Any, Any, float]] = {}
    done: dict[tuple[str, int, str, int], dict[str, Any]] = {}
    while todo or running:
        while todo and len(running) < workers:
            c = todo.pop(0)
            q = ctx.Queue()
            p = ctx.Process(target=run_cell, args=(*c, q))
            p.start()
            running[c] = (p, q, time.perf_counter())
        time.sleep(0.5)
        for c, (p, q, t0) in list(running.items()):
            rec: dict[str, Any] | None = None
            if time.perf_counter() - t0 > timeout:  # first: a result not in by the deadline is late, however
                p.kill()                            # short the poll that finds it (one every 0.5 s)
                rec = {"error": f"timeout: no result after {timeout:.0f} s wall"}
            elif not q.empty():
                out, err = q.get()
                rec = {"summary": out} if err is None else {"error": err}
            elif not p.is_alive():
                rec = {"error": f"worker exited with code {p.exitcode}"}
            if rec is not None:
                p.join()
                done[c] = rec
                del running[c]
                if partial is not None:
                    partial.write_text(json.dumps({"cells": [{"suite": k[0], "workload": k[1], "policy": k[2],
                                                              "seed": k[3], **v} for k, v in done.items()]}))
                print(f"{time.strftime('%H:%M:%S')} {c[0]}-{c[1]} {c[2]} seed {c[3]}: "
                      + (f"{rec['summary']['avg_jct']:,.0f} s ({rec['summary']['wall_s']:.0f} s wall)"
                         if "summary" in rec else rec["error"]), file=log, flush=True)
    return done


def fmt(x: float, digits: int = 0) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:,.{digits}f}"


def markdown(records: list[dict[str, Any]], policies: list[str], suites: dict[str, list[int]]) -> str:
    names = {"pollux": ("Pollux workloads", POLLUX_CLUSTER), "saturn": ("Saturn workloads", "6x4:t4,2x8:a100,3x8:rtx")}
    lines: list[str] = []
    for suite, numbers in suites.items():
        if not numbers:
            continue
        title, cluster = names[suite]
        lines += [f"### {title} ({cluster}): mean over workloads {', '.join(map(str, numbers))}", "",
                  "| policy | avg JCT (s) | p95 JCT (s) | makespan (s) | GPU-hours | restarts | wall (s) | CPU (s) |",
                  "|---|---|---|---|---|---|---|---|"]
        notes: list[str] = []
        for pol in policies:
            mine = [r for r in records if r["suite"] == suite and r["policy"] == pol]
            ok = [r["summary"] for r in mine if "summary" in r]
            if len(ok) < len(numbers):
                bad = [r for r in mine if "error" in r]
                reason = bad[0]["error"] if bad else "not run"
                lines.append(f"| {pol} | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
                notes.append(f"- {pol}: n/a on {len(numbers) - len(ok)} of {len(numbers)} workloads — {reason}")
                continue

            def m(key: str, rows: list[dict[str, Any]] = ok) -> float:
                return statistics.fmean(float(s[key]) for s in rows)

            lines.append(f"| {pol} | {fmt(m('avg_jct'))} | {fmt(m('p95_jct'))} | {fmt(m('makespan'))} | "
                         f"{fmt(m('gpu_hours'))} | {fmt(m('restarts'))} | {fmt(m('wall_s'), 1)} | "
                         f"{fmt(m('cpu_s'), 1)} |")
        lines += ["", *notes, *([""] if notes else []),
                  f"Average JCT per workload (s), {title.lower()}:", "",
                  "| policy | " + " | ".join(f"{suite}-{n}" for n in numbers) + " |",
                  "|---|" + "---|" * len(numbers)]
        for pol in policies:
            cells = []
            for n in numbers:
                r = next((r for r in records if r["suite"] == suite and r["policy"] == pol and r["workload"] == n),
                         None)
                cells.append(fmt(r["summary"]["avg_jct"]) if r and "summary" in r else "n/a")
            lines.append(f"| {pol} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def report(records: list[dict[str, Any]], policies: list[str], suites: dict[str, list[int]],
           config: dict[str, Any]) -> Any:
    """The same tables as an `ExperimentResult`, written by the project's one report writer (report.html)."""
    from elastisched.experiments.base import ExperimentResult, Table

    cols = {"policy": "policy", "avg_jct": "avg JCT (s)", "p95_jct": "p95 JCT (s)", "makespan": "makespan (s)",
            "gpu_hours": "GPU-hours", "restarts": "restarts", "wall_s": "wall (s)", "cpu_s": "CPU (s)"}
    tables = []
    for suite, ns in suites.items():
        if not ns:
            continue
        rows = []
        for pol in policies:
            ok = [r["summary"] for r in records if r["suite"] == suite and r["policy"] == pol and "summary" in r]
            row: dict[str, Any] = {"policy": pol}
            for k in list(cols)[1:]:
                row[k] = round(statistics.fmean(float(x[k]) for x in ok), 1) if len(ok) == len(ns) else "n/a"
            rows.append(row)
        cluster = POLLUX_CLUSTER if suite == "pollux" else "6x4:t4,2x8:a100,3x8:rtx"
        tables.append(Table(cols, rows, f"{suite.capitalize()} workloads {ns[0]}–{ns[-1]} on {cluster}: mean per "
                                        f"workload, seed {config['seed']}"))
    return ExperimentResult("peers_table", "Every policy on the Pollux and Saturn workloads", config, tables=tables,
                            data={"cells": records})


def numbers(text: str) -> list[int]:
    if not text:
        return []
    if ".." in text:
        lo, hi = text.split("..")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/peers"))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--pollux", default="1..8", help="Pollux workload numbers (e.g. 1..8, 1,6; empty: none)")
    ap.add_argument("--saturn", default="1..5", help="Saturn workload numbers (e.g. 1..5; empty: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cell-timeout", type=float, default=3600.0, help="wall seconds before a cell is n/a")
    ap.add_argument("--render-only", action="store_true",
                    help="run nothing: write the tables from --reuse files, cells missing there marked 'not run'")
    ap.add_argument("--order", choices=("slow-first", "fast-first"), default="slow-first")
    ap.add_argument("--reuse", type=Path, action="append", default=[],
                    help="a peers_table(.partial).json whose cells that ran are kept, not rerun (repeatable)")
    a = ap.parse_args(argv)
    policies = [p for p in a.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(f"error: --policies: unknown {unknown}; known: {', '.join(POLICIES)}", file=sys.stderr)
        return 2
    suites = {"pollux": numbers(a.pollux), "saturn": numbers(a.saturn)}
    # slow policies first, so the pool is not left waiting on them at the end; fast first fills most of the
    # table soonest (a run that may be cut short)
    slow = ("jabas", "ones", "sia", "pollux", "lyra")
    order = {p: (i if a.order == "slow-first" else -i) for i, p in enumerate(slow)}
    cells = sorted(((s, n, p, a.seed) for s, ns in suites.items() for n in ns for p in policies),
                   key=lambda c: order.get(c[2], 99 if a.order == "slow-first" else -99))
    a.out.mkdir(parents=True, exist_ok=True)
    old: dict[tuple[str, int, str, int], dict[str, Any]] = {}
    for path in a.reuse:
        for r in json.loads(path.read_text())["cells"]:
            if "summary" in r:
                old[(r["suite"], r["workload"], r["policy"], r["seed"])] = {"summary": r["summary"]}
    t0 = time.perf_counter()
    todo = [c for c in cells if c not in old]
    if a.render_only:
        done = {**old, **{c: {"error": "not run (out of time in this session)"} for c in todo}}
    else:
        done = {**old, **run_all(todo, a.workers, a.cell_timeout, sys.stdout, a.out / "peers_table.partial.json")}
    extra = [{"suite": c[0], "workload": c[1], "policy": c[2], "seed": c[3], **r} for c, r in old.items()
             if c not in set(cells)]
    records = [{"suite": s, "workload": n, "policy": p, "seed": seed, **done[(s, n, p, seed)]}
               for s, ns in suites.items() for n in ns for p in policies for seed in (a.seed,)] + extra
    config = {"policies": policies, "render_only": a.render_only, "reused": [str(p) for p in a.reuse],
              "suites": suites, "seed": a.seed, "workers": a.workers,
              "cell_timeout_s": a.cell_timeout, "options": OPTIONS, "pollux_cluster": POLLUX_CLUSTER,
              "env": {"OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "python": platform.python_version(), "cpus": os.cpu_count()},
              "total_wall_s": time.perf_counter() - t0}
    (a.out / "peers_table.json").write_text(json.dumps({"config": config, "cells": records}, indent=1))
    (a.out / "peers_table.md").write_text(markdown(records, policies, suites))
    from elastisched.experiments.writer import render_html

    (a.out / "report.html").write_text(render_html(report(records, policies, suites, config)))
    print(f"wrote {a.out / 'peers_table.json'}, {a.out / 'peers_table.md'} and {a.out / 'report.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
