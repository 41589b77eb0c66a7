"""Frozen value types shared by every policy, the engine, the simulator and the live service.

Policies see the cluster only through these objects (DESIGN.md "Interfaces"): a `ClusterSnapshot` goes in,
a `Decision` comes out. Everything is immutable so that a policy cannot mutate engine state by accident and
so that the same snapshot can be replayed for debugging or determinism checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import chain
from types import MappingProxyType
from typing import Any

from elastisched.core.frozen import quick_init
from elastisched.core.nodes import NodeSet, node_set

JobId = str
NodeId = str

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return _EMPTY


class Pool(StrEnum):
    """Which cluster a node belongs to: the training cluster, or an inference server on loan (Lyra)."""

    TRAIN = "train"
    LOANABLE = "loanable"


class PendingReason(StrEnum):
    """Why a job is not running: one vocabulary for `Decision.reasons`, the store, `ls`, the API, the dashboard
    and `jobs.csv` (Slurm's reason codes where one fits). A StrEnum, so it compares equal to its text."""

    PRIORITY = "Priority"  # waits behind jobs of higher priority (the default when a policy gives none)
    RESOURCES = "Resources"  # not enough free GPUs (of a type it may use) now
    PLACEMENT = "Placement"  # enough GPUs in total, but not on nodes that fit its shape
    NOT_SELECTED = "NotSelected"  # an elastic search (ONES, Pollux, Sia) chose other jobs this round
    THROTTLED = "Throttled"  # rate limit on schedule changes (ONES's δ clock)
    GPU_TYPE = "GpuType"  # the GPUs offered are of a type the job may not use
    NO_PROFILE = "NoProfile"  # the policy needs a performance model the job's application lacks
    INFEASIBLE = "Infeasible"  # can never fit the cluster as it is now (more GPUs / a type it lacks)
    PREEMPTED = "Preempted"  # stopped by the scheduler (checkpointed), queued again
    HELD = "Held"  # suspended by its user
    RESIZE_PENDING = "ResizePending"  # an admin resize that does not fit yet


class JobPhase(StrEnum):
    """Life cycle (AdaptDL phases plus Slurm's RESIZING and SUSPENDED): the one vocabulary of job states, for
    views, the service's store, `ls`, the API and `jobs.csv`."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"  # paying the restart cost after a launch / resize; no progress
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SUSPENDED = "SUSPENDED"  # stopped with a checkpoint (preempted, reclaimed or held); queued again unless held


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a user asked for. Immutable for the job's life.

    `num_gpus` and `batch_size` are the request as written in the trace. `min_gpus..max_gpus` bound what an
    elastic policy may give; an inelastic job has `min_gpus == max_gpus == num_gpus`. `work_scale` multiplies
    the application's total work (1.0 = the application's full training run, e.g. cifar10's 100 epochs);
    trace-derived jobs set it so that the job takes its traced duration at its requested size.
    `attrs` carries format-specific fields (ONES: lr, max_lr, patience, target_acc, ...).
    """

    job_id: JobId
    submit_time: float
    application: str
    num_gpus: int
    batch_size: int
    min_gpus: int = 1
    max_gpus: int | None = None
    elastic: bool = False
    gpu_types: tuple[str, ...] = ()
    work_scale: float = 1.0
    duration: float | None = None
    category: str | None = None
    attrs: Mapping[str, Any] = field(default_factory=_empty, compare=False)

    @property
    def gpu_cap(self) -> int:
        """Most GPUs the job may ever hold."""
        return self.max_gpus if self.max_gpus is not None else self.num_gpus

    def batch_for(self, alloc: Allocation) -> int:
        """The global batch `alloc` runs at: its own when it sets one, else the job's (both bodies, one rule)."""
        return alloc.batch_size or self.batch_size


@quick_init
@dataclass(frozen=True, slots=True)
class Allocation:
    """Desired state of one job.

    Either `placement` is given (node → GPUs), or it is left open and `num_gpus` (optionally restricted to
    `gpu_type`) tells the placer how many GPUs to find. `batch_size` None = the job's own batch size.
    """

    placement: tuple[tuple[NodeId, int], ...] = ()
    num_gpus: int = 0
    gpu_type: str | None = None
    batch_size: int | None = None
    local_batch: int | None = None
    accumulation: Mapping[NodeId, int] | None = None
    gpus: int = field(init=False, repr=False, compare=False)  # derived: GPUs placed, or asked for when open

    def __post_init__(self) -> None:
        p = self.placement  # (one node, the common case, without a generator)
        object.__setattr__(self, "gpus", (p[0][1] if len(p) == 1 else sum(g for _, g in p)) if p else self.num_gpus)

    @property
    def is_open(self) -> bool:
        """True when the placer still has to choose nodes."""
        return not self.placement and self.num_gpus > 0

    @property
    def nodes(self) -> tuple[NodeId, ...]:
        return tuple(n for n, _ in self.placement)

    def same_gpus(self, other: Allocation) -> bool:
        """Whether `other` runs on exactly these GPUs (`same_gpus` below: the one rule of "same GPUs?")."""
        return same_gpus(self.placement, other.placement)


def canonical_placement(placement: Iterable[tuple[NodeId, int]]) -> tuple[tuple[NodeId, int], ...]:
    """A placement's canonical form: GPUs per node, each node once, in node-id order. The stored order of
    `Allocation.placement` is kept as given (it is the order GPUs were placed in, which outputs record);
    comparisons go through this form, so the order and splitting of entries never change an answer."""
    merged: dict[NodeId, int] = {}
    for n, g in placement:
        merged[n] = merged.get(n, 0) + g
    return tuple(sorted((n, g) for n, g in merged.items() if g))


def same_gpus(a: Sequence[tuple[NodeId, int]], b: Sequence[tuple[NodeId, int]]) -> bool:
    """THE "same GPUs?" rule, for allocations, the engine's diff, the policies and the service: the same GPUs
    on the same nodes, whatever the order (or splitting) of the entries."""
    return a == b or canonical_placement(a) == canonical_placement(b)


NO_ALLOCATION = Allocation()


@dataclass(frozen=True, slots=True)
class NodeView:
    node_id: NodeId
    gpu_type: str
    num_gpus: int
    pool: Pool = Pool.TRAIN
    index: int = 0  # stable order of the node in the cluster; the placer breaks ties by it


@quick_init
@dataclass(frozen=True, slots=True)
class JobView:
    """A job as the engine sees it now. Engine-owned statistics live here, not in policies.

    `progress` and `total_work` are in reference-batch steps (Pollux `progress` units); `epoch` counts
    finished epochs. `observed_throughput` maps a GPU count to the samples/s measured while the job ran at
    that size (what an online policy such as ONES may learn from without seeing the model). `samples_done`
    counts the samples the job really processed (at a larger batch it processes more samples per unit of
    `progress`, which is statistically-efficiency-adjusted).
    """

    spec: JobSpec
    phase: JobPhase
    allocation: Allocation
    progress: float = 0.0
    total_work: float = 1.0
    epoch: int = 0
    attained_service: float = 0.0  # GPU-seconds held up to `updated_at` (restarts included)
    run_time: float = 0.0  # wall seconds with GPUs held, up to `updated_at`
    updated_at: float = 0.0
    start_time: float | None = None
    last_resize_time: float | None = None
    num_restarts: int = 0
    batch_size: int = 0  # current global batch (0 when not running)
    observed_throughput: Mapping[int, float] = field(default_factory=_empty, compare=False)
    samples_done: float = 0.0  # training samples actually processed, up to `updated_at` (restarts excluded)
    # this job's own performance model (a `models.application.Application`), None when its application has no
    # profile: the policy then uses its model-free fallback for this job alone (AdaptDL: a speedup fn per job)
    model: Any = field(default=None, compare=False)
    # gradient statistics the job measured itself (live: its hints), (|E g|², tr(Σ) per sample); None when it
    # reported none (the simulator: the model's per-epoch statistics stand in). Pollux's efficiency reads them.
    grad_stats: tuple[float, float] | None = None
    # the work the job declared, in `total_work`'s units (its epochs or steps as the user submitted them): what an
    # honest policy plans with; None when it declared no length. `total_work` is the truth that ends the job; the
    # simulator may make this a noisy estimate of it (`sim.length_estimate`), the live service takes the spec's.
    declared_work: float | None = None

    @property
    def job_id(self) -> JobId:
        return self.spec.job_id

    @property
    def gpus(self) -> int:
        return self.allocation.gpus

    @property
    def is_running(self) -> bool:
        return self.allocation.gpus > 0

    def attained(self, now: float) -> float:
        """GPU-seconds held up to `now` (views of running jobs are refreshed lazily)."""
        return self.attained_service + max(0.0, now - self.updated_at) * self.allocation.gpus

    @property
    def remaining_fraction(self) -> float:
        return max(0.0, 1.0 - self.progress / self.total_work) if self.total_work > 0 else 0.0


@quick_init
@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything a policy may look at in one round.

    `jobs` holds every active (submitted, unfinished) job in submission order. It is read-only and valid for
    the round: a policy must not keep it (the simulator reuses its storage to stay O(changes) per round).
    `running`, `free` (free GPUs per type), `node_used` (GPUs in use per node, in `nodes` order) and `pending`
    (a function giving the jobs without GPUs, in submission order, computed on demand) are engine-owned
    aggregates a backend may pass so that policies and the placer need not recompute them from `jobs`; when
    absent they are derived.
    `reclaim_demand` is the number of loanable (inference) servers that must be returned now (Lyra); the
    policy answers with `Decision.reclaim`. `changed` and `serial` (the simulator's) let a policy stay O(changes)
    across rounds without rereading every job.
    """

    now: float
    nodes: tuple[NodeView, ...]
    jobs: Mapping[JobId, JobView]
    reclaim_demand: int = 0
    running: Mapping[JobId, JobView] | None = None
    free: Mapping[str, int] | None = None
    node_used: Sequence[int] | None = None
    pending: Callable[[], Mapping[JobId, JobView]] | None = None
    # the jobs whose view is not the one the body's previous snapshot held (arrived, or changed), in the order the
    # body made them, and this snapshot's number (1, 2, ... per run): a policy that keeps per-job state across
    # rounds updates it from these alone, and reads every job again when a number is skipped or `changed` is None
    # (a body that does not track changes: every job may have changed)
    changed: Sequence[JobId] | None = None
    serial: int = 0

    def job(self, job_id: JobId) -> JobView:
        return self.jobs[job_id]

    def running_jobs(self) -> Mapping[JobId, JobView]:
        """Jobs holding GPUs now."""
        if self.running is not None:
            return self.running
        return {jid: j for jid, j in self.jobs.items() if j.allocation.gpus}

    def pending_jobs(self) -> Mapping[JobId, JobView]:
        """Jobs not holding GPUs now, in submission order (the order of `jobs`)."""
        if self.pending is not None:
            return self.pending()
        running = self.running_jobs()
        return {jid: j for jid, j in self.jobs.items() if jid not in running}

    def free_by_type(self) -> dict[str, int]:
        """Free GPUs per type now (a fresh dict the caller may modify)."""
        free = self.free
        if free is not None:  # (a read-only proxy's `copy` copies the dict under it, at a fifth of `dict(proxy)`)
            return free.copy() if type(free) is MappingProxyType else dict(free)  # type: ignore[attr-defined]
        out = dict(self.node_set.capacity)
        types = self.node_set.gpu_type
        for j in self.running_jobs().values():
            for n, g in j.allocation.placement:
                if n in types:
                    out[types[n]] -= g
        return out

    @property
    def node_set(self) -> NodeSet:
        """Positions, types and capacity of `nodes`, built once per node tuple (`core.nodes`)."""
        return node_set(self.nodes)

    @property
    def total_gpus(self) -> int:
        return self.node_set.total_gpus

    def capacity_by_type(self) -> dict[str, int]:
        """GPUs per type (a fresh dict the caller may modify); cached per node set."""
        return dict(self.node_set.capacity)


class KeptAllocations(Mapping[JobId, Allocation]):
    """Allocations in which every running job keeps the very allocation it holds (those of `running`, in its
    order) except the `released` ones, followed by `added`: allocations of jobs that do not run now, or of
    released ones that move. A policy that changes few jobs a round (FIFO never releases any; Tiresias
    preempts a few) builds its decision this way in O(changes) instead of copying every running job's
    allocation each round, and the placer, seeing the snapshot's own `running`, skips the unchanged jobs.
    Like the snapshot it was built from, it is valid for the round only (it reads `running`'s views);
    `released` must name running jobs only, each once."""

    __slots__ = ("added", "released", "running")

    def __init__(self, running: Mapping[JobId, JobView], added: Mapping[JobId, Allocation],
                 released: Sequence[JobId] = ()) -> None:
        self.running = running
        self.added = added
        self.released = released

    def _kept(self, job_id: object) -> bool:
        return job_id in self.running and (not self.released or job_id not in self.released)

    def __getitem__(self, job_id: JobId) -> Allocation:
        a = self.added.get(job_id)
        if a is not None:
            return a
        if self.released and job_id in self.released:
            raise KeyError(job_id)
        return self.running[job_id].allocation

    def get(self, job_id: JobId, default: Any = None) -> Any:
        a = self.added.get(job_id)
        if a is not None:
            return a
        if self.released and job_id in self.released:
            return default
        v = self.running.get(job_id)
        return v.allocation if v is not None else default

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.added or self._kept(job_id)

    def __iter__(self) -> Iterator[JobId]:
        if not self.released:
            return chain(self.running, self.added)
        gone = set(self.released)
        return chain((j for j in self.running if j not in gone), self.added)

    def __len__(self) -> int:
        return len(self.running) - len(self.released) + len(self.added)

    def __repr__(self) -> str:
        return f"KeptAllocations({dict(self)!r})"


@quick_init
@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy wants. `allocations` covers every job it runs; an absent job gets 0 GPUs.

    The order of `allocations` matters: the placer fills open placements in that order. A pending job
    without an entry in `reasons` waits behind jobs of higher priority ("Priority", as in Slurm).
    `next_round_at` is a hint: the policy promises its decision does not change before that time unless an
    event (arrival, completion, node change) happens, which lets the simulator skip idle rounds.
    """

    allocations: Mapping[JobId, Allocation]
    reasons: Mapping[JobId, PendingReason] = field(default_factory=_empty)
    reclaim: tuple[NodeId, ...] = ()
    next_round_at: float | None = None
