"""What every part of the command line shares: the stderr console, the error guard (a bad input is one red
line and exit code 2, never a traceback) and the simulation progress display. Its own module so that command
modules (`cli`, `sweep_cli`, `reproduce_cli`) use it without importing each other."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from elastisched.core.errors import ElastischedError

console = Console(stderr=True)


def _flag_type(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
    """Typer ≥ 0.2x prints `<bool>` beside every on/off flag in --help, where no value is taken: show none."""
    return None if self.is_flag else _TYPE_RICH(self, ctx)


_TYPE_RICH = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


@contextmanager
def errors() -> Iterator[None]:
    try:
        yield
    except ElastischedError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


@contextmanager
def progress_bars() -> Iterator[Callable[[str], Callable[[float, int, int], None]]]:
    """A factory of per-task progress callbacks (sim time, finished jobs, total jobs), one bar per task."""
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} jobs"),
                  TextColumn("sim t={task.fields[t]}"), TimeElapsedColumn(), console=console,
                  transient=not sys.stderr.isatty()) as prog:
        def factory(name: str) -> Callable[[float, int, int], None]:
            task = prog.add_task(name, total=None, t="0h")

            def update(t: float, done: int, total: int) -> None:
                prog.update(task, completed=done, total=total, t=f"{t / 3600:.1f}h")
            return update
        yield factory
