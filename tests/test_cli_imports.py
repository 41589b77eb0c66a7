"""What each command imports (issue 15, start-up speed): a command loads only what it uses. A whole `sim run`
of one policy, once the fit cache is warm, imports that policy alone and no pydantic (Typer's adapters), scipy,
pandas, matplotlib or web stack; `--help` and a client command import no numpy and no pydantic, and the client
no click or pygments (httpx's own command line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUN = ("import json, sys\nsys.argv = ['elastisched', *json.loads(sys.argv[1])]\nfrom elastisched.cli.main import app\n"
       "try:\n    app()\nexcept SystemExit:\n    pass\nprint('MODULES=' + json.dumps(sorted(sys.modules)))")


def modules_after(args: list[str], env: dict[str, str]) -> set[str]:
    p = subprocess.run([sys.executable, "-c", RUN, json.dumps(args)], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    line = next((x for x in p.stdout.splitlines() if x.startswith("MODULES=")), None)
    assert line is not None, p.stderr[-2000:]
    return set(json.loads(line.removeprefix("MODULES=")))


def _top(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


def test_sim_run_imports_one_policy_and_no_heavy_library(tmp_path: Path) -> None:
    env = {**os.environ, "ELASTISCHED_CACHE_DIR": str(tmp_path / "cache"), "OPENBLAS_NUM_THREADS": "1"}
    args = ["sim", "run", "-p", "tiresias", "-w", "pollux:workload-6", "-o", str(tmp_path / "out")]
    modules_after(args, env)  # fills the fit cache
    mods = modules_after(args, env)
    assert (tmp_path / "out" / "jobs.csv").is_file()
    assert not _top(mods) & {"pydantic", "scipy", "pandas", "matplotlib", "torch", "fastapi", "httpx", "yaml"}
    assert "typer._adapters" not in mods and "rich.progress" not in mods
    policies = {m for m in mods if m.startswith("elastisched.policies.") and "._placement" not in m}
    # the spec parser and option checks (issue 24) are light: inspect and typing only
    assert policies == {"elastisched.policies.base", "elastisched.policies._common", "elastisched.policies.tiresias",
                        "elastisched.policies.tiresias.policy", "elastisched.policies.tiresias.index",
                        "elastisched.policies.plugins", "elastisched.policies.options"}


def test_help_and_client_import_no_numpy() -> None:
    heavy = {"numpy", "pydantic", "pandas", "scipy", "matplotlib"}
    assert not _top(modules_after(["--help"], dict(os.environ))) & heavy
    mods = modules_after(["ls", "--server", "http://127.0.0.1:9"], dict(os.environ))
    assert "httpx" in _top(mods)
    assert not _top(mods) & (heavy | {"click", "pygments"})


def test_plain_values_coerce_as_typer_does() -> None:
    """The shortcut returns what Typer's own (pydantic) coercion returns, for every option of every command."""
    import typer.main

    from elastisched.cli import common as cli_common
    from elastisched.cli.main import app

    ctx = typer.Context(typer.main.get_command(app))
    checked = 0
    stack = [typer.main.get_command(app)]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        for param in cmd.params:
            annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
            samples = {str: ["x", "", "1_000", "nan"], bool: [True, False]}.get(annotation, [])
            for value in [None, *samples]:
                if param.multiple or param.nargs == -1:
                    continue
                fast = cli_common._PlainParam(param).coerce(value, param=param, ctx=ctx)
                own = cli_common._RUNTIME_PARAM(param).coerce(value, param=param, ctx=ctx)
                assert type(fast) is type(own) and fast == own, (cmd.name, param.name, value)
                checked += 1
    assert checked > 100
