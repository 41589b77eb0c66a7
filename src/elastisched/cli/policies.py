"""`elastisched policies`: the registered policies (built in and installed), one policy's options, and
`policies check SPEC`, the conformance checks (`engine.conformance`) against any policy."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer


def _listing(as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from elastisched.policies.base import BROKEN_ENTRY_POINTS, origin, registered

    pols: dict[str, Any] = registered()
    if as_json:
        typer.echo(json.dumps([{"name": n, "description": c.description, "interval": c.interval,
                                "elastic": c.elastic, "knows_length": str(c.knows_length), "origin": origin(n),
                                "options": [o.name for o in c.declared_options()]}
                               for n, c in pols.items()], indent=2))
        return
    t = Table("policy", "round", "elastic", "knows of a job's length", "origin", "description")
    for n, c in pols.items():
        t.add_row(n, f"{c.interval:g} s" if c.interval else "on events", "yes" if c.elastic else "no",
                  str(c.knows_length), origin(n), c.description)
    Console().print(t)
    for name, why in sorted(BROKEN_ENTRY_POINTS.items()):
        typer.echo(f"warning: installed policy {name!r} failed to load: {why}", err=True)
    typer.echo("`elastisched policies NAME` lists a policy's options; `-p NAME:key=value,...` sets them.")


def _options(spec: str, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from elastisched.policies.base import origin
    from elastisched.policies.plugins import load_class

    cls = load_class(spec, "policies")
    declared = cls.declared_options()
    if as_json:
        typer.echo(json.dumps([{"name": o.name, "type": o.type_name, "default": o.default, "help": o.help,
                                "choices": list(o.choices)} for o in declared], indent=2))
        return
    console = Console()
    console.print(f"{cls.name} ({origin(cls.name)}): {cls.description}", markup=False, highlight=False)
    if not declared:
        console.print("no options", markup=False)
        return
    t = Table("option", "type", "default", "allowed", "help")
    for o in declared:
        t.add_row(o.name, o.type_name, repr(o.default), ", ".join(map(str, o.choices)) or "-", o.help or "-")
    console.print(t)
    console.print(f"set with -p {cls.name}:{declared[0].name}=VALUE,... or --policy-options FILE.yaml",
                  markup=False, highlight=False)


def _check(spec: str, examples: int, seed: int) -> None:
    from elastisched.engine import conformance
    from elastisched.models.registry import PerfModels
    from elastisched.policies.plugins import build

    built = build(spec, where="policies check")
    failures = conformance.run(lambda: build(spec, where="policies check").policy, PerfModels.load(),
                               examples, seed)
    if not failures:
        typer.echo(f"{built.label}: passed the conformance checks ({examples} snapshots, seed {seed})")
        return
    for f in failures:
        where = "idle-cluster round" if f.example < 0 else f"snapshot {f.example} (seed {seed})"
        typer.echo(f"FAILED {f.invariant}\n  {where}: {f.message}")
    typer.echo(f"{built.label}: {len(failures)} invariant(s) broken", err=True)
    raise typer.Exit(1)


def policies_cmd(
        words: Annotated[list[str] | None, typer.Argument(
            metavar="[NAME | check SPEC]", help="NAME: one policy's options. `check SPEC`: run the conformance "
            "checks against a policy (a name, path/file.py:Class or package.module:Class, with options).")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
        examples: Annotated[int, typer.Option("--examples", min=1, max=10_000,
                                              help="check: random snapshots to try.")] = 60,
        seed: Annotated[int, typer.Option("--seed", min=0, help="check: seed of the snapshots.")] = 0) -> None:
    """List the scheduling policies (built in and installed), show one's options, or check one."""
    from elastisched.cli import options

    words = words or []
    with options.cli_errors():
        if not words:
            _listing(as_json)
        elif words[0] == "check" and len(words) == 2:
            _check(words[1], examples, seed)
        elif len(words) == 1 and words[0] != "check":
            _options(words[0], as_json)
        else:
            raise typer.BadParameter("expected NAME or `check SPEC`", param_hint="arguments")


def register(app: typer.Typer) -> None:
    app.command("policies")(policies_cmd)
