"""Users, tokens and file permissions of the service (issue 11 item 9).

A token is `est_<id>_<secret>`: the id finds its row, the secret is checked against `sha256(salt || secret)` with
a per-token random salt, so the database never holds a usable token. A principal is a user name and whether it
is an admin; jobs carry their submitter's name (`jobs.owner`) and a non-admin sees and acts on its own jobs only.
The single token of earlier versions (`ELASTISCHED_TOKEN`, `<workdir>/token`) keeps working as the admin
`admin`. Verified tokens are cached for `CACHE_S` seconds (the check runs before every request), so a revoked
token stops working within that time in a running service.

The service's files hold job scripts' arguments, logs and tokens: `secure_workdir` makes the workdir 0700 and the
process umask 077, so the database, its WAL/SHM, logs and token files are created 0600 (never chmod-ed after the
fact). Jobs run as the service's user, so a job can still read files of that user; what it no longer gets is
the token in its environment (`server.build` removes it before any worker is spawned).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Boolean, Column, Float, String, Table, insert, select, update

from elastisched.service.store import Store, meta

tokens = Table(
    "tokens", meta,
    Column("id", String(16), primary_key=True),
    Column("user", String(64), nullable=False, index=True),
    Column("admin", Boolean, nullable=False, default=False),
    Column("salt", String(32), nullable=False),
    Column("hash", String(64), nullable=False),  # sha256(salt || secret), hex
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float),
)

USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
TOKEN_RE = re.compile(r"^est_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")
CACHE_S = 10.0
LEGACY_USER = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who sent a request."""

    user: str
    admin: bool


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


def create_token(store: Store, user: str, *, admin: bool = False) -> tuple[str, str]:
    """A new token for `user`: (token id, token). Only the salted hash is stored; the token is shown once."""
    if not USER_RE.match(user):
        raise ValueError(f"user: {user!r} must be 1-64 characters of letters, digits and _.@- (starting with a "
                         "letter or digit)")
    tid, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_hex(16)
    with store.tx() as c:
        c.execute(insert(tokens).values(id=tid, user=user, admin=admin, salt=salt, hash=_digest(salt, secret),
                                        created_at=time.time()))
    return tid, f"est_{tid}_{secret}"


def list_tokens(store: Store) -> list[dict[str, Any]]:
    """Token ids with their user, role and dates (never a secret or hash)."""
    q = select(tokens.c.id, tokens.c.user, tokens.c.admin, tokens.c.created_at, tokens.c.revoked_at)
    with store.tx() as c:
        return [dict(r._mapping) for r in c.execute(q.order_by(tokens.c.created_at))]


def revoke_token(store: Store, token_id: str) -> bool:
    """Mark a token revoked; False if there is no such live token."""
    with store.tx() as c:
        n = c.execute(update(tokens).where((tokens.c.id == token_id) & tokens.c.revoked_at.is_(None))
                      .values(revoked_at=time.time())).rowcount
    return bool(n)


def lookup(store: Store, token: str) -> Principal | None:
    """The principal of a `est_...` token, or None (unknown, wrong secret, revoked)."""
    m = TOKEN_RE.match(token)
    if m is None:
        return None
    with store.read() as c:  # a read: never behind the writers' lock
        r = c.execute(select(tokens.c.user, tokens.c.admin, tokens.c.salt, tokens.c.hash)
                      .where((tokens.c.id == m[1]) & tokens.c.revoked_at.is_(None))).first()
    if r is None or not secrets.compare_digest(_digest(r[2], m[2]), r[3]):
        return None
    return Principal(str(r[0]), bool(r[1]))


class Authenticator:
    """Bearer token → principal: the legacy admin token in memory, per-user tokens through the store."""

    def __init__(self, store: Store, legacy_token: str | None) -> None:
        self.store = store
        self._legacy = hashlib.sha256(legacy_token.encode()).digest() if legacy_token else None
        self._cache: dict[bytes, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def fast(self, token: str) -> Principal | None:
        """Without I/O: the legacy token or a recently verified one (safe to call on the event loop)."""
        h = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        if self._legacy is not None and secrets.compare_digest(h, self._legacy):
            return Principal(LEGACY_USER, True)
        hit = self._cache.get(h)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        return None

    def slow(self, token: str) -> Principal | None:
        """A database lookup (run it in a worker thread); caches a success."""
        p = lookup(self.store, token)
        if p is not None:
            h = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[h] = (time.monotonic() + CACHE_S, p)
        return p


# ---------------------------------------------------------------------------------------------- file permissions
def secure_workdir(workdir: Path, *, shared: bool | None = False) -> Path:
    """Create (or tighten) the workdir to 0700 and set the process umask to 077: everything the service creates
    from now on (database, WAL, logs, checkpoints, token) is private to its user from the first byte. `shared`
    (jobs run as other accounts): 0711, so a job reaches its own directory by name and lists nothing; None (a
    command beside a running service, e.g. `token create`): an existing workdir keeps its mode if it is one
    of the two."""
    os.umask(0o077)
    mode = 0o711 if shared else 0o700
    if shared is None and workdir.is_dir() and (workdir.stat().st_mode & 0o777) in (0o700, 0o711):
        return workdir
    workdir.mkdir(parents=True, exist_ok=True, mode=mode)
    workdir.chmod(mode)
    return workdir


def precreate_private(path: Path) -> None:
    """Create `path` empty with mode 0600 if missing (SQLite gives its WAL and SHM files the database's mode);
    an existing file of ours that others may read (made under another umask) is made 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        st = path.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                if p.exists():
                    p.chmod(0o600)
        return
    os.close(fd)


def write_private(path: Path, text: str) -> None:
    """Write a new file that is 0600 before it holds a byte (O_EXCL: never through an existing file or link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def sqlite_path(url: str) -> Path | None:
    """The file behind a `sqlite:///PATH` URL (None for memory or another database)."""
    if not url.startswith("sqlite:///") or url.endswith(":memory:"):
        return None
    return Path(url[len("sqlite:///"):].split("?", 1)[0])

