"""The command line speaks one dialect: every command writing files has `--out/-o` with a default under
results/, policy lists are `--policies/-p`, flags show no `<bool>`, unknown policies get a 'did you mean'."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from elastisched.cli.main import app


def _commands() -> dict[str, Any]:
    """Every leaf command by its path (Typer ships its own click: duck-typed)."""
    root = typer.main.get_command(app)
    out: dict[str, Any] = {}

    def walk(cmd: Any, path: str) -> None:
        if hasattr(cmd, "list_commands"):
            ctx = typer.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), f"{path} {name}".strip())
        else:
            out[path] = cmd
    walk(root, "")
    return out


def test_out_and_policies_options_are_consistent() -> None:
    cmds = _commands()
    assert {"sim run", "sim compare", "sim sweep", "plan", "trace describe", "reproduce lyra"} <= set(cmds)
    for path, cmd in cmds.items():
        for p in cmd.params:
            if "--out" in p.opts:
                assert "-o" in p.opts, path
                assert not p.required and str(p.default).startswith("results"), (path, p.default)
            if "--policies" in p.opts:
                assert "-p" in p.opts, path


def test_flags_show_no_type_and_unknown_policy_suggests() -> None:
    r = CliRunner().invoke(app, ["policies", "--help"])
    assert "--json" in r.output and "<bool>" not in r.output
    r = CliRunner().invoke(app, ["sim", "compare", "-w", "pollux:workload-1", "-p", "fifo,tiresia"])
    assert r.exit_code == 2 and "did you mean 'tiresias'" in r.output


@pytest.mark.parametrize("name", ["tiresas", "lyr"])
def test_make_policy_suggests(name: str) -> None:
    from elastisched.core.errors import UnknownPolicyError
    from elastisched.policies.base import make_policy

    with pytest.raises(UnknownPolicyError, match="did you mean"):
        make_policy(name)


def test_setup_leaves_no_model_to_build_during_the_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`wall_seconds` of the first policy used to carry the throughput fits (and swapped with the order of
    --policies): after `setup` no run builds a model, whatever the order."""
    from elastisched.models import throughput
    from elastisched.sim.runner import run_policies, setup

    s = setup("pollux:workload-3", "16x4:t4")

    def no_build(*_: object, **__: object) -> None:
        raise AssertionError("a throughput model was built inside a policy's run")

    monkeypatch.setattr(throughput.ThroughputModel, "__init__", no_build)
    for order in (["fifo", "tiresias"], ["tiresias", "fifo"]):
        res = run_policies(s, order)
        assert all(r.summary["n_finished"] == 160 for r in res.values())


def test_serve_defaults_are_the_services() -> None:
    """`elastisched serve` states its defaults as literals (the CLI does not import the service to print --help);
    they must be the service's own, which `python -m elastisched.service` and `server.build` use."""
    import inspect

    from elastisched.cli.serve import serve
    from elastisched.service.isolation import DEFAULT_MAX_QUEUED
    from elastisched.service.routes.context import API_THREADS, API_THREADS_MAX

    params = inspect.signature(serve).parameters
    threads, queued = params["api_threads"].default, params["max_queued"].default
    assert (threads.default, threads.max) == (API_THREADS, API_THREADS_MAX)
    assert queued.default == DEFAULT_MAX_QUEUED
