"""`elastisched reproduce NAME`: one command per registered experiment, generated from its `Config` dataclass.

Each field becomes `--field-name` (type and default from the field; help from `metadata["help"]`, else the
field's trailing `# comment` in the Config source). Tuples are given comma-separated. Every command also
takes `--out` (default `results/NAME`), runs with a progress display, writes through `report.experiment`
and prints the verdict lines. No experiment is a special case.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

if typing.TYPE_CHECKING:
    from elastisched.experiments.base import Experiment, ProgressFactory

Bars = Callable[[], "AbstractContextManager[ProgressFactory]"]
Errors = Callable[[], AbstractContextManager[None]]
_SCALARS = (int, float, str, bool, Path)


def field_help(config: type, f: dataclasses.Field[Any]) -> str:
    """The field's documentation: `metadata["help"]`, else its trailing comment in the class source."""
    if f.metadata.get("help"):
        return str(f.metadata["help"])
    try:
        src = inspect.getsource(config)
    except (OSError, TypeError):
        return ""
    m = re.search(rf"^\s+{re.escape(f.name)}\s*:[^#\n]*#\s*(.+)$", src, re.MULTILINE)
    return m.group(1).strip() if m else ""


def option_type(hint: Any) -> tuple[Any, bool, bool]:
    """(CLI type, optional?, tuple?) of a field's type hint; other types are a programming error."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if hint in _SCALARS:
        return hint, False, False
    if typing.get_origin(hint) is tuple:
        return str, False, True
    if len(args) == 1 and args[0] in _SCALARS and type(None) in typing.get_args(hint):
        return args[0], True, False
    raise TypeError(f"config field type {hint!r} has no CLI form (int, float, str, bool, Path, X | None, tuple)")


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return ...


def _parse_tuple(hint: Any, text: str) -> tuple[Any, ...]:
    elem = (typing.get_args(hint) or (str,))[0]
    elem = elem if elem in _SCALARS else str
    return tuple(elem(p.strip()) for p in text.split(",") if p.strip())


def build_command(exp: type[Experiment], bars: Bars, errors: Errors, echo: Callable[[str], None]
                  ) -> Callable[..., None]:
    """A Typer command function whose options are the fields of `exp.Config` plus `--out`."""
    config = exp.Config
    hints = typing.get_type_hints(config)
    params = [inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, annotation=Path, default=typer.Option(
        Path("results") / exp.name, "--out", "-o", help="Output directory: NAME.json, PNG plots, report.html."))]
    tuples: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        typ, optional, is_tuple = option_type(hints[f.name])
        default = _default(f)
        if is_tuple:
            tuples[f.name] = hints[f.name]
            default = ",".join(str(x) for x in default) if default is not ... else ...
        flag = "--" + f.name.replace("_", "-")
        decls = [f"{flag}/--no-{flag[2:]}"] if typ is bool else [flag]
        if f.name == "policies":  # the one short form every command gives its policy list
            decls.append("-p")
        help_text = field_help(config, f) + (" (comma-separated)" if is_tuple else "")
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                        annotation=Optional[typ] if optional else typ,  # noqa: UP045
                                        default=typer.Option(default, *decls, help=help_text)))

    def command(**kwargs: Any) -> None:
        from elastisched.experiments.writer import verdict_line, write_result

        out = kwargs.pop("out")
        for name, hint in tuples.items():
            kwargs[name] = _parse_tuple(hint, kwargs[name])
        with errors():
            cfg = config(**kwargs)
            with bars() as progress:
                result = exp().run(cfg, progress)
            write_result(result, out, exp.paper)
        for v in result.verdicts:
            echo(verdict_line(v))
        echo(f"report: {out / 'report.html'}")

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = f"{exp.title}." + (f" Reproduces {exp.paper}." if exp.paper else "")
    command.__name__ = exp.name.replace("-", "_")
    return command


def add_commands(group: typer.Typer, bars: Bars, errors: Errors, echo: Callable[[str], None] = typer.echo) -> None:
    """One `reproduce NAME` command per registered experiment."""
    from elastisched.experiments.base import registered_experiments

    for name, exp in registered_experiments().items():
        cmd = build_command(exp, bars, errors, echo)
        group.command(name, help=cmd.__doc__)(cmd)


class LazyExperimentGroup(TyperGroup):
    """The `reproduce` group, filled on first use: generating a command needs the experiment modules (and
    through them the simulator, pandas and scipy), which `elastisched --help` or a client command should
    not pay for."""

    loaded = False

    def _load(self) -> None:
        if self.loaded:
            return
        self.loaded = True
        from elastisched.cli.common import errors, progress_bars

        tmp = typer.Typer()
        add_commands(tmp, progress_bars, errors)
        for name, cmd in typer.main.get_group(tmp).commands.items():
            self.add_command(cmd, name)

    def list_commands(self, ctx: Any) -> list[str]:
        self._load()
        return super().list_commands(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        self._load()
        return super().get_command(ctx, cmd_name)
