"""Errors with enough context to act on: which field, which value, where."""

from __future__ import annotations

SHOWN = 120  # characters of a value echoed in a message: one bad 100 kB cell still gives one short line


def shown(value: object) -> str:
    """`repr(value)`, cut to `SHOWN` characters (the full value stays on the exception's `.value`)."""
    r = repr(value)
    return r if len(r) <= SHOWN else f"{r[:SHOWN]}...({len(r)} chars)"


class ElastischedError(Exception):
    """Base of all errors raised on purpose."""


class ConfigError(ElastischedError, ValueError):
    """A bad option, cluster spec or file; the message names the field and the value."""

    def __init__(self, field: str, value: object, why: str) -> None:
        super().__init__(f"{field}={shown(value)}: {why}")
        self.field, self.value, self.why = field, value, why


class WorkloadError(ElastischedError, ValueError):
    """A bad row in a trace: names file, line, column and value."""

    def __init__(self, path: str, line: int, column: str, value: object, why: str) -> None:
        super().__init__(f"{path}:{line}: column {column!r} = {shown(value)}: {why}")
        self.path, self.line, self.column, self.value, self.why = path, line, column, value, why


class InvariantViolation(ElastischedError, AssertionError):
    """A decision breaks capacity, min/max GPUs or GPU-type constraints."""


class UnknownPolicyError(ElastischedError, KeyError):
    pass
