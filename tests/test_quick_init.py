"""`core.frozen.quick_init`: the fast constructor builds the very object the dataclass's own `__init__` builds
(same fields, type, equality, hash, frozenness, signature), for each class it is applied to."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from elastisched.core.events import Action, ActionKind
from elastisched.core.frozen import quick_init
from elastisched.core.types import (
    Allocation,
    ClusterSnapshot,
    Decision,
    JobPhase,
    JobSpec,
    JobView,
    NodeView,
    PendingReason,
)
from elastisched.engine.loop import RoundResult

SPEC = JobSpec("j0", 0.0, "cifar10", 2, 256)
ALLOC = Allocation((("n0", 1), ("n1", 1)), 0, "t4")
CASES: list[tuple[type, tuple[Any, ...], dict[str, Any]]] = [
    (Allocation, (), {}),
    (Allocation, (), {"num_gpus": 3, "gpu_type": "t4"}),
    (Allocation, ((("n0", 2), ("n1", 3)), 0, "t4", 128, 32, {"n0": 2}), {}),
    (JobView, (SPEC, JobPhase.PENDING, ALLOC), {}),
    (JobView, (SPEC, JobPhase.RUNNING, ALLOC, 1.5, 9.0, 2, 3.0, 4.0, 5.0, 6.0, None, 1, 256, {1: 2.0}, 7.0, None,
               (1.0, 2.0), 8.0), {}),
    (ClusterSnapshot, (1.0, (NodeView("n0", "t4", 4),), {"j0": None}), {"reclaim_demand": 2, "serial": 3}),
    (Decision, ({"j0": ALLOC},), {}),
    (Decision, ({"j0": ALLOC}, {"j1": PendingReason.RESOURCES}, ("n0",), 60.0), {}),
    (Action, (ActionKind.LAUNCH, "j0", ALLOC, Allocation()), {}),
    (RoundResult, (Decision({}), {}, (), 0.5), {}),
]


def _original(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    obj = object.__new__(cls)
    cls.__init__.__wrapped__(obj, *args, **kwargs)  # type: ignore[misc]  # the dataclass's own __init__
    return obj


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES)
def test_the_same_object_as_the_dataclass_builds(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    fast, slow = cls(*args, **kwargs), _original(cls, args, kwargs)
    assert type(fast) is cls
    names = [f.name for f in dataclasses.fields(cls)]
    assert [getattr(fast, n) for n in names] == [getattr(slow, n) for n in names]
    assert fast == slow and repr(fast) == repr(slow)
    try:
        assert hash(fast) == hash(slow)
    except TypeError:  # (a field holds a dict: neither hashes)
        with pytest.raises(TypeError):
            hash(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, names[0], None)
    assert copy.copy(fast) == fast and dataclasses.replace(fast) == fast
    if cls is Allocation or cls is Action:  # (the others hold read-only proxies, which do not pickle)
        assert pickle.loads(pickle.dumps(fast)) == fast
    assert inspect.signature(cls) == inspect.signature(cls.__init__.__wrapped__).replace(  # type: ignore[misc]
        parameters=list(inspect.signature(cls.__init__.__wrapped__).parameters.values())[1:])  # type: ignore[misc]


def test_a_subclass_keeps_its_type_and_own_fields() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Wider(Allocation):
        note: str = "x"

    w = Wider((("n0", 1),), 0, "t4", note="y")
    assert type(w) is Wider and w.gpus == 1 and w.note == "y" and w.placement == (("n0", 1),)


def test_errors_as_the_dataclass_raises_them() -> None:
    with pytest.raises(TypeError):
        JobView(SPEC)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Allocation(bogus=1)  # type: ignore[call-arg]


def test_only_for_frozen_slotted_dataclasses() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int = 0

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        a: int = 0

    for cls in (NoSlots, NotFrozen):
        with pytest.raises(TypeError):
            quick_init(cls)
