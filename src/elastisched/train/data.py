"""ElasticDataLoader: a position in the epoch that survives any change of world size or batch size.

The epoch is one seeded permutation of the data set, independent of the world size. A step takes the
next `global_batch` indices of that permutation; rank r gets a contiguous share proportional to its
capacity local_batch × accum_r and splits it into micro-batches of local_batch. The only position state
is (epoch, samples consumed by completed steps), so a job restarted at any world size continues with
exactly the samples not yet seen in that epoch — none skipped, none twice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset, default_collate

from elastisched.train.adaptive import BatchRule, StepTiming, batch_rule
from elastisched.train.handles import MicroInfo
from elastisched.train.runtime import ElasticContext, current_context


def apportion(total: int, weights: Sequence[float], minimum: int = 0) -> list[int]:
    """Integers proportional to `weights` summing to `total` (largest remainder), each >= minimum."""
    if total < minimum * len(weights):
        raise ValueError(f"cannot give {len(weights)} parts at least {minimum} each out of {total}")
    wsum = float(sum(weights))
    ideal = [total * w / wsum for w in weights]
    out = [max(minimum, math.floor(x)) for x in ideal]
    while sum(out) < total:
        i = max(range(len(out)), key=lambda k: (ideal[k] - out[k], -k))
        out[i] += 1
    while sum(out) > total:
        i = max((k for k in range(len(out)) if out[k] > minimum), key=lambda k: (out[k] - ideal[k], k))
        out[i] -= 1
    return out


def partition_step(indices: Sequence[int], accum: Sequence[int], local_batch: int) -> list[list[list[int]]]:
    """Split one step's indices into micro-batches per rank: result[rank][micro] = indices.

    A full step (len == local_batch × Σaccum) gives every rank exactly accum_r full micro-batches. The
    short last step of an epoch is shared in proportion to capacity; empty micro-batches are dropped.
    """
    cap = local_batch * sum(accum)
    if len(indices) > cap:
        raise ValueError(f"step of {len(indices)} samples exceeds capacity {cap}")
    quota = apportion(len(indices), accum) if len(indices) < cap else [local_batch * a for a in accum]
    out: list[list[list[int]]] = []
    pos = 0
    for q in quota:
        share = list(indices[pos:pos + q])
        pos += q
        out.append([share[i:i + local_batch] for i in range(0, len(share), local_batch)])
    return out


class ElasticDataLoader:
    """Drop-in for DataLoader in the training loop: yields this rank's micro-batches.

    `batch_size` is the global batch the user tuned the learning rate for (the base batch B0). The launch
    contract (ELASTISCHED_GLOBAL_BATCH / LOCAL_BATCH / ACCUM_STEPS) overrides the actual configuration.
    Call `optimizer.step()` after every micro-batch; ElasticDataParallel turns all but the last of a step
    into accumulation.
    """

    def __init__(self, dataset: Dataset[Any], batch_size: int, shuffle: bool = True, seed: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None, *, ctx: ElasticContext | None = None,
                 train: bool = True) -> None:
        self.ctx = ctx or current_context()
        self.dataset = dataset
        self.n = len(dataset)  # type: ignore[arg-type]
        self.base_batch = int(batch_size)
        self.shuffle, self.seed, self.train = shuffle, seed, train
        self.collate_fn = collate_fn or default_collate
        self.consumed = 0
        self.rule: BatchRule | None = None
        self.bounds = (self.base_batch, self.base_batch)
        self.local_bounds: tuple[int, int] | None = None
        self.history: list[tuple[int, int]] = []
        self.scheduler_batch = 0  # the last batch the scheduler set in place (0: none; then its rule is off)
        self.micro: MicroInfo | None = None
        env = self.ctx.env
        self.weights = list(self.ctx.accum)  # IIDP relative speeds: initial accumulation per rank
        self.global_batch = env.global_batch or self.base_batch
        self.accum = list(self.ctx.accum)
        self.local_batch = env.local_batch or math.ceil(self.global_batch / sum(self.accum))
        if self.local_batch * sum(self.accum) < self.global_batch:
            raise ValueError(f"local batch {self.local_batch} × Σaccum {sum(self.accum)} is below the "
                             f"global batch {self.global_batch}")
        self._saved: dict[str, Any] | None = None
        if train:
            self.ctx.loader = self
            ck = self.ctx.checkpoint()
            if ck is not None and "loader" in ck:
                self._saved = ck["loader"]
                self.consumed = int(self._saved["consumed"])
                self.history = [tuple(h) for h in self._saved.get("history", [])]  # type: ignore[misc]
                self.scheduler_batch = int(self._saved.get("scheduler_batch") or 0)
                self.ctx.noise.load_state_dict(self._saved["noise"])

    # ------------------------------------------------------------------ configuration
    @property
    def current_batch_size(self) -> int:
        """The global batch now in use (what the adaptive rule chose, or what the scheduler set)."""
        return self.global_batch

    @property
    def accumulation_steps(self) -> int:
        """This rank's micro-batches per step."""
        return self.accum[self.ctx.rank]

    @property
    def accumulating(self) -> bool:
        """True while the last yielded micro-batch is not the last of this rank's step."""
        return self.micro is not None and not self.micro.last

    def autoscale_batch_size(self, max_batch_size: int, local_bsz_bounds: tuple[int, int] | None = None,
                             rule: str | BatchRule = "similarity", min_batch_size: int | None = None,
                             interval: int | None = None) -> None:
        """Let the library adapt the global batch within [min_batch_size, max_batch_size] every
        `interval` steps (JABAS 'similarity' or Pollux 'gns'). A restored job keeps its chosen batch."""
        self.rule = batch_rule(rule)
        self.bounds = (min_batch_size or self.base_batch, max_batch_size)
        self.local_bounds = local_bsz_bounds
        if interval is not None:
            self.ctx.stats_interval = interval
        if self._saved is not None and self._saved.get("global_batch") != self.global_batch:
            self.configure(int(self._saved["global_batch"]))

    def configure(self, target: int) -> int:
        """Apply a new global batch exactly: same local batch, accumulation re-apportioned by the ranks'
        IIDP weights (their initial accumulation), ceil(target / local batch) micro-batches in all.

        When target is not a multiple of the local batch, shares stay proportional to capacity and a
        rank's last micro-batch is short (the gradient is still exact). If fewer than one micro-batch per
        rank would be needed, the local batch is lowered within `local_bsz_bounds`.
        """
        w = self.ctx.world_size
        b = self.local_batch
        lo_b, hi_b = self.local_bounds or (1, max(b, 1))
        if target < b * w:
            b = max(lo_b, min(hi_b, max(target // w, 1)))
        total = max(math.ceil(target / b), w)
        self.local_batch = b
        self.accum = apportion(total, self.weights, minimum=1)
        self.global_batch = max(int(target), 1)
        return self.global_batch

    # ------------------------------------------------------------------ iteration
    def _permutation(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator()
        g.manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def _fetch(self, idx: list[int]) -> Any:
        ds = self.dataset
        if isinstance(ds, TensorDataset):
            t = torch.as_tensor(idx, dtype=torch.long)
            return [x[t] for x in ds.tensors]
        getitems = getattr(ds, "__getitems__", None)
        items = getitems(idx) if getitems is not None else [ds[i] for i in idx]
        return self.collate_fn(items)

    def __len__(self) -> int:
        """Micro-batches this rank yields in a full epoch at the current configuration (approximate)."""
        return math.ceil(self.n / self.global_batch) * self.accumulation_steps

    def __iter__(self) -> Iterator[Any]:
        if not self.train:
            yield from self._iter_eval()
            return
        ctx = self.ctx
        ctx.restore_rng()
        model = ctx.model
        epoch = ctx.epoch
        perm = self._permutation(epoch)
        if model is not None:
            model.reset_timer()
        while self.consumed < self.n:
            step_idx = perm[self.consumed:self.consumed + self.global_batch]
            parts = partition_step(step_idx, self.accum, self.local_batch)
            measure = ctx.stats_interval > 0 and (ctx.step + 1) % ctx.stats_interval == 0
            if measure and sum(map(len, parts)) == 1 and len(step_idx) > 1:
                # one micro-batch in all (one worker, no accumulation): a statistics step takes it as two halves,
                # the same gradient by the averaging rule, so Pollux's noise scale is measured for such jobs too
                parts = [[q[0][:len(q[0]) // 2], q[0][len(q[0]) // 2:]] if q else [] for q in parts]
            mine = parts[ctx.rank]
            offset = sum(self.accum[:ctx.rank])
            n_step = len(step_idx)
            if model is not None:
                model.begin_step()
            for j, idx in enumerate(mine):
                self.micro = MicroInfo(len(idx) / n_step, j == len(mine) - 1, (offset + j) % 2, len(idx),
                                       n_step, measure)
                yield self._fetch(idx)
            self.micro = None
            if model is not None:
                if not mine:  # a short last step left this rank nothing: still take part in the reduce
                    model.sync(MicroInfo(0.0, True, 0, 0, n_step, measure))
                if not model.synced:
                    raise RuntimeError("call optimizer.step() after every micro-batch of ElasticDataLoader")
            self.consumed += n_step
            ctx.step += 1
            done = self.consumed >= self.n
            if done:
                ctx.epoch = epoch + 1
                self.consumed = 0
            if ctx.batch_target and ctx.batch_target != self.global_batch:
                self._scheduler_set(ctx.batch_target, model.timing() if model is not None else None)
            if model is not None and model.fresh_stats is not None:
                self._adapt(model.fresh_stats, model.timing())
            elif model is not None and measure:
                self._report_progress(model.timing())  # one micro-batch per step: no two-halves statistic
            ctx.after_step()
            if done:
                return

    def _iter_eval(self) -> Iterator[Any]:
        """Evaluation: each rank reads its contiguous slice once, in order, at the local batch."""
        per = math.ceil(self.n / self.ctx.world_size)
        idx = list(range(self.ctx.rank * per, min(self.n, (self.ctx.rank + 1) * per)))
        b = self.local_batch
        for i in range(0, len(idx), b):
            yield self._fetch(idx[i:i + b])

    def _adapt(self, stats: Any, timing: StepTiming | None) -> None:
        """Run the batch rule on fresh statistics (identical on every rank) and report to the hints file."""
        ctx = self.ctx
        old = self.global_batch
        if self.rule is not None and not self.scheduler_batch:  # the scheduler's choice wins over the rule
            lo, hi = self.bounds
            target = self.rule.propose(old, ctx.noise, stats, timing, lo, hi, self.base_batch)
            if target != old:
                self.configure(target)
                self.history.append((ctx.step, self.global_batch))
        noise = ctx.noise
        ctx.write_hints({
            "globalBatchSize": self.global_batch, "previousBatchSize": old, "localBatchSize": self.local_batch,
            "accumulation": self.accum, "initBatchSize": self.base_batch,
            "maxBatchSize": self.bounds[1], "localBszBounds": self.local_bounds,
            "rule": None if self.rule is None else self.rule.name,
            "similarity": stats.similarity, "grad_sqr": noise.grad_sqr(),
            "grad_var": noise.grad_var() / self.base_batch, "noise_scale": noise.noise_scale(),
            "gradParams": {"sqr": noise.grad_sqr(), "var": noise.grad_var() / self.base_batch},
            "step_time": None if timing is None else timing.step_time,
            "sync_time": None if timing is None else timing.sync_time,
            "throughput": None if timing is None or timing.step_time <= 0 else
            timing.global_batch / timing.step_time,
            "wall": time.time(),
        })

    def _scheduler_set(self, target: int, timing: StepTiming | None) -> None:
        """The scheduler chose another global batch for these GPUs (an in-place reconfigure, no restart):
        applied at this step boundary on every rank alike, recorded in the history and reported at once."""
        old = self.global_batch
        self.scheduler_batch = target
        self.configure(target)
        self.history.append((self.ctx.step, self.global_batch))
        self._report_progress(timing, previousBatchSize=old, source="scheduler")

    def _report_progress(self, timing: StepTiming | None, **extra: Any) -> None:
        """A hint without gradient statistics (a step of one micro-batch has no two halves): step, batch and
        throughput still reach the service, which measures progress and speed from them."""
        self.ctx.write_hints({
            "globalBatchSize": self.global_batch, "localBatchSize": self.local_batch, "accumulation": self.accum,
            "initBatchSize": self.base_batch, "rule": None if self.rule is None else self.rule.name,
            "step_time": None if timing is None else timing.step_time,
            "sync_time": None if timing is None else timing.sync_time,
            "throughput": None if timing is None or timing.step_time <= 0 else timing.global_batch / timing.step_time,
            "wall": time.time(), **extra,
        })

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self.consumed, "global_batch": self.global_batch, "local_batch": self.local_batch,
                "accum": self.accum, "base_batch": self.base_batch, "history": self.history,
                "noise": self.ctx.noise.state_dict(), "seed": self.seed, "scheduler_batch": self.scheduler_batch}
