"""In-process checkpoint round trip (world of one): position, batch state and RNG streams continue."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

import elastisched.train as et
import elastisched.train.runtime as rt
from elastisched.train.contract import LaunchEnv


def _setup(ck: Path, accum: int) -> tuple[et.ElasticContext, et.ElasticDataLoader, torch.optim.Optimizer]:
    rt._CURRENT = None
    ctx = et.init(env=LaunchEnv(checkpoint_dir=str(ck), accum_steps=accum, local_batch=12 // accum,
                                global_batch=12), checkpoint_interval=2, stats_interval=1)
    torch.manual_seed(123)  # setup after init() draws random numbers; the restored stream must not care
    net = nn.Linear(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    ds = TensorDataset(torch.arange(60), torch.randn(60, 3), torch.randn(60, 1))
    loader = et.ElasticDataLoader(ds, batch_size=12)
    loader.autoscale_batch_size(48, rule="similarity")
    et.ElasticDataParallel(net, opt)
    return ctx, loader, opt


def test_resume_in_process(tmp_path: Path, inproc_ctx: None) -> None:
    ctx, loader, opt = _setup(tmp_path, accum=2)
    seen: list[int] = []
    after_save = None
    for _ in ctx.remaining_epochs_until(1):
        for idx, x, y in loader:
            if ctx.step == 2 and after_save is None:  # checkpoint of step 2 was written just now
                after_save = torch.rand(1)
                chosen = loader.current_batch_size
                break
            seen += idx.tolist()
            nn.functional.mse_loss(ctx.model(x), y).backward()
            opt.step()
        break
    assert ctx.step == 2 and len(seen) == 24
    ck = rt.load_latest(tmp_path)
    assert ck is not None and ck["step"] == 2 and ck["loader"]["consumed"] == 24

    ctx2, loader2, opt2 = _setup(tmp_path, accum=3)  # "another world": accumulation 3 instead of 2
    assert (ctx2.step, ctx2.epoch, loader2.consumed) == (2, 0, 24)
    assert loader2.current_batch_size == chosen  # the adaptive batch survives the restart
    rest: list[int] = []
    first = True
    for _ in ctx2.remaining_epochs_until(1):
        for idx, x, y in loader2:
            if first:
                assert torch.equal(torch.rand(1), after_save)  # RNG stream continues exactly
                first = False
            rest += idx.tolist()
            nn.functional.mse_loss(ctx2.model(x), y).backward()
            opt2.step()
    assert sorted(seen + rest) == list(range(60)) and ctx2.epoch == 1
