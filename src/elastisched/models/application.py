"""One training application (model + data set) with measured throughput and convergence.

Work is counted in reference-batch steps (the `progress` column of the Pollux validation files): epoch e
ends when progress reaches `epoch_end[e]` = min over profiled batch sizes of that file's progress after e
epochs (artifact `get_progress`). A job of `work_scale` k must make k · epoch_end[max_epochs] progress.

Batch configuration for a fixed global batch B on R replicas follows the artifact's
`Job.update_local_bsz`: local = ⌈B/R⌉, accumulation a = ⌈local / max_local⌉ − 1 (at least 1 on a single
replica when B exceeds the initial batch, because the gradient statistics need two micro-batches),
micro-batch = ⌈local / (a+1)⌉, capped so the global batch stays ≤ the largest profiled batch.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from elastisched.models.efficiency import EfficiencyModel
from elastisched.models.profiles import AppProfile
from elastisched.models.throughput import ThroughputModel

#: Training length of each Pollux application (artifact `simulator/applications.py::APPLICATIONS`).
POLLUX_EPOCHS: dict[str, int] = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80,
                                 "yolov3": 50}
#: Per-app overrides of the largest micro-batch (artifact: yolov3 max_local_bsz=8, GPU memory).
MAX_LOCAL_BSZ: dict[str, int] = {"yolov3": 8}
DEFAULT_RESTART_COST = 30.0  # seconds; artifact `Job.reallocate` rescale_time


def packed_shape(num_gpus: int, per_node: int) -> tuple[int, ...]:
    """GPUs per node when `num_gpus` are packed onto nodes of `per_node` GPUs (fullest first)."""
    full, rest = divmod(num_gpus, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


@dataclass(frozen=True, slots=True)
class BatchConfig:
    micro_batch: int  # per-replica batch of one forward/backward pass
    accumulation: int  # extra accumulation steps (0 = none), artifact `accum_steps`
    num_replicas: int

    @property
    def global_batch(self) -> int:
        return self.num_replicas * self.micro_batch * (self.accumulation + 1)


@dataclass
class Application:
    profile: AppProfile
    max_epochs: int
    restart_cost: float = DEFAULT_RESTART_COST
    max_local_bsz_override: int | None = None
    _models: dict[str, ThroughputModel] = field(default_factory=dict, repr=False)
    # memos of `batch_config` and `data_parallel_rates`, which a long replay asks for the same few sizes each time
    _configs: dict[tuple[int, float, int], BatchConfig] = field(default_factory=dict, repr=False, compare=False)
    _rates: dict[tuple[str, tuple[int, ...], BatchConfig], tuple[float, np.ndarray]] = field(
        default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        v = self.profile.validation_columns  # numpy columns: no pandas on the simulator's path
        self.max_epochs = min(self.max_epochs, min(len(c["progress"]) for c in v.values()))
        self.efficiency = EfficiencyModel(v, self.max_epochs)
        self.init_batch_size = min(v)
        self.max_batch_size = max(v)
        prog = np.stack([c["progress"][: self.max_epochs] for c in v.values()])
        self.epoch_end = np.concatenate([[0.0], prog.min(axis=0)])  # epoch_end[e] = progress after e epochs
        self._ends: list[float] = self.epoch_end.tolist()  # the same, for `epoch_at`'s bisection
        its = np.stack([c["iteration"][: self.max_epochs] for c in v.values()])
        self._iterations = its
        any_bsz = next(iter(self.profile.throughput.values())).placement_columns["local_bsz"]
        self.min_local_bsz = int(any_bsz.min())
        self.max_local_bsz = self.max_local_bsz_override or int(any_bsz.max())

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.profile.throughput)

    @property
    def total_work(self) -> float:
        return float(self.epoch_end[-1])

    def model(self, gpu_type: str) -> ThroughputModel:
        m = self._models.get(gpu_type)
        if m is None:
            if gpu_type not in self.profile.throughput:
                raise KeyError(f"application {self.name!r} has no profile for GPU type {gpu_type!r}; "
                               f"profiled: {', '.join(self.profile.throughput)}")
            m = self._models[gpu_type] = ThroughputModel(self.profile.throughput[gpu_type])
        return m

    def batch_config(self, num_replicas: int, batch_size: int) -> BatchConfig:
        """Fixed-global-batch configuration (artifact `update_local_bsz` with a target batch)."""
        key = (num_replicas, batch_size, self.max_local_bsz)
        cfg = self._configs.get(key)
        if cfg is None:
            if len(self._configs) > 100_000:  # (a policy that tries every batch size: keep the memo bounded)
                self._configs.clear()
            cfg = self._configs[key] = self._batch_config(num_replicas, batch_size)
        return cfg

    def _batch_config(self, num_replicas: int, batch_size: int) -> BatchConfig:
        local = math.ceil(batch_size / num_replicas - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        if num_replicas == 1 and batch_size > self.init_batch_size:
            accum = max(1, accum)
        micro = math.ceil(local / (accum + 1) - 1e-8)
        micro = max(1, min(micro, int(self.max_batch_size / (num_replicas * (accum + 1)))))
        return BatchConfig(micro, accum, num_replicas)

    def iteration_time(self, gpu_type: str, placement: tuple[int, ...], cfg: BatchConfig) -> float:
        """Seconds per optimizer step: one synchronised step plus `accumulation` local passes."""
        step, sync = self.model(gpu_type).step_sync(tuple(placement), float(cfg.micro_batch))
        return step + (step - sync) * cfg.accumulation

    def iteration_times(self, gpu_type: str, placements: Iterable[tuple[int, ...]], cfg: BatchConfig
                        ) -> Iterator[float]:
        """`iteration_time` of each placement in turn (`ThroughputModel.step_syncs`: the same numbers, the
        queries that many placements share put once)."""
        a = cfg.accumulation
        for step, sync in self.model(gpu_type).step_syncs(placements, float(cfg.micro_batch)):
            yield step + (step - sync) * a

    def data_parallel_rates(self, gpu_type: str, shape: tuple[int, ...], cfg: BatchConfig) -> tuple[float, np.ndarray]:
        """(samples/s, progress/s per epoch) of data-parallel training on `shape` GPUs of `gpu_type` (memoised;
        the array is shared: read it, never write it)."""
        key = (gpu_type, shape, cfg)
        r = self._rates.get(key)
        if r is None:
            if len(self._rates) > 100_000:
                self._rates.clear()
            t_iter = self.iteration_time(gpu_type, shape, cfg)
            gains = self.efficiency.gains(cfg.global_batch) / t_iter
            gains.flags.writeable = False
            r = self._rates[key] = (cfg.global_batch / t_iter, gains)
        return r

    def throughput(self, gpu_type: str, placement: tuple[int, ...], cfg: BatchConfig) -> float:
        """Samples per second."""
        return cfg.global_batch / self.iteration_time(gpu_type, placement, cfg)

    def goodput(self, gpu_type: str, placement: tuple[int, ...], cfg: BatchConfig, epoch: int) -> float:
        """Reference steps of progress per second."""
        return self.efficiency.gain(cfg.global_batch, epoch) / self.iteration_time(gpu_type, placement, cfg)

    def run_seconds(self, gpu_type: str, num_gpus: int, batch_size: int, per_node: int) -> float:
        """Seconds for the whole application (work_scale 1) at a fixed packed size and batch, restarts excluded."""
        cfg = self.batch_config(num_gpus, batch_size)
        t_iter = self.iteration_time(gpu_type, packed_shape(num_gpus, per_node), cfg)
        gains = self.efficiency.gains(cfg.global_batch)[: self.max_epochs]
        return float(np.sum(np.diff(self.epoch_end) / gains) * t_iter)

    def iterations(self, batch_size: float, epoch: int) -> float:
        """Optimizer steps done after `epoch` epochs at this batch (artifact `get_iteration`)."""
        e = min(max(epoch, 0), self.max_epochs - 1)
        batches = np.array(list(self.profile.validation_columns), dtype=float)
        return float(np.interp(batch_size, batches, self._iterations[:, e]))

    def epoch_at(self, progress: float, work_scale: float = 1.0) -> int:
        """Finished epochs at this progress: how many scaled epoch ends are ≤ it, minus one. A bisection over
        the ends, each scaled by the same float product numpy would take, gives numpy's `searchsorted` answer
        without building the scaled array (this runs for every job in every round); numpy answers the cases
        where the two could differ (a scale that is negative, infinite or NaN)."""
        if 0.0 <= work_scale < math.inf:
            e = bisect.bisect_right(self._ends, progress, key=lambda end: end * work_scale) - 1
        else:
            e = int(np.searchsorted(self.epoch_end * work_scale, progress, side="right")) - 1
        return min(max(e, 0), self.max_epochs)
