"""Which Unix account a job runs as (issue 23): a job is not its owner's way into the service.

A service that may switch users (it runs as root) starts every job's processes under the account its
elastisched user maps to, never its own: the account named for that user in `--user-map`; else, with
`--create-job-users`, `es-<user>` (an unprivileged system account without home or shell, created at the
user's first launch); else the login account of the same name. An account that is root, the service's own,
in group 0, or (found by name alone) a system account below UID_MIN is refused, so an elastisched user who
happens to be called `postgres` never gets the database's files. The mode is `users`; a service that cannot
switch users runs jobs as itself (`none`: docs/security.md says what that cannot promise).

`probe` checks at start that an account other than the service's can run the job interpreter and import
the package (the wrapper and the entry point), so a deployment whose Python lives in a private directory
fails once, at start, naming the path, instead of failing every job.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

UNIX_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
CREATED_PREFIX = "es-"
NOBODY_UID = 65534


class IdentityError(RuntimeError):
    """No account may run this user's jobs; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Account:
    """A Unix account jobs run as (`uid`, its primary `gid`; supplementary groups are dropped)."""

    name: str
    uid: int
    gid: int


def can_switch_users() -> bool:
    """Whether this process may start children as another uid (effective uid 0)."""
    return os.geteuid() == 0


def created_name(user: str) -> str:
    """`es-<user>` for `--create-job-users`: the user's name when it is already a valid lower-case Unix name
    of at most 28 characters, else a sanitised prefix plus 6 hex digits of its hash (so `Alice` and `alice`,
    distinct elastisched users, get distinct accounts)."""
    if UNIX_NAME.match(user) and len(user) <= 28:
        return CREATED_PREFIX + user
    clean = re.sub(r"[^a-z0-9_-]", "-", user.lower())[:21].strip("-") or "u"
    return f"{CREATED_PREFIX}{clean}-{hashlib.sha256(user.encode()).hexdigest()[:6]}"


def read_user_map(path: str | os.PathLike[str]) -> dict[str, str]:
    """`--user-map FILE`: one `ELASTISCHED_USER UNIX_ACCOUNT` pair a line; `#` starts a comment."""
    out: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise IdentityError(f"--user-map: cannot read {str(path)!r}: {e}") from None
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        if len(parts) != 2 or not UNIX_NAME.match(parts[1]):
            raise IdentityError(f"--user-map: line {n} of {str(path)!r} must be `USER ACCOUNT` (a Unix name)")
        out[parts[0]] = parts[1]
    return out


def uid_min() -> int:
    """UID_MIN of /etc/login.defs (1000 when unset): below it are system accounts."""
    try:
        for line in Path("/etc/login.defs").read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "UID_MIN" and parts[1].isdigit():
                return int(parts[1])
    except OSError:
        pass
    return 1000


class JobUsers:
    """Elastisched user -> `Account` (mode `users`), or None for every user (mode `none`)."""

    def __init__(self, mode: str = "none", user_map: Mapping[str, str] | None = None, create: bool = False) -> None:
        if mode not in ("users", "none"):
            raise ValueError(f"isolation mode {mode!r}: users or none")
        self.mode, self.user_map, self.create = mode, dict(user_map or {}), create
        self._cache: dict[str, Account] = {}

    def account(self, user: str | None) -> Account | None:
        """The account `user`'s jobs run as (None: they run as the service). Raises `IdentityError`."""
        if self.mode == "none":
            return None
        user = user or "admin"  # jobs of a store without owners: the legacy admin's
        hit = self._cache.get(user)
        if hit is None:
            hit = self._cache[user] = self._resolve(user)
        return hit

    def _resolve(self, user: str) -> Account:
        if user in self.user_map:
            return _checked(user, self.user_map[user], _lookup(self.user_map[user]), by_name=False)
        if self.create:
            name = created_name(user)
            entry = _lookup(name) or _create(name, user)
            return _checked(user, name, entry, by_name=False)
        name = user if UNIX_NAME.match(user) else ""
        entry = _lookup(name) if name else None
        if entry is None:
            raise IdentityError(f"no Unix account for elastisched user {user!r}: create one named {user!r}, map "
                                "the user to an account in --user-map, or start the service with --create-job-users")
        return _checked(user, name, entry, by_name=True)


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _create(name: str, user: str) -> pwd.struct_passwd:
    """An unprivileged system account for `user`'s jobs: own group, no home, no login shell."""
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    shell = next((s for s in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(s)), "/bin/false")
    r = subprocess.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", shell, "--comment", f"elastisched jobs of {user}"[:60], name],
                       capture_output=True, text=True, timeout=60, check=False)
    entry = _lookup(name)
    if entry is None:
        raise IdentityError(f"cannot create job account {name!r} for user {user!r}: "
                            f"{(r.stderr or r.stdout).strip()[:300] or f'useradd exited {r.returncode}'}")
    return entry


def _checked(user: str, name: str, entry: pwd.struct_passwd | None, *, by_name: bool) -> Account:
    if entry is None:
        raise IdentityError(f"user {user!r} maps to Unix account {name!r}, which does not exist")
    why = None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        why = "is root or in group 0"
    elif entry.pw_uid == os.geteuid():
        why = "is the service's own account"
    elif by_name and entry.pw_uid < uid_min():
        why = f"is a system account (uid {entry.pw_uid} < UID_MIN); map it explicitly in --user-map if you mean it"
    if why:
        raise IdentityError(f"user {user!r} may not run jobs as {name!r}: the account {why}")
    return Account(name, entry.pw_uid, entry.pw_gid)


def unreadable(path: str | os.PathLike[str], acct: Account) -> str | None:
    """Why `acct` (its uid and primary group only: jobs get no supplementary groups) cannot read the file
    `path`, by the mode bits along the way (None: it can; ACLs are not consulted)."""
    p = Path(path)
    for d, need in [*((a, 0o1) for a in reversed(p.parents)), (p, 0o4)]:
        try:
            st = os.stat(d)
        except OSError as e:
            return f"{d}: {e.strerror or e}"
        bits = (st.st_mode >> 6 if st.st_uid == acct.uid else st.st_mode >> 3 if st.st_gid == acct.gid
                else st.st_mode) & 0o7
        if not bits & need:
            what = "cannot be searched" if need == 0o1 else "cannot be read"
            return f"{d} {what} by job account {acct.name} (uid {acct.uid}; mode {st.st_mode & 0o7777:04o})"
    return None


def probe(python: str, env: Mapping[str, str], reach: Path) -> str | None:
    """Why an account other than the service's cannot run jobs (None: it can): it must execute `python`,
    import the wrapper and the entry point, and reach `reach` (the jobs directory). Run as `nobody`."""
    code = ("import os, sys, elastisched.backends._wrap, elastisched.backends._argv; "
            f"os.stat({str(reach)!r})")
    try:
        r = subprocess.run([python, "-c", code], env=dict(env), cwd="/", capture_output=True, text=True, timeout=60,
                           user=NOBODY_UID, group=NOBODY_UID, extra_groups=[], check=False)
    except OSError as e:
        return f"cannot execute {python}: {e.strerror or e}"
    except subprocess.TimeoutExpired:
        return f"{python} did not start within 60 s"
    if r.returncode == 0:
        return None
    lines = [ln for ln in (r.stderr or r.stdout).strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else f"exited {r.returncode}"
