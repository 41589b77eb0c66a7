"""A job's environment (issue 23): built from an allow-list, never inherited whole from the service.

A job gets the allowed variables of the service's environment (`DEFAULT_ALLOW`: locale, search path,
thread counts, CUDA/NCCL/gloo settings; `--job-env NAME` adds one, `--job-env NAME=VALUE` sets one), then
what its own spec sets (`env`), then the launch contract's variables, which nothing overrides. So the admin
token, a database URL, the crash-test hooks or anything else the service was started with never reach a job.
`RESERVED` names are the contract's and the device pinning's: a spec may not set them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

DEFAULT_ALLOW = ("PATH", "LANG", "LANGUAGE", "LC_*", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "NUMEXPR_NUM_THREADS",
                 "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "NCCL_*", "GLOO_*")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_EXACT = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                            "CUDA_VISIBLE_DEVICES", "USER", "LOGNAME"})
RESERVED_PREFIX = "ELASTISCHED_"
MAX_VARS = 64
MAX_VALUE_BYTES = 32 * 1024
MAX_TOTAL_BYTES = 128 * 1024


def reserved(name: str) -> bool:
    return name in RESERVED_EXACT or name.upper().startswith(RESERVED_PREFIX)


def spec_env_problem(env: Mapping[str, str]) -> str | None:
    """Why a job spec's `env` cannot be used (None: it can): names, reserved names, sizes, NUL bytes."""
    if len(env) > MAX_VARS:
        return f"{len(env)} variables; at most {MAX_VARS}"
    total = 0
    for k, v in env.items():
        if not NAME.match(k):
            return f"{k[:40]!r} is not a variable name (letters, digits and _, not starting with a digit)"
        if reserved(k):
            return f"{k} is set by the service (the launch contract or device pinning), not by a job"
        if "\x00" in v or any(0xD800 <= ord(c) <= 0xDFFF for c in v):
            return f"{k}: the value holds a NUL byte or a lone surrogate"
        size = len(k.encode()) + len(v.encode()) + 2
        if size > MAX_VALUE_BYTES:
            return f"{k}: {size} bytes; at most {MAX_VALUE_BYTES} a variable"
        total += size
    if total > MAX_TOTAL_BYTES:
        return f"{total} bytes together; at most {MAX_TOTAL_BYTES}"
    return None


def parse_job_env(items: Iterable[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """`--job-env` values: NAME (or a NAME* pattern) to pass through, NAME=VALUE to set. Raises ValueError."""
    allow: list[str] = []
    fixed: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not NAME.match(name.rstrip("*")) or (eq and name.endswith("*")):
            raise ValueError(f"--job-env: {item[:60]!r} must be NAME, NAME* or NAME=VALUE")
        if reserved(name.rstrip("*")):
            raise ValueError(f"--job-env: {name} is set by the service for each job")
        if eq:
            fixed[name] = value
        else:
            allow.append(name)
    return tuple(allow), fixed


class JobEnv:
    """The environment every job starts from: allowed variables of `source` plus fixed ones."""

    def __init__(self, source: Mapping[str, str], allow: Iterable[str] = (), fixed: Mapping[str, str] | None = None
                 ) -> None:
        patterns = (*DEFAULT_ALLOW, *allow)
        self.base = {k: v for k, v in source.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)
                     and not reserved(k)}
        self.base.setdefault("PATH", DEFAULT_PATH)
        self.base.update(fixed or {})

    def build(self, spec_env: Mapping[str, str], contract: Mapping[str, str], *, home: str, user: str | None
              ) -> dict[str, str]:
        """Base, then the spec's own variables (reserved ones dropped), then HOME/USER and the contract."""
        env = {**self.base, "HOME": home}
        env.update({k: v for k, v in spec_env.items() if not reserved(k)})
        if user:
            env["USER"] = env["LOGNAME"] = user
        env.update(contract)
        env.setdefault("OMP_NUM_THREADS", "1")
        return env
