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
from typing import TYPE_CHECKING, Any

import typer

from elastisched.core.errors import ConfigError, ElastischedError
from elastisched.workloads.schema import RESTART_COST, SEED

if TYPE_CHECKING:
    from elastisched.policies.plugins import BuiltPolicy
    from elastisched.sim.runner import RunSetup


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


MAX_OPTIONS_FILE = 1 << 20  # bytes


def policy_options_file(text: str | None) -> dict[str, dict[str, Any]]:
    """`--policy-options FILE.yaml`: a mapping of policy name to its options ({gavel: {interval: 360}})."""
    if text is None:
        return {}
    import yaml

    path = Path(text).expanduser()
    try:
        if not path.is_file() or path.stat().st_size > MAX_OPTIONS_FILE:
            raise ConfigError("--policy-options", text, "no such file" if not path.exists() else
                              f"not a regular file of at most {MAX_OPTIONS_FILE} bytes")
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
    except OSError as e:
        raise ConfigError("--policy-options", text, f"cannot read: {e.strerror or e}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError("--policy-options", text, f"not readable YAML: {str(e).splitlines()[0][:160]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) or v is None for v in data.values()):
        raise ConfigError("--policy-options", text, "must map each policy name to its options, e.g. "
                          "gavel: {objective: max_sum_throughput, interval: 360}")
    return {str(k): dict(v or {}) for k, v in data.items()}


def policy_specs(text: str, options_file: str | None = None, where: str = "--policies") -> list[BuiltPolicy]:
    """Comma-separated policy specs with a `--policy-options` file's options (`api.build_policies`), built and
    checked before anything runs."""
    from elastisched.api import build_policies

    return build_policies([text], policy_options_file(options_file), where, "--policy-options")


def policies(text: str) -> list[str]:
    """Comma-separated policy specs, checked before any run; each as a spec that builds it again (a sweep's
    worker process builds its own)."""
    return [b.spec for b in policy_specs(text)]


def run_setup(workload: str, cluster: str | None, profiles: str | None, restart_cost: float | None = None,
              setup: str | None = None) -> RunSetup:
    from elastisched.api import run_setup as api_setup

    return api_setup(workload, cluster, profiles, restart_cost, setup)


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
