"""Elastic least-squares regression on a generated data set with a known optimum.

Run:  elastisched launch --nproc 2 --accum 1,3 --local-batch 32 --checkpoint-dir /tmp/ck \
          examples/linreg_elastic.py --epochs 5 --log /tmp/ck/loss.jsonl
Send the launcher SIGTERM at any time and launch again with another --nproc: training resumes at the
same epoch and sample. The closed-form optimum (numpy lstsq) is printed next to the trained model.

Compared with a plain PyTorch script, the elastic version changes the lines marked `# elastic`.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

import elastisched.train as et


def make_data(n: int, d: int, noise: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """y = X w* + b* + ε; returns X, y and the least-squares optimum [w; b] of this very sample."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    y = x @ w + 0.5 + noise * rng.standard_normal(n).astype(np.float32)
    opt, *_ = np.linalg.lstsq(np.c_[x.astype(np.float64), np.ones(n)], y.astype(np.float64), rcond=None)
    return torch.from_numpy(x), torch.from_numpy(y).unsqueeze(1), opt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64, help="base global batch the lr is tuned for")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--noise", type=float, default=0.5)
    ap.add_argument("--hidden", type=int, default=0, help="0 = linear model; >0 = one-hidden-layer MLP")
    ap.add_argument("--autoscale", choices=["none", "similarity", "gns"], default="none")
    ap.add_argument("--max-batch", type=int, default=1024)
    ap.add_argument("--stats-interval", type=int, default=100)
    ap.add_argument("--checkpoint-interval", type=int, default=0, help="also checkpoint every N steps (0: only "
                    "on SIGTERM); bounds the work a lost node costs")
    ap.add_argument("--log", default=None, help="rank 0 appends one JSON line per step")
    a = ap.parse_args()

    torch.manual_seed(0)
    x, y, opt = make_data(a.n, a.dim, a.noise)  # before init(): a warm-started resize overlaps it
    ctx = et.init(stats_interval=a.stats_interval, checkpoint_interval=a.checkpoint_interval or None)  # elastic
    if a.hidden:
        net: nn.Module = nn.Sequential(nn.Linear(a.dim, a.hidden), nn.Tanh(), nn.Linear(a.hidden, 1))
    else:
        net = nn.Linear(a.dim, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=max(a.epochs // 2, 1), gamma=0.5)
    loader = et.ElasticDataLoader(TensorDataset(x, y), batch_size=a.batch_size, shuffle=True)  # elastic
    if a.autoscale != "none":
        loader.autoscale_batch_size(a.max_batch, rule=a.autoscale)  # elastic
    model = et.ElasticDataParallel(net, optimizer, sched, scaling_rule="sqrt")  # elastic (moves net to ctx.device)
    # Kept open for the whole run (flushed per line; the library flushes open files on a resize exit).
    log = open(a.log, "a", encoding="utf-8") if a.log and ctx.rank == 0 else None  # noqa: SIM115
    loss_fn = nn.MSELoss()

    for epoch in ctx.remaining_epochs_until(a.epochs):  # elastic
        for xb, yb in loader:
            xb, yb = xb.to(ctx.device), yb.to(ctx.device)  # elastic: this worker's GPU, or the CPU
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            if log is not None and not loader.accumulating:
                log.write(json.dumps({"step": ctx.step + 1, "epoch": epoch, "loss": loss.item(),
                                      "world": ctx.world_size, "batch": loader.current_batch_size,
                                      "gen": ctx.env.generation, "t": time.time()}) + "\n")
                log.flush()
        sched.step()
    if ctx.rank == 0 and not a.hidden:
        with torch.no_grad():
            got = np.r_[net.weight.cpu().numpy().ravel(), net.bias.cpu().numpy()]
            full = float(loss_fn(net(x.to(ctx.device)), y.to(ctx.device)))
        print(json.dumps({"final_mse": full, "optimum_distance": float(np.linalg.norm(got - opt)),
                          "batch": loader.current_batch_size, "steps": ctx.step}))


if __name__ == "__main__":
    main()
