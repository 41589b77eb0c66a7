"""What the service's client commands share: the `--json`, `--server` and `--token` options, the MIN:MAX parser,
ages, tables and JSON output. Typer and the standard library only (rich is imported when a table is printed):
client commands must start fast."""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from elastisched.service.client import DEFAULT_SERVER

JsonOpt = typer.Option(False, "--json", help="machine-readable output")
ServerOpt = typer.Option(None, "--server", envvar="ELASTISCHED_SERVER", help=f"API URL (default {DEFAULT_SERVER})")
TokenOpt = typer.Option(None, "--token", envvar="ELASTISCHED_TOKEN", help="bearer token (default: .elastisched/token)")


def parse_range(text: str | None, what: str) -> tuple[int, int] | None:
    """`N` or `MIN:MAX` (1 <= MIN <= MAX) as (MIN, MAX); None for no text."""
    if text is None:
        return None
    try:
        parts = [int(x) for x in text.split(":")]
    except ValueError:
        raise typer.BadParameter(f"{what}={text!r}: expected N or MIN:MAX") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or not 1 <= parts[0] <= parts[1]:
        raise typer.BadParameter(f"{what}={text!r}: expected N or MIN:MAX with 1 <= MIN <= MAX")
    return parts[0], parts[1]


def age(t: float | None) -> str:
    if not t:
        return "-"
    s = int(max(0.0, time.time() - t))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def table(headers: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for h in headers:
        t.add_column(h)
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    Console(width=200).print(t)


def dump(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))
