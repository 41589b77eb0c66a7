"""Engine-owned bookkeeping of one job — the ONE object both bodies keep per job (DESIGN.md "Who owns what").

The simulator and the live service each hold a `JobState` per active job and call the same methods at the
same moments (`advance` before any change and when a round needs fresh progress, `apply` when an action
takes effect), so attained service, progress, samples and restarts follow one rule in both:
- attained service: GPU-seconds held, restarts included; run time: seconds with GPUs held;
- progress (reference-batch steps, Pollux units) integrates the model's goodput outside the restart window
  that follows every launch or resize; a mixed-type placement runs at the pace of its slowest GPU type
  (synchronous data parallelism: every step waits for the slowest worker), `running_type`;
- an IIDP allocation (same local batch on every GPU, per-node accumulation: JABAS) runs at the rate of
  `models.iidp_pollux.iidp_iteration_time` instead (its slowest node's step with its accumulation);
- a job whose application has no profile (`app` None) accrues attained service only; its progress stays 0
  until measured progress (hints) arrives through `measured`.

Between two events a running job's configuration is fixed, so its progress is piecewise linear: constant
goodput within an epoch (the gradient statistics change per epoch), a new rate after each epoch boundary.
`advance` integrates exactly over the boundaries and `finish_time` predicts the completion instant, so the
simulator never steps time in small increments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from elastisched.core.enums import ChangeKind
from elastisched.core.types import NO_ALLOCATION, Allocation, JobPhase, JobSpec, JobView
from elastisched.engine.epochs import Bounds, scaled_bounds, whole_run
from elastisched.models.application import Application, BatchConfig
from elastisched.models.iidp.pollux import iidp_iteration_time

INF = float("inf")
_NONE_OBSERVED: Mapping[int, float] = MappingProxyType({})  # the view of a job that has measured no throughput
# A change of batch size / local batch / accumulation on the very same GPUs is applied in place by the
# elastic runtime (AdaptDL; the training library's adaptive batch): no restart, by default no stall.
RECONFIGURE_COST = 0.0


def same_placement(old: Allocation, new: Allocation) -> bool:
    """Whether `new` runs on exactly the GPUs of `old` (both running; order of nodes ignored)."""
    return bool(old.placement) and old.same_gpus(new)


def change_kind(old: Allocation, new: Allocation) -> ChangeKind:
    """THE rule of what a change of allocation costs, for both bodies: "stop" (no GPUs), "launch" (from none),
    "reconfigure" (batch / accumulation only, same GPUs: in place, not a restart), "resize" (keeps some GPUs)
    or "restart" (none kept)."""
    if not new.placement:
        return ChangeKind.STOP
    if not old.placement:
        return ChangeKind.LAUNCH
    if same_placement(old, new):
        return ChangeKind.RECONFIGURE
    return ChangeKind.RESIZE if keeps_gpus(old, new) else ChangeKind.RESTART


def keeps_gpus(old: Allocation, new: Allocation) -> bool:
    """Whether a change from `old` to `new` keeps some GPUs: a running job shares at least one node with its
    new placement (GPUs on a node are interchangeable in the model, so overlap is counted per node)."""
    if not old.placement or not new.placement:
        return False
    have = dict(old.placement)
    return any(min(have.get(n, 0), g) > 0 for n, g in new.placement)


def running_type(app: Application, types: set[str] | frozenset[str]) -> str:
    """GPU type whose pace a placement over `types` runs at: the slowest for this application."""
    if len(types) == 1:
        return next(iter(types))
    one = app.batch_config(1, app.init_batch_size)
    return min(sorted(types), key=lambda t: app.throughput(t, (1,), one))


def allocation_rates(app: Application, gpu_type: str, shape: tuple[int, ...], cfg: BatchConfig,
                     alloc: Allocation | None = None, node_types: Mapping[str, str] | None = None
                     ) -> tuple[float, np.ndarray]:
    """(samples/s, progress/s per epoch) of a running allocation: the one place a rate comes from the models.
    An IIDP allocation (`local_batch`, per-node `accumulation` and `batch_size` all set) runs at the IIDP rate
    rule of `models.iidp_pollux`; any other at the data-parallel rule on `gpu_type` (the slowest)."""
    if (alloc is not None and node_types is not None and alloc.local_batch and alloc.accumulation is not None
            and alloc.batch_size):
        t_iter = iidp_iteration_time(app, node_types, alloc.placement, alloc.local_batch, alloc.accumulation)
        return alloc.batch_size / t_iter, app.efficiency.gains(alloc.batch_size) / t_iter
    return app.data_parallel_rates(gpu_type, shape, cfg)


def new_state(spec: JobSpec, app: Application | None, now: float,
              shared: dict[tuple[str, float], Bounds] | None = None) -> JobState:
    """The state of a job that has just arrived (progress bounds scaled by its `work_scale`). `shared`: bounds
    already made for the same application and scale, read-only and shared by such jobs (a long trace repeats
    its jobs' lengths: a million-job replay has some 30,000 distinct ones); what is made here is added to it."""
    # Python floats (the same products as numpy's, element by element): `advance` does scalar arithmetic on them
    if app is None:
        return JobState(spec, app, [0.0, 1.0], updated=now)
    if shared is None:
        arr = app.epoch_end * spec.work_scale
        bounds = arr.tolist()
        return JobState(spec, app, bounds, updated=now, declared=bounds[-1], _bounds_np=arr)
    bounds, arr, work = scaled_bounds(app.epoch_end, spec.application, spec.work_scale, shared)
    return JobState(spec, app, bounds, updated=now, declared=bounds[-1], _bounds_np=arr, _epoch_work=work)


@dataclass(slots=True, eq=False)
class JobState:
    spec: JobSpec
    app: Application | None  # None: no profile; attained service only
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
    restart_time: float = 0.0  # seconds with GPUs held inside a restart / resize window (no progress)
    restart_gpu_seconds: float = 0.0
    batch_seconds: float = 0.0  # global batch x seconds held with GPUs: the mean batch a policy ran the job at
    # progress done per (GPU type, shape, epoch): the JCT decomposition (sim.metrics) prices it afterwards
    work_by_config: dict[tuple[str, tuple[int, ...], int], float] = field(default_factory=dict)
    # the whole epochs a job finishes in one go, as a range instead of an entry each (the log's last entries):
    # (GPU type, shape, first epoch, last epoch + 1, progress before them); `sim.table.WorkLog` expands it
    work_tail: tuple[str, tuple[int, ...], int, int, float] | None = None
    updated: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    failed: bool = False  # ended by a failure, not by finishing its work
    modelled: bool = False  # the model covers the running configuration (it has a profile of that GPU type)
    reason: str | None = None  # last pending reason a decision gave it (a `PendingReason` value)
    last_resize: float | None = None
    launches: int = 0
    preemptions: int = 0
    version: int = 0  # bumps on every allocation change; stale completion events are ignored
    rates: np.ndarray | None = None  # progress/s per epoch for the current config
    observed: dict[int, float] = field(default_factory=dict)  # GPUs -> samples/s measured
    grad_stats: tuple[float, float] | None = None  # (|E g|², tr(Σ) per sample) the job measured (live hints)
    declared: float | None = None  # the work the job declared (`JobView.declared_work`); None: no length given
    gpu_seconds_by_type: dict[str, float] = field(default_factory=dict)
    view: JobView | None = None
    _observed_view: Mapping[int, float] | None = None  # `observed` as views show it (None: to be made)
    _node_types: Mapping[str, str] | None = None  # GPU type of each node of the allocation
    _bounds_np: np.ndarray | None = None
    _epoch_work: np.ndarray | None = None

    @property
    def bounds_arr(self) -> np.ndarray:
        if self._bounds_np is None:
            self._bounds_np = np.asarray(self.bounds, dtype=float)
        return self._bounds_np

    @property
    def epoch_work(self) -> np.ndarray:
        """Each epoch's work, `bounds[e + 1] - bounds[e]` (read-only; made once per job)."""
        if self._epoch_work is None:
            b = self.bounds_arr
            self._epoch_work = b[1:] - b[:-1]  # np.diff, without its wrapper
            self._epoch_work.flags.writeable = False
        return self._epoch_work

    @property
    def total(self) -> float:
        return self.bounds[-1]

    @property
    def gpus(self) -> int:
        return self.allocation.gpus

    def rate(self, epoch: int) -> float:
        if self.rates is None:
            assert self.cfg is not None and self.app is not None
            self.rates = allocation_rates(self.app, self.gpu_type, self.shape, self.cfg, self.allocation,
                                          self._node_types)[1]
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
            by_type = self.gpu_seconds_by_type
            by_type[self.gpu_type] = by_type.get(self.gpu_type, 0.0) + dt * g
            # max(0.0, t - max(updated, restart_until)) and max(0.0, min(t, restart_until) - updated), written out
            updated, until = self.updated, self.restart_until
            run = t - (until if until > updated else updated)
            self.samples += self.samples_per_s * (run if run > 0.0 else 0.0)
            stall = (until if until < t else t) - updated
            stall = stall if stall > 0.0 else 0.0
            self.restart_time += stall
            self.restart_gpu_seconds += stall * g
            if self.cfg is not None:
                self.batch_seconds += dt * self.cfg.global_batch
            # no model of this configuration: progress only from measurements
            if self.modelled:
                if finishing:
                    self._finish_epochs()
                else:
                    self._run_epochs(t)
        self.updated = t
        self.view = None

    def _finish_epochs(self) -> None:
        """Log the work of every epoch left (the job completes now) and set progress to the total."""
        # the work log's update written out in both loops: a long job crosses many epochs per call
        wbc, gt, sh, bounds = self.work_by_config, self.gpu_type, self.shape, self.bounds
        last = len(bounds) - 1
        progress = self.progress
        e0 = self.epoch
        stop = last
        # a job that ran undisturbed finishes every epoch here: the epochs after the first are kept as
        # a range (`work_tail`), unless one has an entry already (measured progress went back an epoch)
        if last - e0 > 1 and self.work_tail is None and (not wbc or not any(
                k[0] == gt and k[1] == sh and e0 < k[2] < last for k in wbc)):
            stop = e0 + 1
            self.work_tail = (gt, sh, e0 + 1, last, progress)
        for e in range(e0, stop):  # the first epoch may have been begun in this configuration already
            key = (gt, sh, e)
            wbc[key] = wbc.get(key, 0.0) + (bounds[e + 1] - max(progress, bounds[e]))
        self.progress, self.epoch = self.total, last

    def _run_epochs(self, t: float) -> None:
        """Progress at each epoch's modelled rate from the end of the restart window (or the last update) to
        `t`, logging the work done per epoch."""
        wbc, gt, sh, bounds = self.work_by_config, self.gpu_type, self.shape, self.bounds
        last = len(bounds) - 1
        now = max(self.updated, min(t, self.restart_until))
        if now < t and self.epoch < last:
            self.rate(self.epoch)  # fills self.rates
            rates = self.rates
            assert rates is not None
            nr = len(rates) - 1
            epoch, progress = self.epoch, self.progress
            while now < t and epoch < last:
                r = float(rates[min(epoch, nr)])
                nxt = bounds[epoch + 1]
                need = (nxt - progress) / r if r else INF  # a zero rate never gets there (as numpy's inf)
                key = (gt, sh, epoch)
                if now + need <= t:
                    wbc[key] = wbc.get(key, 0.0) + (nxt - progress)
                    progress = nxt
                    epoch += 1
                    now += need
                else:
                    wbc[key] = wbc.get(key, 0.0) + r * (t - now)
                    progress += r * (t - now)
                    now = t
            self.epoch, self.progress = epoch, progress

    def tail_entries(self) -> tuple[tuple[str, tuple[int, ...]], np.ndarray, np.ndarray] | None:
        """`work_tail` as log entries: ((GPU type, shape), its epochs, the work of each), the very differences
        the finishing loop of `advance` takes for the epochs before it; None without a tail."""
        if self.work_tail is None:
            return None
        gt, sh, first, last, progress = self.work_tail
        b = self.bounds_arr
        return (gt, sh), np.arange(first, last, dtype=np.int64), b[first + 1:last + 1] - np.maximum(progress,
                                                                                                 b[first:last])

    def apply(self, alloc: Allocation, now: float, node_types: Mapping[str, str], restart_cost: float,
              resize_cost: float | None = None, reconfigure_cost: float | None = RECONFIGURE_COST) -> None:
        """Make `alloc` the job's allocation from `now` (call `advance(now)` first). `node_types`: GPU type of
        each of its nodes. A launch or change costs `restart_cost` without progress; `resize_cost`, when given,
        is the cost of a change that keeps some of its GPUs (an in-memory resize); `reconfigure_cost` (default
        `RECONFIGURE_COST`, 0 s) that of a new batch / IIDP configuration on the very same GPUs (applied in
        place, JABAS and AdaptDL; not counted as a restart); None charges it as a restart (the old rule)."""
        old = self.allocation
        self.version += 1
        self.view = None
        self.rates = None
        if not alloc.placement:
            self.allocation, self.cfg, self.shape, self.samples_per_s = NO_ALLOCATION, None, (), 0.0
            self.modelled = False
            return
        app = self.app
        self._node_types = node_types
        if len(node_types) == 1:  # (one node, the common case: its type, without a set)
            (t,) = node_types.values()
            known = app is not None and t in app.profile.throughput
            self.gpu_type = t
        else:
            types = set(node_types.values())
            known = app is not None and all(t in app.profile.throughput for t in types)
            self.gpu_type = running_type(app, types) if known and app is not None else min(types)
        pl = alloc.placement
        self.shape = (pl[0][1],) if len(pl) == 1 else tuple([g for _, g in pl])
        gpus = alloc.gpus
        batch = self.spec.batch_for(alloc)
        self.allocation = alloc
        kind = change_kind(old, alloc)
        if reconfigure_cost is not None and kind is ChangeKind.RECONFIGURE:
            self.restart_until = max(self.restart_until, now + reconfigure_cost)
            self.launches -= 1  # not a restart (undone by the += 1 below)
        elif resize_cost is not None and kind is ChangeKind.RESIZE:
            # in-memory resize: survivors keep running state; a launch still in progress is not cut short
            self.restart_until = max(self.restart_until, now + resize_cost)
        else:
            self.restart_until = now + restart_cost
        self.launches += 1
        if self.start_time is None:
            self.start_time = now
        else:
            self.last_resize = now
        self.modelled = known
        self.samples_per_s = 0.0
        if app is None:
            self.cfg = None
            return
        self.cfg = app.batch_config(gpus, batch)
        if self.modelled:
            self.samples_per_s, self.rates = allocation_rates(app, self.gpu_type, self.shape, self.cfg, alloc,
                                                              node_types)
            self.observed[gpus] = self.samples_per_s
            self._observed_view = None

    def measured(self, steps: float, batch: int, t: float) -> None:
        """Measured progress (optimizer steps at global batch `batch`, at time `t`) replaces the estimate."""
        if self.app is None:
            return
        epoch = self.app.epoch_at(self.progress, self.spec.work_scale)
        self.progress = min(self.total, steps * self.app.efficiency.gain(batch, epoch))
        self.epoch = min(self.app.epoch_at(self.progress, self.spec.work_scale), len(self.bounds) - 1)
        self.updated = max(self.updated, t)
        self.view = None

    def finish_time(self) -> float:
        """When the job completes if nothing changes (INF when not running or without a model)."""
        if not self.allocation.gpus or not self.modelled:
            return INF
        now = max(self.updated, self.restart_until)
        e = self.epoch
        last = len(self.bounds) - 1
        if e >= last:
            return now
        rates = self.rates
        if rates is None:
            self.rate(e)  # (fills self.rates)
            rates = self.rates
            assert rates is not None
        if self.progress == self.bounds[e]:  # at an epoch's start (a fresh job): each epoch's whole work
            if e == 0 and len(rates) == last and not rates.flags.writeable:  # (a memoised rate table)
                return now + whole_run(self.epoch_work, rates)
            work = self.epoch_work if e == 0 else self.epoch_work[e:]
        else:
            b = self.bounds_arr
            work = b[e + 1:] - b[e:-1]  # np.diff, without its wrapper
            work[0] = b[e + 1] - self.progress
        if e or len(rates) != last:  # (the whole of both, a fresh job's: no slice)
            rates = rates[e:last]
        return now + float(np.add.reduce(work / rates))  # (ndarray.sum, without its wrapper)

    def phase(self, now: float) -> JobPhase:
        if self.end_time is not None:
            return JobPhase.FAILED if self.failed else JobPhase.SUCCEEDED
        if not self.allocation.gpus:
            return JobPhase.PENDING
        return JobPhase.RESTARTING if now < self.restart_until else JobPhase.RUNNING

    def make_view(self, now: float) -> JobView:
        view = self.view
        if view is None:
            observed = self._observed_view  # (a copy of `observed`, made again only after it changed)
            if observed is None:
                observed = self._observed_view = (MappingProxyType(dict(self.observed)) if self.observed
                                                  else _NONE_OBSERVED)
            cfg = self.cfg
            # JobView's fields in their order (positional: a dozen and a half keywords cost more than the view)
            view = self.view = JobView(
                self.spec, self.phase(now), self.allocation, self.progress, self.bounds[-1], self.epoch,
                self.attained, self.run_time, self.updated, self.start_time, self.last_resize,
                self.launches - 1 if self.launches > 1 else 0, cfg.global_batch if cfg is not None else 0, observed,
                self.samples, self.app, self.grad_stats, self.declared)
        return view
