"""What the elastic context knows of the loader and the model a script built, named by shape.

`ElasticDataLoader` (data.py) and `ElasticDataParallel` (parallel.py) register themselves on the context
(`ctx.loader`, `ctx.model`) and read each other through it; the context checkpoints both. Declaring that
interface here, with the micro-batch record they hand each other, lets the three modules depend on this one
instead of on each other (no import cycle between runtime, data and parallel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from elastisched.train.adaptive import StepTiming


@dataclass(frozen=True, slots=True)
class MicroInfo:
    """What the gradient machinery needs to know about the micro-batch just handed out."""

    scale: float  # n_micro / n_step: turns a mean loss into this micro-batch's share of the step mean
    last: bool  # last micro-batch of this rank in this step: optimizer.step() really steps
    parity: int  # global micro-batch index mod 2 (JABAS halves)
    n: int  # samples in this micro-batch
    n_step: int  # samples in this step over all ranks
    measure: bool  # gradient statistics are taken in this step


class LoaderHandle(Protocol):
    """The elastic data loader, as the context and the model see it."""

    @property
    def micro(self) -> MicroInfo | None: ...
    @property
    def base_batch(self) -> int: ...
    @property
    def global_batch(self) -> int: ...
    @property
    def local_batch(self) -> int: ...
    def state_dict(self) -> dict[str, Any]: ...


class ModelHandle(Protocol):
    """The elastic data-parallel model, as the context and the loader see it."""

    @property
    def synced(self) -> bool: ...
    @property
    def fresh_stats(self) -> Any: ...
    def reset_timer(self) -> None: ...
    def begin_step(self) -> None: ...
    def sync(self, micro: MicroInfo) -> None: ...
    def timing(self) -> StepTiming | None: ...
    def checkpoint_state(self) -> dict[str, Any]: ...
