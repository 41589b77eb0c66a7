"""A throwaway PostgreSQL server from the distribution's packages (`apt-get install postgresql`), for the live
benchmarks and their tests: `initdb` in a temporary directory, `postgres` on a free loopback port (and a Unix
socket in that directory), one database, trust authentication for the local user only; stopped and removed on
exit. Run as root (CI), the server runs as the `postgres` account the package creates (PostgreSQL refuses root).

Imported by its bare name, as `_harness` is: run as scripts the benchmarks' folder is on `sys.path`; a test that
loads a benchmark from a file puts it there first.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from _harness import free_port


class PostgresMissing(RuntimeError):
    """No PostgreSQL server binaries here (`apt-get install postgresql`), or no Python driver (psycopg)."""


def _bindir() -> Path:
    """The server binaries: `pg_config --bindir` where it points at `initdb`, else Debian's versioned dirs."""
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = Path(subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip())
        if (out / "initdb").is_file():
            return out
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    if shutil.which("initdb"):
        return Path(str(shutil.which("initdb"))).parent
    raise PostgresMissing("no PostgreSQL server here: apt-get install postgresql")


def _as_user() -> tuple[list[str], str]:
    """The command prefix that runs the server's tools, and the role they create: ourselves, or `postgres`."""
    if os.geteuid() != 0:
        return [], pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresMissing("running as root needs the `postgres` account (apt-get install postgresql)") from None
    return ["runuser", "-u", "postgres", "--"], "postgres"


@contextlib.contextmanager
def postgres(db: str = "elastisched") -> Iterator[str]:
    """A running server with database `db`; yields its SQLAlchemy URL (psycopg 3 driver, loopback TCP)."""
    try:
        import psycopg  # noqa: F401  (the service's driver for postgresql+psycopg URLs)
    except ImportError:
        raise PostgresMissing("no psycopg: pip install 'psycopg[binary]'") from None
    bindir, (prefix, role) = _bindir(), _as_user()
    root = Path(tempfile.mkdtemp(prefix="elastisched-pg-"))
    data, port = root / "data", free_port()
    if prefix:
        shutil.chown(root, "postgres", "postgres")
    run = lambda *cmd: subprocess.run([*prefix, *cmd], check=True, capture_output=True, text=True)  # noqa: E731
    try:
        try:
            run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", role, "--no-sync", "-E", "UTF8")
            run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60", "-o",
                f"-h 127.0.0.1 -p {port} -k {root} -c max_connections=200", "start")
            run(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", role, db)
        except subprocess.CalledProcessError as e:
            why = (e.stderr or e.stdout or "")[-2000:]
            raise PostgresMissing(f"{Path(e.cmd[len(prefix)]).name} failed: {why}") from None
        yield f"postgresql+psycopg://{role}@127.0.0.1:{port}/{db}"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "30", "stop")
        shutil.rmtree(root, ignore_errors=True)
