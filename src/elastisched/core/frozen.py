"""`quick_init`: the same constructor for a frozen, slotted dataclass, at a quarter of its cost.

A frozen dataclass's generated `__init__` writes each field through `object.__setattr__` (its own `__setattr__`
refuses), a call per field: a `JobView` (18 fields) took longer to make than most of what a simulated round
does with it, and a replay makes millions of views, allocations and actions. `quick_init` gives the class an
`__init__` with the very same signature and defaults that moves the new instance to an unfrozen twin class with
the same slots (the layouts are identical, so Python allows assigning `__class__`), stores the fields as plain
attribute writes, and moves it back: the instance, its type, equality, hashing and frozenness are as before.
A subclass instance takes the dataclass's own `__init__` (its type must not change).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Replace `cls.__init__` (a frozen `@dataclass(slots=True)`'s) with its fast equivalent; returns `cls`."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not cls.__dataclass_params__.frozen or "__slots__" not in cls.__dict__:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: quick_init is for frozen dataclasses with slots")
    if any(f.kw_only for f in fields) or any(isinstance(f.type, dataclasses.InitVar) for f in fields):
        raise TypeError(f"{cls.__name__}: keyword-only fields and InitVars are not supported")
    twin = type(f"_{cls.__name__}Init", (), {"__slots__": cls.__slots__, "__module__": cls.__module__})
    names = [f.name for f in fields if f.init]
    env: dict[str, Any] = {"_cls": cls, "_twin": twin, "_dataclass_init": cls.__init__,
                           "_set": object.__setattr__, "_MISSING": dataclasses.MISSING}
    params, lines = ["self"], []
    for f in fields:
        if not f.init:  # (set as the dataclass's own `__init__` does, when it has a default)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                raise TypeError(f"{cls.__name__}.{f.name}: a field outside __init__ with a default")
            continue
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            lines.append(f"if {f.name} is _MISSING: {f.name} = _f_{f.name}()")
        else:
            params.append(f.name)
    lines += ["_set(self, '__class__', _twin)", *(f"self.{n} = {n}" for n in names), "self.__class__ = _cls"]
    if hasattr(cls, "__post_init__"):
        lines.append("self.__post_init__()")
    src = (f"def __init__({', '.join(params)}):\n"
           f"    if type(self) is not _cls:\n        return _dataclass_init({', '.join(['self', *names])})\n"
           + "".join(f"    {line}\n" for line in lines))
    exec(src, env)  # (the source is built above from the class's own field names)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__wrapped__ = cls.__init__  # type: ignore[attr-defined]  # (its signature, and the original for tests)
    cls.__init__ = init  # type: ignore[misc]
    return cls
