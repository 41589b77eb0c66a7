"""Cost of the gradient statistics (JABAS similarity + Pollux noise scale) relative to the step time.

Launches itself as 2 gloo workers (accumulation 2 each, so both halves exist) training the example
model, with statistics every `--probe-interval` steps. Within the same run it compares the median time
of measured steps with the median of plain steps (same load, same process), and scales the extra cost to
the default interval (100): overhead = (t_measured − t_plain) / (100 · t_plain). A second pair of runs
(statistics off vs. at the default interval) gives the end-to-end mean as a cross-check.
Writes <out>/train_stats_overhead.json. Target (issue 6): ≤ 5 % of step time at the default interval.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
DEFAULT_INTERVAL = 100
TARGET = 0.05


def worker(a: argparse.Namespace) -> None:
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    import elastisched.train as et

    spec = importlib.util.spec_from_file_location("linreg_elastic", ROOT / "examples" / "linreg_elastic.py")
    ex = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(ex)  # type: ignore[union-attr]
    ctx = et.init(stats_interval=a.interval)
    x, y, _ = ex.make_data(8192, 32, 0.5)
    torch.manual_seed(0)
    net = nn.Linear(32, 1) if a.hidden == 0 else nn.Sequential(nn.Linear(32, a.hidden), nn.Tanh(),
                                                               nn.Linear(a.hidden, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loader = et.ElasticDataLoader(TensorDataset(x, y), batch_size=64)
    model = et.ElasticDataParallel(net, opt)
    times: list[tuple[float, bool]] = []
    t = time.perf_counter()
    for _ in ctx.remaining_epochs_until(10_000):
        for xb, yb in loader:
            nn.functional.mse_loss(model(xb), yb).backward()
            measured = bool(loader.micro and loader.micro.measure)
            opt.step()
            if not loader.accumulating:
                now = time.perf_counter()
                times.append((now - t, measured))
                t = now
            if len(times) >= a.steps:
                break
        if len(times) >= a.steps:
            break
    if ctx.rank == 0:
        Path(a.result).write_text(json.dumps(times[20:]))  # drop warm-up


def run(interval: int, steps: int, hidden: int) -> list[tuple[float, bool]]:
    from elastisched.train.launcher import start_workers

    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "t.json"
        g = start_workers(__file__, ["--worker", "--interval", str(interval), "--steps", str(steps),
                                     "--hidden", str(hidden), "--result", str(res)],
                          nproc=2, accum=[2, 2], local_batch=16, stdout=subprocess.DEVNULL)
        codes = g.wait(timeout=600)
        if codes != [0, 0]:
            raise RuntimeError(f"workers failed: {codes}")
        return [tuple(x) for x in json.loads(res.read_text())]  # type: ignore[misc]


def measure(hidden: int, steps: int, probe: int) -> dict:
    probe_times = run(probe, steps, hidden)
    stat = [t for t, m in probe_times if m]
    plain = [t for t, m in probe_times if not m]
    t_plain, t_stat = statistics.median(plain), statistics.median(stat)
    extra = max(t_stat - t_plain, 0.0)
    off = [t for t, _ in run(0, steps, hidden)]
    default = [t for t, _ in run(DEFAULT_INTERVAL, steps, hidden)]
    return {
        "model": "linear d=32" if hidden == 0 else f"MLP 32-{hidden}-1",
        "params": 33 if hidden == 0 else 33 * hidden + hidden + 1,
        "median_plain_step_s": t_plain, "median_stats_step_s": t_stat, "stats_step_extra_s": extra,
        "measured_steps": len(stat), "plain_steps": len(plain), "probe_interval": probe,
        "overhead_at_default_interval": extra / (DEFAULT_INTERVAL * t_plain),
        "overhead_at_probe_interval": extra / (probe * t_plain),
        "end_to_end_mean_step_s": {"stats_off": statistics.fmean(off),
                                   f"interval_{DEFAULT_INTERVAL}": statistics.fmean(default)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--probe-interval", type=int, default=10)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--interval", type=int, default=DEFAULT_INTERVAL, help=argparse.SUPPRESS)
    ap.add_argument("--hidden", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--result", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    models = [measure(h, a.steps, a.probe_interval) for h in (0, 256)]
    worst = max(m["overhead_at_default_interval"] for m in models)
    result = {"benchmark": "train_stats_overhead", "default_interval": DEFAULT_INTERVAL, "workers": 2,
              "accumulation": [2, 2], "local_batch": 16, "models": models, "worst_overhead": worst,
              "target": TARGET, "pass": worst <= TARGET, "load_avg_1m": os.getloadavg()[0], "time": time.time()}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    path = Path(a.out) / "train_stats_overhead.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps({"worst_overhead": worst, "pass": worst <= TARGET,
                      "per_model": {m["model"]: round(m["overhead_at_default_interval"], 5) for m in models}}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
