"""The one IIDP solver interface: a solved configuration, the solver protocol and the shared choice of (LBS, W).

IIDP (digest §1, §2(b)): every GPU runs the same local batch ``b``; GPU g runs ``m_g`` virtual stream workers
with ``a_g`` gradient-accumulation steps, ``W = Σ_g m_g (a_g + 1)`` decoupled workers, ``GBS = b·W``; the
iteration time is the slowest GPU's.  :class:`IIDPSolver` is implemented by
``models.iidp.pollux.PolluxIIDP`` — Pollux/Sia per-GPU-type step/sync profiles (``m = 1``: multi-stream gains
are not profiled there), the model the ``jabas`` policy, the engine's rate rule and the experiment use.  It
returns :class:`IIDPConfig` and picks (LBS, W) with :func:`choose_config`, so all three agree on one solver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

__all__ = ["IIDPConfig", "IIDPSolver", "ServerSpec", "UnitAssignment", "choose_config", "directional_workers"]


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """A server as the IIDP solver sees it: one GPU type, its TFLOPS (the price model) and bandwidths in bytes/s."""

    name: str
    gpu_type: str
    tflops: float
    num_gpus: int
    intra_bandwidth: float
    inter_bandwidth: float

    def with_gpus(self, num_gpus: int) -> ServerSpec:
        """The same server restricted to ``num_gpus`` GPUs (a candidate allocation may use part of it)."""
        if not 0 < num_gpus <= self.num_gpus:
            raise ValueError(f"num_gpus={num_gpus} outside 1..{self.num_gpus} for server {self.name!r}")
        return replace(self, num_gpus=num_gpus)


@dataclass(frozen=True, slots=True)
class UnitAssignment:
    """(m, a) of one allocation unit: GPUs ``first_gpu .. first_gpu+num_gpus-1`` of ``server``."""

    server: str
    first_gpu: int
    num_gpus: int
    m: int
    a: int
    iter_time: float

    @property
    def workers(self) -> int:
        return self.num_gpus * self.m * (self.a + 1)


@dataclass(frozen=True, slots=True)
class IIDPConfig:
    """A solved IIDP configuration; ``iter_time`` = slowest unit (s), throughput in samples/s."""

    lbs: int
    num_workers: int
    iter_time: float
    units: tuple[UnitAssignment, ...]

    @property
    def gbs(self) -> int:
        return self.lbs * self.num_workers

    @property
    def throughput(self) -> float:
        return self.gbs / self.iter_time

    def gpu_configs(self) -> tuple[tuple[str, int, int, int], ...]:
        """``(server, gpu index, m, a)`` for every GPU, in unit order (= rank order of the release)."""
        return tuple((u.server, u.first_gpu + i, u.m, u.a) for u in self.units for i in range(u.num_gpus))

    def accumulation(self) -> dict[str, int]:
        """GA steps per server (max over its units), for ``Allocation.accumulation``."""
        out: dict[str, int] = {}
        for u in self.units:
            out[u.server] = max(out.get(u.server, 0), u.a)
        return out


class IIDPSolver(Protocol):
    """An IIDP configuration solver on one job's performance model."""

    unit_gpus: int

    def lbs_options(self, cluster: Sequence[ServerSpec], upper: int | None) -> Sequence[int]:
        """Local batches usable on ``cluster`` (with GBS upper bound ``upper``)."""
        ...

    def solve(self, cluster: Sequence[ServerSpec], lbs: int, num_workers: int) -> IIDPConfig | None:
        """Exact min-bottleneck configuration for a fixed (LBS, W); None if infeasible."""
        ...

    def best(self, cluster: Sequence[ServerSpec], target: float, current: int | None = None,
             upper: int | None = None) -> IIDPConfig | None:
        """Highest-throughput configuration for a GBS near ``target`` (see :func:`choose_config`)."""
        ...


def directional_workers(
    target: float, lbs: int, current_gbs: int, *, unit_gpus: int = 2, strict: bool = True
) -> int | None:
    """W for a GBS move from ``current_gbs`` toward ``target``, rounded to a multiple of the unit size
    in the direction of the move; ``None`` if the rounded GBS does not move (``strict``: must strictly
    increase/decrease as in ``solve_placement``; else may stay, as in ``estimate_epoch_time``)."""
    w = round(target / lbs)
    if target > current_gbs:
        w += (-w) % unit_gpus
        moved = lbs * w > current_gbs if strict else lbs * w >= current_gbs
    else:
        w -= w % unit_gpus
        moved = lbs * w < current_gbs if strict else lbs * w <= current_gbs
    return w if moved else None


def choose_config(
    solve: Callable[[int, int], IIDPConfig | None], lbs_options: Sequence[int], num_gpus: int, target: float,
    current: int | None = None, *, upper: int | None = None, unit_gpus: int = 1, tolerance: float | None = None,
) -> IIDPConfig | None:
    """The (LBS, W) choice shared by every solver.

    With ``current`` (and ``target != current``): the release's ``solve_placement`` rule — per LBS,
    ``W = round(target/b)`` rounded to the unit toward the move and the GBS must move strictly.  Without: the
    nearest multiple of the unit (ties down).  ``W ≥ #GPUs`` and ``b·W ≤ upper`` always.  The highest
    throughput wins (the release); with ``tolerance``, among GBS within ``±tolerance`` of the target first,
    else the nearest GBS (our guard for a coarse LBS grid, where the only strict move can be far away).
    """
    found: list[tuple[bool, float, float, IIDPConfig]] = []
    need = num_gpus + (-num_gpus) % unit_gpus
    for b in lbs_options:
        if current is not None and target != current:
            w = directional_workers(target, b, current, unit_gpus=unit_gpus)
            if w is None:
                continue
        else:
            q = target / (b * unit_gpus)
            lo = int(q) * unit_gpus
            w = lo if q - int(q) <= 0.5 else lo + unit_gpus
            w = max(w, need)
        if w < num_gpus or (upper is not None and b * w > upper):
            continue
        cfg = solve(b, w)
        if cfg is None:
            continue
        dev = abs(cfg.gbs - target) / target if target > 0 else 0.0
        far = tolerance is not None and dev > tolerance
        found.append((far, dev if far else 0.0, -cfg.throughput, cfg))
    return min(found, key=lambda f: f[:3])[3] if found else None
