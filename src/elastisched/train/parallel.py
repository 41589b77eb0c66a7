"""ElasticDataParallel: exact global-batch gradients with per-rank (IIDP) accumulation.

Averaging rule (why it is exact for any world size and any accumulation steps per rank):
the user's loss is the mean over a micro-batch of n_i samples, so its gradient is (1/n_i)·Σ_i ∇ℓ.
A hook on every parameter multiplies that gradient by n_i/N, where N is the number of samples of the
whole step over all ranks, before it is accumulated into .grad. After all micro-batches, each rank holds
Σ_(its samples) ∇ℓ / N; one SUM all-reduce gives Σ_(all N samples) ∇ℓ / N — the gradient of one worker
on the whole global batch, whatever the split into ranks and micro-batches (and also for the short last
step of an epoch). With loss_reduction="sum" the hook multiplies by 1/N instead.

The same all-reduce carries the stop flag (SIGTERM on any rank), the scheduler's batch target (rank 0 reads
`batch-target.json`; the sum hands it to every rank, so all switch at the same step) and, every
`stats_interval` steps, the even and odd halves of the micro-batches separately (2× the payload) for the
JABAS similarity and the Pollux noise statistics. No other collective runs during training.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from elastisched.train.adaptive import ScalingRule, StepTiming, halves_stats, scaling_rule
from elastisched.train.handles import MicroInfo
from elastisched.train.runtime import ElasticContext, current_context


def _move(module: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> nn.Module:
    """`module.to(device)`, keeping `optimizer` pointed at the module's parameters: a conversion that
    cannot happen in place (e.g. to another device kind) makes new Parameter objects."""
    before = list(module.parameters())
    module.to(device)
    moved = {id(a): b for a, b in zip(before, module.parameters(), strict=True) if a is not b}
    if moved:
        for group in optimizer.param_groups:
            group["params"] = [moved.get(id(p), p) for p in group["params"]]
        optimizer.state = defaultdict(dict, {moved.get(id(p), p): v for p, v in optimizer.state.items()})
    return module


class ElasticDataParallel(nn.Module):
    """Wraps a model and its optimizer; restores them from the job's newest checkpoint on construction.

    Use as: loss.backward(); optimizer.step() after every micro-batch of ElasticDataLoader. The patched
    optimizer steps only on a rank's last micro-batch of the step, after the all-reduce; zero_grad() is
    handled here (user calls are ignored so accumulation is never wiped).
    """

    def __init__(self, module: nn.Module, optimizer: torch.optim.Optimizer,
                 lr_scheduler: Any | None = None, scaling_rule: str | ScalingRule | None = "sqrt",
                 loss_reduction: Literal["mean", "sum"] = "mean", *, ctx: ElasticContext | None = None,
                 ema: float = 0.8) -> None:
        super().__init__()
        self.ctx = ctx or current_context()
        self.module = _move(module, optimizer, self.ctx.device)  # before the checkpoint is restored onto it
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.rule = _resolve_rule(scaling_rule)
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction={loss_reduction!r}; use 'mean' or 'sum'")
        self.loss_reduction = loss_reduction
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.numel = sum(p.numel() for p in self.params)
        self.dtype = torch.promote_types(self.params[0].dtype, torch.float32) if self.params else torch.float32
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.register_hook(self._scale_hook)
        self.synced = True
        self.fresh_stats: Any = None
        self.lr_factor = 1.0
        self._halves: list[torch.Tensor] | None = None
        self._counts = [0, 0]
        self._prev: torch.Tensor | None = None
        self._ema = ema
        self._t_last = time.perf_counter()
        self._timing: tuple[float, float, int] | None = None
        self._shared_timing: StepTiming | None = None
        ck = self.ctx.checkpoint()
        if ck is not None and "model" in ck:
            module.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            if lr_scheduler is not None and ck.get("scheduler") is not None:
                lr_scheduler.load_state_dict(ck["scheduler"])
        elif self.ctx.distributed:
            with torch.no_grad():
                for t in [*module.parameters(), *module.buffers()]:
                    dist.broadcast(t.data, src=0)
        self._user_step = optimizer.step

        def step(closure: Any = None) -> None:
            self._step(closure)

        # Keep torch's LR-scheduler bookkeeping quiet: the real step below still sets _opt_called.
        step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
        optimizer.step = step  # type: ignore[method-assign]
        optimizer.zero_grad = self._ignore_zero_grad  # type: ignore[method-assign]
        self.ctx.model = self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    # ------------------------------------------------------------------ gradient plumbing
    def _micro(self) -> MicroInfo | None:
        loader = self.ctx.loader
        return None if loader is None else loader.micro

    def _scale_hook(self, grad: torch.Tensor) -> torch.Tensor:
        micro = self._micro()
        if micro is None:
            return grad
        factor = micro.scale if self.loss_reduction == "mean" else 1.0 / micro.n_step
        return grad * factor

    def _flat(self) -> torch.Tensor:
        if not self.params:
            return torch.zeros(0, dtype=self.dtype, device=self.ctx.device)
        return torch.cat([p.grad.reshape(-1).to(self.dtype) for p in self.params])  # type: ignore[union-attr]

    def _ignore_zero_grad(self, set_to_none: bool = True) -> None:
        """Gradients are zeroed by the library after each real step; user calls would break accumulation."""

    def begin_step(self) -> None:
        self.synced = False
        self.fresh_stats = None
        self._halves = None
        self._prev = None
        self._counts = [0, 0]

    def _capture(self, micro: MicroInfo) -> None:
        """Stats step: add this micro-batch's gradient (delta of .grad) to its parity half."""
        flat = self._flat()
        if self._halves is None:
            self._halves = [torch.zeros_like(flat), torch.zeros_like(flat)]
        delta = flat if self._prev is None else flat - self._prev
        self._halves[micro.parity] += delta
        self._counts[micro.parity] += micro.n
        self._prev = flat

    def _step(self, closure: Any = None) -> None:
        micro = self._micro()
        if micro is None:
            raise RuntimeError("optimizer.step() of an ElasticDataParallel model must follow a micro-batch "
                               "of its ElasticDataLoader")
        if micro.measure:
            self._capture(micro)
        if micro.last:
            self.sync(micro)

    def sync(self, micro: MicroInfo) -> None:
        """All-reduce (gradient, stop flag[, halves, counts]), then the real optimizer step."""
        buf, sync_time = self._all_reduce(micro)
        total = self._read_measured(buf, micro) if micro.measure else self._read_plain(buf)
        off = 0
        with torch.no_grad():
            for prm in self.params:
                n = prm.numel()
                prm.grad.copy_(total[off:off + n].view_as(prm))  # type: ignore[union-attr]
                off += n
        self._optimizer_step()
        self.synced = True
        now = time.perf_counter()
        self._record(now - self._t_last, sync_time, micro.n_step)
        self._t_last = now

    def _all_reduce(self, micro: MicroInfo) -> tuple[torch.Tensor, float]:
        """One all-reduce of everything the ranks must agree on this step; (the summed buffer, seconds)."""
        ctx = self.ctx
        dev = ctx.device
        stop = 1.0 if ctx.stop_requested else 0.0
        target = float(ctx.requested_batch())  # rank 0's read of the scheduler's batch; 0 elsewhere
        if micro.measure:
            halves = self._halves or [torch.zeros(self.numel, dtype=self.dtype, device=dev)] * 2
            # Local timing rides along so that every rank sees the same mean and decides alike.
            st, sy, has = (*self._timing[:2], 1.0) if self._timing is not None else (0.0, 0.0, 0.0)
            meta = torch.tensor([stop, *self._counts, st, sy, has, target], dtype=self.dtype, device=dev)
            buf = torch.cat([halves[0], halves[1], meta])
        else:
            buf = torch.cat([self._flat(), torch.tensor([stop, target], dtype=self.dtype, device=dev)])
        t0 = time.perf_counter()
        ctx.all_reduce_(buf)
        return buf, time.perf_counter() - t0

    def _read_measured(self, buf: torch.Tensor, micro: MicroInfo) -> torch.Tensor:
        """A statistics step's reduced buffer: gradient statistics, shared timing, stop flag and batch target;
        returns the summed gradient."""
        ctx, p = self.ctx, self.numel
        even, odd = buf[:p], buf[p:2 * p]
        norm = float(micro.n_step)  # buffers hold Σ∇ℓ / N for either loss reduction
        stats = halves_stats(even * norm, odd * norm, int(buf[2 * p + 1]), int(buf[2 * p + 2]))
        w = float(ctx.world_size)
        self._shared_timing = None
        if int(buf[2 * p + 5]) == ctx.world_size and self._timing is not None:
            self._shared_timing = StepTiming(float(buf[2 * p + 3]) / w, float(buf[2 * p + 4]) / w,
                                             self._timing[2])
        if stats is not None:
            ctx.noise.update(stats)
        self.fresh_stats = stats
        ctx.stop_agreed = bool(buf[2 * p] > 0)
        ctx.batch_target = round(float(buf[2 * p + 6]))
        return even + odd

    def _read_plain(self, buf: torch.Tensor) -> torch.Tensor:
        """An ordinary step's reduced buffer: stop flag and batch target; returns the summed gradient."""
        p = self.numel
        self.ctx.stop_agreed = bool(buf[p] > 0)
        self.ctx.batch_target = round(float(buf[p + 1]))
        return buf[:p]

    def _optimizer_step(self) -> None:
        """The user's optimizer step at the learning rate scaled for the current batch, then zeroed grads."""
        loader = self.ctx.loader
        if loader is not None:
            self.lr_factor = self.rule.factor(loader.global_batch / loader.base_batch, self.ctx.noise,
                                              loader.base_batch)
        saved = [g["lr"] for g in self.optimizer.param_groups]
        for g in self.optimizer.param_groups:
            g["lr"] = g["lr"] * self.lr_factor
        try:
            self._user_step()
        finally:
            for g, lr in zip(self.optimizer.param_groups, saved, strict=True):
                g["lr"] = lr
        with torch.no_grad():
            for prm in self.params:
                prm.grad.zero_()  # type: ignore[union-attr]

    # ------------------------------------------------------------------ timing and checkpoint
    def reset_timer(self) -> None:
        self._t_last = time.perf_counter()

    def _record(self, step_time: float, sync_time: float, n_step: int) -> None:
        self.ctx.record_profile(step_time, sync_time)
        g = self.ctx.loader.global_batch if self.ctx.loader is not None else n_step
        if self._timing is None or self._timing[2] != g:
            self._timing = (step_time, sync_time, g)
        else:
            a = self._ema
            s, c, _ = self._timing
            self._timing = (a * s + (1 - a) * step_time, a * c + (1 - a) * sync_time, g)

    def timing(self) -> StepTiming | None:
        """Smoothed step and sync time at the current global batch, averaged over ranks at the last
        statistics step (identical on every rank, so batch decisions agree)."""
        return self._shared_timing

    def checkpoint_state(self) -> dict[str, Any]:
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": None if self.lr_scheduler is None else self.lr_scheduler.state_dict()}


def _resolve_rule(rule: str | ScalingRule | None) -> ScalingRule:
    return scaling_rule(rule)
