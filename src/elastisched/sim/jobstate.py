"""Mutable state of one simulated job and its analytic progress.

Between two events a running job's configuration is fixed, so its progress is piecewise linear: constant
goodput within an epoch (the gradient statistics change per epoch), a new rate after each epoch boundary.
`advance` integrates exactly over the boundaries and `finish_time` predicts the completion instant, so the
simulator never steps time in small increments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from elastisched.core.types import NO_ALLOCATION, Allocation, JobPhase, JobSpec, JobView
from elastisched.models.application import Application, BatchConfig

INF = float("inf")


@dataclass(slots=True, eq=False)
class SimJob:
    spec: JobSpec
    app: Application
    bounds: list[float]  # progress at the end of each epoch (scaled by work_scale), bounds[0] = 0
    allocation: Allocation = NO_ALLOCATION
    gpu_type: str = ""
    shape: tuple[int, ...] = ()  # GPUs per node of the placement
    cfg: BatchConfig | None = None
    progress: float = 0.0
    samples: float = 0.0  # training samples processed (restart time excluded)
    samples_per_s: float = 0.0  # samples/s of the current configuration (0 when not running)
    epoch: int = 0
    restart_until: float = 0.0
    attained: float = 0.0
    run_time: float = 0.0
    updated: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    last_resize: float | None = None
    launches: int = 0
    preemptions: int = 0
    version: int = 0  # bumps on every allocation change; stale completion events are ignored
    rates: np.ndarray | None = None  # progress/s per epoch for the current config
    observed: dict[int, float] = field(default_factory=dict)  # GPUs -> samples/s measured
    gpu_seconds_by_type: dict[str, float] = field(default_factory=dict)
    view: JobView | None = None
    _bounds_np: np.ndarray | None = None

    @property
    def bounds_arr(self) -> np.ndarray:
        if self._bounds_np is None:
            self._bounds_np = np.asarray(self.bounds, dtype=float)
        return self._bounds_np

    @property
    def total(self) -> float:
        return self.bounds[-1]

    @property
    def gpus(self) -> int:
        return self.allocation.gpus

    def rate(self, epoch: int) -> float:
        if self.rates is None:
            assert self.cfg is not None
            t_iter = self.app.iteration_time(self.gpu_type, self.shape, self.cfg)
            self.rates = self.app.efficiency.gains(self.cfg.global_batch) / t_iter
        return float(self.rates[min(epoch, len(self.rates) - 1)])

    def advance(self, t: float, finishing: bool = False) -> None:
        """Bring progress and accounting up to time `t` (`finishing`: `t` is the completion instant)."""
        dt = t - self.updated
        if dt <= 0:
            return
        g = self.allocation.gpus
        if g:
            self.attained += dt * g
            self.run_time += dt
            self.gpu_seconds_by_type[self.gpu_type] = self.gpu_seconds_by_type.get(self.gpu_type, 0.0) + dt * g
            self.samples += self.samples_per_s * max(0.0, t - max(self.updated, self.restart_until))
            if finishing:
                self.progress, self.epoch = self.total, len(self.bounds) - 1
                self.updated = t
                self.view = None
                return
            now = max(self.updated, min(t, self.restart_until))
            while now < t and self.epoch < len(self.bounds) - 1:
                r = self.rate(self.epoch)
                nxt = self.bounds[self.epoch + 1]
                need = (nxt - self.progress) / r
                if now + need <= t:
                    self.progress = nxt
                    self.epoch += 1
                    now += need
                else:
                    self.progress += r * (t - now)
                    now = t
        self.updated = t
        self.view = None

    def finish_time(self) -> float:
        """When the job completes if nothing changes (INF when not running)."""
        if not self.allocation.gpus:
            return INF
        now = max(self.updated, self.restart_until)
        e = self.epoch
        last = len(self.bounds) - 1
        if e >= last:
            return now
        self.rate(e)
        assert self.rates is not None
        work = np.diff(self.bounds_arr[e:])
        work[0] = self.bounds_arr[e + 1] - self.progress
        return now + float(np.sum(work / self.rates[e:last]))

    def phase(self, now: float) -> JobPhase:
        if self.end_time is not None:
            return JobPhase.SUCCEEDED
        if not self.allocation.gpus:
            return JobPhase.PENDING
        return JobPhase.RESTARTING if now < self.restart_until else JobPhase.RUNNING

    def make_view(self, now: float) -> JobView:
        if self.view is None:
            self.view = JobView(
                spec=self.spec, phase=self.phase(now), allocation=self.allocation, progress=self.progress,
                total_work=self.total, epoch=self.epoch, attained_service=self.attained, run_time=self.run_time,
                updated_at=self.updated, start_time=self.start_time, last_resize_time=self.last_resize,
                num_restarts=max(self.launches - 1, 0), batch_size=self.cfg.global_batch if self.cfg else 0,
                observed_throughput=MappingProxyType(dict(self.observed)), samples_done=self.samples)
        return self.view
