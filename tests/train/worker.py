"""Test worker: a tiny linear model whose data set carries sample indices, so tests can check exactly
which samples every step of every rank and generation used."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import elastisched.train as et


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--dim", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--stats-interval", type=int, default=100)
    ap.add_argument("--autoscale", default=None, help="similarity | gns")
    ap.add_argument("--params-out", default=None)
    ap.add_argument("--trace", default=None, help="directory for per-rank JSON-lines traces")
    a = ap.parse_args()

    ctx = et.init(stats_interval=a.stats_interval)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(a.n, a.dim, generator=g)
    y = x @ torch.arange(1.0, a.dim + 1).unsqueeze(1) + 0.3 * torch.randn(a.n, 1, generator=g)
    idx = torch.arange(a.n)
    torch.manual_seed(0)
    net = nn.Linear(a.dim, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    loader = et.ElasticDataLoader(TensorDataset(idx, x, y), batch_size=a.batch, shuffle=True, seed=7)
    if a.autoscale:
        loader.autoscale_batch_size(48, rule=a.autoscale, min_batch_size=4)
    model = et.ElasticDataParallel(net, opt, sched)
    trace = None
    if a.trace:
        Path(a.trace).mkdir(parents=True, exist_ok=True)
        trace = open(Path(a.trace) / f"g{ctx.env.generation}-r{ctx.rank}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    loss_fn = nn.MSELoss()
    for epoch in ctx.remaining_epochs_until(a.epochs):
        for ib, xb, yb in loader:
            if a.max_steps and ctx.step >= a.max_steps:
                break
            loss_fn(model(xb), yb).backward()
            opt.step()
            if trace is not None:
                rec = {"gen": ctx.env.generation, "world": ctx.world_size, "rank": ctx.rank, "epoch": epoch,
                       "step": ctx.step + 1, "idx": ib.tolist()}
                if ctx.rank == 0 and not loader.accumulating:
                    with torch.no_grad():
                        rec["loss_full"] = float(loss_fn(net(x), y))
                trace.write(json.dumps(rec) + "\n")
                trace.flush()
            if not loader.accumulating and a.sleep:
                time.sleep(a.sleep)
        if a.max_steps and ctx.step >= a.max_steps:
            break
        sched.step()
    if a.params_out and ctx.rank == 0:
        Path(a.params_out).write_text(json.dumps([p.detach().double().flatten().tolist()
                                                  for p in net.parameters()]))


if __name__ == "__main__":
    main()
