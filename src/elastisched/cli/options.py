"""Validation of the `sim run` / `sim compare` options, in one place, before anything runs or is written.

Options arrive as text and are parsed here with the workload schema's strict number grammar and ranges
(`workloads.schema.FIELDS`), because Click's own INT/FLOAT accept `1_000`, `+5`, non-ASCII digits, `nan` and
`inf`. Every failure is a `ConfigError` that `cli_errors` prints as one line, `error: <field>=<value>: <why>`,
with exit code 2.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from elastisched.core.errors import ConfigError, ElastischedError
from elastisched.workloads.schema import RESTART_COST, SEED


def seed(text: str) -> int:
    return int(SEED.option("--seed", text))


def restart_cost(text: str | None) -> float | None:
    return None if text is None else float(RESTART_COST.option("--restart-cost", text))


def out_dir(text: str) -> Path:
    """The output folder may exist (as a folder) or be creatable; refused before the run, not after it."""
    if "\0" in text or not text.strip():
        raise ConfigError("--out", text, "not a usable path")
    out = Path(text)
    try:
        if out.exists() and not out.is_dir():
            raise ConfigError("--out", text, "exists and is not a directory")
        parent = next((p for p in out.absolute().parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise ConfigError("--out", text, f"{parent} is a file, not a directory")
    except OSError as e:
        raise ConfigError("--out", text, f"not usable: {e.strerror or type(e).__name__}") from None
    return out


def policy(name: str, option: str = "--policy") -> str:
    """One registered policy name."""
    from elastisched.policies.base import is_registered, unknown_policy_hint

    if not is_registered(name):
        raise ConfigError(option, name[:80], unknown_policy_hint(name))
    return name


def policies(text: str) -> list[str]:
    """Comma-separated registered policy names; unknown or repeated names are refused before any run."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise ConfigError("--policies", text[:80], "no policy named; e.g. fifo,tiresias")
    for n in names:
        policy(n, "--policies")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError("--policies", dupes[0], "named more than once")
    return names


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


@contextmanager
def cli_errors() -> Iterator[None]:
    """Bad input → one plain line on stderr (no markup, no wrapping) and exit code 2."""
    try:
        yield
    except ElastischedError as e:
        print(f"error: {_one_line(str(e))}", file=sys.stderr, flush=True)
        raise typer.Exit(2) from None
