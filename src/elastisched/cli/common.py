"""What every part of the command line shares: the stderr console, the error guard (a bad input is one red
line and exit code 2, never a traceback) and the simulation progress display. Its own module so that command
modules (`cli.main`, `cli.tools`, `cli.reproduce`) use it without importing each other."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from elastisched.core.errors import ElastischedError

if TYPE_CHECKING:
    from rich.console import Console

    console: Console

_CONSOLE: list[Console] = []


def _console() -> Console:
    """The stderr console, made on first use: a client command that prints through `typer.echo` never imports
    rich.console."""
    if not _CONSOLE:
        from rich.console import Console

        _CONSOLE.append(Console(stderr=True))
    return _CONSOLE[0]


def __getattr__(name: str) -> Any:
    if name == "console":
        return _console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _flag_type(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
    """Typer ≥ 0.2x prints `<bool>` beside every on/off flag in --help, where no value is taken: show none."""
    return None if self.is_flag else _TYPE_RICH(self, ctx)


_TYPE_RICH = getattr(typer.core.TyperOption, "display_type_rich", None)
if _TYPE_RICH is not None:  # a Typer without it prints no type beside flags: nothing to patch
    typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


class _PlainParam:
    """Coercion of a parameter's value where it needs none. Typer ≥ 0.2x coerces every value through a pydantic
    TypeAdapter, and importing pydantic and building the adapters costs more CPU than a whole simulated Pollux
    workload. Typer returns None for a missing single value before using the adapter, a `str` adapter returns
    text unchanged (its validator is `str(value)`) and a `bool` one a bool; so those values are returned as
    they are, and any other goes to Typer's own coercion (built on first need)."""

    def __init__(self, param: Any) -> None:
        self._param = param

    def coerce(self, value: Any, param: Any, ctx: typer.Context) -> Any:
        annotation = self._param.type_descriptor.annotation
        if not (param.multiple or param.nargs == -1) and (
                value is None or (annotation in (str, bool) and type(value) is annotation)):
            return value
        return _RUNTIME_PARAM(self._param).coerce(value, param=param, ctx=ctx)


def _runtime_param(self: Any) -> Any:
    desc = getattr(self, "type_descriptor", None)  # Typer's internals: anything unexpected goes to Typer's own
    if getattr(self, "_runtime_param", 0) is None and getattr(desc, "file_annotation", 0) is None \
            and getattr(getattr(desc, "parameter_info", None), "parser", 0) is None \
            and hasattr(desc, "annotation"):
        return _PlainParam(self)
    return _RUNTIME_PARAM(self)


_PARAM = getattr(typer.core, "_TyperParameter", None)
_RUNTIME_PARAM = getattr(_PARAM, "get_runtime_param", None)
if _RUNTIME_PARAM is not None:  # Typer versions without adapters need nothing
    _PARAM.get_runtime_param = _runtime_param  # type: ignore[union-attr]


@contextmanager
def errors() -> Iterator[None]:
    try:
        yield
    except ElastischedError as e:
        _console().print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


@contextmanager
def stage(text: str) -> Iterator[None]:
    """A spinner with `text` on a terminal while a step without its own progress runs (loading a large trace,
    building models, writing the report), so a long command never sits silent; nothing elsewhere."""
    console = _console()
    if not (console.is_terminal or sys.stderr.isatty()):
        yield
        return
    with console.status(text):
        yield
    console.print(f"{text} done", markup=False, highlight=False)


@contextmanager
def progress_bars() -> Iterator[Callable[[str], Callable[[float, int, int], None]]]:
    """A factory of per-task progress callbacks (sim time, finished jobs, total jobs), one bar per task.

    Where stderr is no terminal the bars are transient and never drawn (rich draws a live display only on a
    terminal), so no display is built at all: no rich.progress import and no refresh thread; what rich's
    `Progress.stop` writes there, one empty line, is still written."""
    console = _console()
    if not (console.is_terminal or console.is_jupyter or sys.stderr.isatty()):
        try:
            yield lambda name: _no_progress
        finally:
            console.print()
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} jobs"),
                  TextColumn("sim t={task.fields[t]}"), TimeElapsedColumn(), console=console,
                  transient=not sys.stderr.isatty()) as prog:
        def factory(name: str) -> Callable[[float, int, int], None]:
            task = prog.add_task(name, total=None, t="0h")

            def update(t: float, done: int, total: int) -> None:
                prog.update(task, completed=done, total=total, t=f"{t / 3600:.1f}h")
            return update
        yield factory


def _no_progress(t: float, done: int, total: int) -> None:
    """The progress callback where nothing is displayed."""
