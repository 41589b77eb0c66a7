"""Issue 23's pieces of the local backend, one at a time: which account a user's jobs run as, a job's
environment, and the service's reads and writes in a directory a job owns (links and FIFOs planted there)."""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
import time
from pathlib import Path

import pytest

from elastisched.backends import _jobfiles
from elastisched.backends.hints import read_hints, write_batch_target
from elastisched.backends.identity import Account, IdentityError, JobUsers, created_name, read_user_map, unreadable
from elastisched.backends.job_env import JobEnv, parse_job_env, spec_env_problem

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another account)")
NOBODY = Account("nobody", 65534, 65534)


def test_created_account_names_are_unix_names_and_distinct_per_user() -> None:
    names = {u: created_name(u) for u in ("alice", "Alice", "a.b@c", "x" * 64, "bob-1")}
    assert names["alice"] == "es-alice" and names["bob-1"] == "es-bob-1"
    assert len(set(names.values())) == len(names) and all(len(n) <= 32 for n in names.values())
    assert all(n.startswith("es-") and n.replace("-", "").replace("_", "").isalnum() and n == n.lower()
               for n in names.values()), names


def test_no_user_maps_to_root_the_service_or_a_system_account(tmp_path: Path) -> None:
    service = pwd.getpwuid(os.geteuid()).pw_name
    m = tmp_path / "map"
    m.write_text(f"# user account\nmallory root\neve {service}\nsys daemon\n")
    users = JobUsers("users", read_user_map(m))
    for user, why in (("mallory", "root"), ("eve", "root" if os.geteuid() == 0 else "service's own")):
        with pytest.raises(IdentityError, match=why):
            users.account(user)
    assert users.account("sys") is not None  # named in the map: the admin means it
    with pytest.raises(IdentityError, match="system account"):
        JobUsers("users").account("daemon")  # found by name alone: refused
    with pytest.raises(IdentityError, match="no Unix account"):
        JobUsers("users").account("nobody-here-xyz")
    assert JobUsers("none").account("alice") is None  # jobs run as the service
    m.write_text("alice\n")
    with pytest.raises(IdentityError, match="line 1"):
        read_user_map(m)


def test_a_job_env_is_the_allow_list_then_its_own_then_the_contract() -> None:
    source = {"PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "NCCL_DEBUG": "INFO", "ELASTISCHED_TOKEN": "tok",
              "ELASTISCHED_DB": "postgresql://u:p@h/d", "AWS_SECRET_ACCESS_KEY": "k", "HOME": "/root", "EXTRA": "1"}
    allow, fixed = parse_job_env(["EXTRA", "FIXED=2"])
    env = JobEnv(source, allow, fixed).build({"MINE": "x", "RANK": "9"}, {"RANK": "0"}, home="/h", user="es-a")
    assert env == {"PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "NCCL_DEBUG": "INFO", "EXTRA": "1",
                   "FIXED": "2", "HOME": "/h", "MINE": "x", "USER": "es-a", "LOGNAME": "es-a", "RANK": "0",
                   "OMP_NUM_THREADS": "1"}
    assert JobEnv({}).base["PATH"]  # a default search path when the service has none
    for bad in (["ELASTISCHED_TOKEN"], ["A B"], ["X*=1"]):
        with pytest.raises(ValueError):
            parse_job_env(bad)
    assert spec_env_problem({"MASTER_PORT": "1"}) and spec_env_problem({"A": "x" * 40000})
    assert spec_env_problem({f"V{i}": "1" for i in range(65)}) and spec_env_problem({"OK_1": "fine"}) is None


def test_reads_in_a_job_directory_follow_no_link_and_wait_on_no_fifo(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("the-admin-token\n")
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "hints.jsonl").symlink_to(secret)
    assert read_hints(d / "hints.jsonl", 0, "j") == (None, 0)
    assert _jobfiles.read_regular(d / "hints.jsonl") is None
    os.mkfifo(d / "fifo")
    t0 = time.monotonic()
    assert _jobfiles.read_regular(d / "fifo") is None and time.monotonic() - t0 < 1  # no writer: no wait
    (d / "ok").write_text("0 SIGTERM")
    assert _jobfiles.read_regular(d / "ok") == b"0 SIGTERM" and _jobfiles.read_regular(d / "ok", 2) == b"SIGTERM"


def test_a_write_into_a_job_directory_replaces_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "batch-target.json").symlink_to(victim)
    write_batch_target(d, 256, 3)
    assert victim.read_text() == "untouched"
    target = d / "batch-target.json"
    assert not target.is_symlink() and '"batch_size": 256' in target.read_text()
    assert sorted(p.name for p in d.iterdir()) == ["batch-target.json"]  # no temporary left behind
    log = tmp_path / "g1-r0.log"
    log.symlink_to(victim)
    with pytest.raises(OSError):  # a file the service creates in its own directory: never through a link
        _jobfiles.open_owned(log, None)
    assert victim.read_text() == "untouched"


@root_only
def test_a_job_directory_belongs_to_the_service_and_its_parts_to_the_account(tmp_path: Path) -> None:
    jd = tmp_path / "jobs" / "abc"
    _jobfiles.prepare(jd, NOBODY)
    log = _jobfiles.open_owned(jd / "logs" / "g1-r0.log", NOBODY)
    os.close(log)
    _jobfiles.write_owned(jd / "g1.argv", b'["x.py"]', NOBODY)
    want = {jd: (0, 0o711), jd / "logs": (0, 0o711), jd / "run": (NOBODY.uid, 0o700),
            jd / "ckpt": (NOBODY.uid, 0o700), jd / "home": (NOBODY.uid, 0o700),
            jd / "logs" / "g1-r0.log": (NOBODY.uid, 0o600), jd / "g1.argv": (NOBODY.uid, 0o600)}
    got = {p: (p.lstat().st_uid, stat.S_IMODE(p.lstat().st_mode)) for p in want}
    assert got == want
    write_batch_target(jd / "ckpt", 64, 1)  # the file goes to the directory's owner, so the job can read it
    assert (jd / "ckpt" / "batch-target.json").stat().st_uid == NOBODY.uid
    old = tmp_path / "jobs" / "old"  # a job of the service's (isolation was off): handed over whole
    (old / "ckpt").mkdir(parents=True)
    (old / "ckpt" / "model.pt").write_text("weights")
    _jobfiles.prepare(old, NOBODY)
    assert (old / "ckpt" / "model.pt").stat().st_uid == NOBODY.uid


@root_only
def test_a_script_the_account_cannot_read_is_named_with_the_reason() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # pytest's own tmp root is 0700
        os.chmod(tmp, 0o755)
        _check_readable(Path(tmp))


def _check_readable(tmp_path: Path) -> None:
    open_dir, closed = tmp_path / "open", tmp_path / "closed"
    for d, mode in ((open_dir, 0o755), (closed, 0o700)):
        d.mkdir()
        d.chmod(mode)
        (d / "s.py").write_text("print(1)")
        (d / "s.py").chmod(0o644)
    assert unreadable(open_dir / "s.py", NOBODY) is None
    assert "closed cannot be searched by job account nobody" in str(unreadable(closed / "s.py", NOBODY))
    (open_dir / "s.py").chmod(0o600)
    assert "s.py cannot be read" in str(unreadable(open_dir / "s.py", NOBODY))
    os.chown(open_dir / "s.py", NOBODY.uid, NOBODY.gid)  # its own file
    assert unreadable(open_dir / "s.py", NOBODY) is None
