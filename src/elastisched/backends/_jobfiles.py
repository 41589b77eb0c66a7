"""A job's directory on this machine, and how the service (root, when jobs run as other accounts) touches the
parts a job can write without being led elsewhere by it (issue 23).

    jobs/<id>/            the service's, 0711: a job can reach what it is given but cannot list, rename or plant
      g<gen>.argv         the job's account, 0600: its arguments (`_argv`; never on a command line)
      logs/               the service's, 0711; g<gen>-r<rank>.log belong to the job's account, 0600
      run/ ckpt/ home/    the job's account, 0700: exit files, checkpoints and hints, HOME and working dir

The service creates every file in a directory of its own with O_EXCL/O_NOFOLLOW and hands it over with
`fchown`; in a directory the job owns it reads with O_NOFOLLOW|O_NONBLOCK and only regular files (a FIFO or
a link to the token planted there is neither followed nor waited on), and writes a new file under a random
name, then renames it over the target (a planted link is replaced, never written through). With no account
(isolation `none`) everything belongs to the service, modes as above.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from elastisched.backends.identity import Account

JOB_OWNED = ("run", "ckpt", "home")
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def prepare(jd: Path, acct: Account | None) -> None:
    """Create (or re-own) the job's directory for a launch as `acct`."""
    jd.parent.mkdir(parents=True, exist_ok=True)
    shared = 0o711 if acct is not None else 0o700
    if acct is not None:
        jd.parent.chmod(0o711)
    for d, mode in ((jd, shared), (jd / "logs", shared)):
        d.mkdir(mode=mode, exist_ok=True)
        d.chmod(mode)
    for sub in JOB_OWNED:
        d = jd / sub
        d.mkdir(mode=0o700, exist_ok=True)
        if acct is not None:
            _own(d, acct)


def _own(d: Path, acct: Account) -> None:
    """Hand `d` to `acct`; a directory the service owned (a job run before isolation was on) is handed over
    whole, so the job can read its earlier checkpoints. A directory of another account keeps its contents."""
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError(f"{d} is not a directory")
    if st.st_uid == acct.uid and st.st_gid == acct.gid:
        return
    if st.st_uid == os.geteuid():
        for root, dirs, files in os.walk(d):
            for name in (*dirs, *files):
                os.lchown(os.path.join(root, name), acct.uid, acct.gid)
    os.lchown(d, acct.uid, acct.gid)


def open_owned(path: Path, acct: Account | None, *, append: bool = True) -> int:
    """A descriptor for writing `path` (in a directory of the service's), created 0600 and handed to `acct`."""
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        if acct is not None:
            os.fchown(fd, acct.uid, acct.gid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_owned(path: Path, data: bytes, acct: Account | None) -> Path:
    """Write a new private file `path` for `acct` (in a directory of the service's)."""
    fd = open_owned(path, acct, append=False)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def write_into(d: Path, name: str, data: bytes) -> Path:
    """Replace `d/name` atomically in a directory the job may own: a fresh file under a random name (O_EXCL,
    so never through a planted link), given to the directory's owner, renamed over the target."""
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    try:
        tmp = f".{name}.{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            owner = os.fstat(dfd)
            os.fchown(fd, owner.st_uid, owner.st_gid)
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)
    return d / name


def read_regular(path: Path, start: int = 0, limit: int = 1 << 20) -> bytes | None:
    """Up to `limit` bytes of `path` from `start` if it is a regular file reached without a link; else None
    (missing, a link, a FIFO, a device, unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if start >= st.st_size:
            return b""
        with contextlib.suppress(OSError):
            return os.pread(fd, limit, start)
        return None
    finally:
        os.close(fd)
