"""A policy's declared options and the policy spec a user writes: `NAME[:key=value,...]`.

Every policy declares its options (`Policy.declared_options()`): name, type, default, one-line help and the
allowed values. A built-in policy's are read from its constructor's signature (name, default, and the type
from the annotation or the default; a `Literal` alias gives the allowed values) with the help and choices the
policy writes beside them (`Policy.option_help`, `Policy.option_choices`); a plug-in policy gets the same for
free. Parameters whose type is not a plain value (a history table, a model) are Python-only and not options.

`parse_spec` turns the CLI text into a name and raw values; `resolve` checks them against the declaration and
converts them, so that `-p tiresias:bogus=1` is one line naming the bad key and listing the known ones, and a
bad value names the option, the value and what it takes. Nothing here imports a policy.
"""

from __future__ import annotations

import inspect
import math
import re
import sys
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elastisched.core.errors import ConfigError

#: the value types an option may have (a CLI text converts to one of them)
SIMPLE = {"int": int, "float": float, "str": str, "bool": bool}
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Option:
    """One declared option of a policy."""

    name: str
    type: type
    default: Any
    help: str = ""
    choices: tuple[Any, ...] = ()
    optional: bool = False  # `None` is a value (written `none` on the command line)

    @property
    def type_name(self) -> str:
        return self.type.__name__ + (" or none" if self.optional else "")

    def describe(self) -> str:
        """`name (type, default D; one of a, b)` for error messages."""
        allowed = f"; one of {', '.join(map(str, self.choices))}" if self.choices else ""
        return f"{self.name} ({self.type_name}, default {self.default!r}{allowed})"

    def convert(self, value: Any, where: str) -> Any:
        """A CLI text or a YAML/Python value as this option's type; a ConfigError naming it otherwise."""
        field = f"{where}:{self.name}"
        if self.optional and (value is None or (isinstance(value, str) and value.strip().lower() == "none")):
            return None
        out = _convert(self.type, value, field)
        if self.choices and out not in self.choices:
            raise ConfigError(field, value, f"must be one of {', '.join(map(str, self.choices))}")
        return out


def _convert(kind: type, value: Any, field: str) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if kind is bool:
            if text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise ConfigError(field, value, "must be true or false")
        if kind in (int, float):
            if not _NUMBER.fullmatch(text):
                raise ConfigError(field, value, f"must be a finite {kind.__name__} (plain digits, e.g. 360)")
            number = float(text)
            if kind is int and not number.is_integer():
                raise ConfigError(field, value, "must be a whole number")
            return int(number) if kind is int else number
        return text
    if kind is bool and isinstance(value, bool):
        return value
    if kind in (int, float) and isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or (kind is int and not float(value).is_integer()):
            raise ConfigError(field, value, f"must be a finite {kind.__name__}")
        return kind(value)
    if kind is str and isinstance(value, str):
        return value
    raise ConfigError(field, value, f"must be a {kind.__name__}")


def _annotation_type(hint: Any, module: str) -> tuple[type | None, tuple[Any, ...], bool]:
    """(value type, Literal choices, None allowed) of an annotation string or object; (None, ...) if not plain."""
    if isinstance(hint, str):
        parts = [p.strip() for p in hint.split("|")]
        optional = "None" in parts
        parts = [p for p in parts if p != "None"]
        if len(parts) != 1:
            return None, (), optional
        name = parts[0]
        if name in SIMPLE:
            return SIMPLE[name], (), optional
        hint = getattr(sys.modules.get(module), name, None)
        if hint is None:
            return None, (), optional
        kind, choices, _ = _annotation_type(hint, module)
        return kind, choices, optional
    if typing.get_origin(hint) is typing.Literal:
        args = typing.get_args(hint)
        return (type(args[0]) if args else None), args, False
    return (hint if hint in SIMPLE.values() else None), (), False


def options_from_signature(cls: type, help: Mapping[str, str], choices: Mapping[str, tuple[Any, ...]]
                           ) -> tuple[Option, ...]:
    """The plain-valued keyword parameters of `cls.__init__` (and of its bases' where it passes `**options` on)."""
    out: dict[str, Option] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        for p in params.values():
            if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in out:
                continue
            if p.default is p.empty:
                continue  # a required argument is not an option
            kind, allowed, optional = _annotation_type(p.annotation, klass.__module__)
            if kind is None and p.annotation is p.empty and type(p.default) in SIMPLE.values():
                kind = type(p.default)
            if kind is None:
                continue  # a Python-only parameter (a table, a model)
            out[p.name] = Option(p.name, kind, p.default, help.get(p.name, ""),
                                 tuple(choices.get(p.name, allowed)), optional or p.default is None)
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    return tuple(out.values())


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """What a user names: a policy (a registered name, `file.py:Class` or `package.module:Class`) and options."""

    ref: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.ref}:{opts}" if opts else self.ref


def parse_spec(text: str, where: str = "--policy") -> PolicySpec:
    """`NAME`, `NAME:key=value,...`, `path/file.py:Class[:key=value,...]` or `package.module:Class[:...]`."""
    text = text.strip()
    if not text:
        raise ConfigError(where, text, "no policy named; e.g. tiresias or gavel:objective=max_sum_throughput")
    ref, options = text, ""
    head, sep, tail = text.rpartition(":")
    if sep and "=" in tail.partition(",")[0]:
        ref, options = head.strip(), tail
    pairs: list[tuple[str, str]] = []
    for part in options.split(",") if options else ():
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not _KEY.fullmatch(key):
            raise ConfigError(where, text[:120], f"options are key=value, comma-separated; got {part.strip()!r}")
        if key in dict(pairs):
            raise ConfigError(f"{where} {ref}:{key}", value, "given more than once")
        pairs.append((key, value.strip()))
    return PolicySpec(ref, tuple(pairs))


def split_specs(text: str, where: str = "--policies") -> list[PolicySpec]:
    """Comma-separated specs, where `key=value` after a spec with options continues its options:
    `gavel:objective=las,interval=360,tiresias` is two policies."""
    groups: list[str] = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        continues = "=" in token and ":" not in token and _KEY.fullmatch(token.partition("=")[0].strip())
        if continues and groups and ":" in groups[-1] and "=" in groups[-1].rpartition(":")[2]:
            groups[-1] += "," + token
        else:
            groups.append(token)
    if not groups:
        raise ConfigError(where, text[:80], "no policy named; e.g. fifo,tiresias")
    return [parse_spec(g, where) for g in groups]


def resolve(declared: tuple[Option, ...], given: Mapping[str, Any], policy: str, where: str = "--policy"
            ) -> dict[str, Any]:
    """The given options converted and checked against the declaration (unknown keys are errors)."""
    by_name = {o.name: o for o in declared}
    out: dict[str, Any] = {}
    for key, value in given.items():
        option = by_name.get(key)
        if option is None:
            known = "; ".join(o.describe() for o in declared) or "none"
            raise ConfigError(f"{where} {policy}:{key}", value, f"unknown option; {policy} takes: {known}")
        out[key] = option.convert(value, f"{where} {policy}")
    return out


def defaults(declared: tuple[Option, ...]) -> dict[str, Any]:
    return {o.name: o.default for o in declared}
