"""The secrets the service starts with (issue 23): the admin token and the database URL, taken from a file or
an environment variable and never left in its environment or on its command line.

Popping a variable from `os.environ` leaves the kernel's copy (`/proc/PID/environ` shows the environment the
process was started with), and a command line is readable by every local account. So a service started with
`ELASTISCHED_TOKEN` or `ELASTISCHED_DB` in its environment writes them into a pipe and re-executes itself
(same PID, same arguments) without them: the new image reads the pipe once and closes it; only the pipe's
descriptor number is left in its environment. A URL with a password on the command line (`--db`) is refused.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from elastisched.core.errors import ConfigError

TOKEN_ENV = "ELASTISCHED_TOKEN"
DB_ENV = "ELASTISCHED_DB"
SECRET_VARS = (TOKEN_ENV, DB_ENV)
FD_ENV = "_ELASTISCHED_SECRETS_FD"
MIN_TOKEN_CHARS = 24
MIN_TOKEN_DISTINCT = 8
_from_pipe: dict[str, str] | None = None


def reexec_without_secrets() -> None:
    """If a secret is in our environment, hand it to a fresh image of this process through a pipe (execve;
    returns only when there was nothing to hide). Call it first thing in an entry point, never in a library."""
    found = {k: os.environ[k] for k in SECRET_VARS if k in os.environ}
    if not found:
        return
    data = json.dumps(found).encode()
    if len(data) > 60_000:  # under a pipe's buffer: the write must not block before the exec
        raise ConfigError(TOKEN_ENV, "(hidden)", "the secret variables are too long")
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    os.set_inheritable(r, True)
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS} | {FD_ENV: str(r)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def taken() -> dict[str, str]:
    """The secrets handed over by `reexec_without_secrets` (read once), plus any still in `os.environ`, which
    are removed from it (a process that did not re-execute, e.g. a test calling `server.build`)."""
    global _from_pipe
    if _from_pipe is None:
        _from_pipe = {}
        fd = os.environ.pop(FD_ENV, None)
        if fd is not None and fd.isdigit():
            try:
                with os.fdopen(int(fd), "rb") as f:
                    _from_pipe = dict(json.loads(f.read() or b"{}"))
            except (OSError, ValueError):
                _from_pipe = {}
    out = dict(_from_pipe)
    for k in SECRET_VARS:
        v = os.environ.pop(k, None)
        if v is not None:
            out[k] = v
    return out


def check_admin_token(token: str, source: str) -> str:
    """The token, if long and varied enough to be a secret (else a ConfigError naming where it came from)."""
    if len(token) < MIN_TOKEN_CHARS or len(set(token)) < MIN_TOKEN_DISTINCT:
        raise ConfigError(source, "(hidden)", f"an admin token needs at least {MIN_TOKEN_CHARS} characters, "
                          f"{MIN_TOKEN_DISTINCT} of them different (this one has {len(token)}); make one with "
                          "python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    return token


def read_secret_file(path: str | os.PathLike[str], option: str) -> str:
    """The first line of a secret file (`--token-file`, `--db-file`), stripped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(option, str(path), f"cannot read: {getattr(e, 'strerror', None) or e}") from None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not line:
        raise ConfigError(option, str(path), "is empty")
    return line


def database_url(flag: str | None, db_file: str | None, default: str) -> str:
    """`--db` (no password allowed there), else $ELASTISCHED_DB, else `--db-file`, else `default`."""
    if flag:
        if _has_password(flag):
            raise ConfigError("--db", "(a URL with a password)", "a command line is readable by every local account "
                              f"(/proc/PID/cmdline): pass the URL in ${DB_ENV} or a --db-file instead")
        return flag
    env = taken().get(DB_ENV)
    if env:
        return env
    if db_file:
        return read_secret_file(db_file, "--db-file")
    return default


def _has_password(url: str) -> bool:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).password is not None
    except (ArgumentError, ValueError):
        return False
