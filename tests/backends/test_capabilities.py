"""The Backend protocol declares its optional capabilities (`BackendBase` gives the defaults), so the service
calls them without probing the backend object."""

from __future__ import annotations

import re
from pathlib import Path

from elastisched.backends.base import Backend, BackendBase
from elastisched.backends.local import LocalBackend

SERVICE = Path(__file__).resolve().parents[2] / "src" / "elastisched" / "service"
OPTIONAL = ("log_paths", "loanable", "set_batch")


def test_the_protocol_declares_the_optional_capabilities() -> None:
    for name in OPTIONAL:
        assert callable(getattr(Backend, name)) and callable(getattr(BackendBase, name))


def test_defaults_are_no_logs_virtual_loans_and_no_batch_channel(tmp_path: Path) -> None:
    base = BackendBase()
    assert base.log_paths("j") == [] and base.loanable() is None and base.set_batch("j", 8) is None
    local = LocalBackend(tmp_path)
    assert local.loanable() is None  # loans on the local backend are virtual nodes
    logs = tmp_path / "jobs" / "j" / "logs"
    logs.mkdir(parents=True)
    for name in ("g2-r0.log", "g1-r1.log", "g1-r0.log", "g10-r0.log"):
        (logs / name).write_text("")
    assert [p.name for p in local.log_paths("j")] == ["g1-r0.log", "g1-r1.log", "g2-r0.log", "g10-r0.log"]


def test_the_service_never_probes_a_backend_with_getattr() -> None:
    probes = [f"{p.name}: {line.strip()}" for p in SERVICE.rglob("*.py") for line in p.read_text().splitlines()
              if re.search(r"getattr\([^)]*backend", line)]
    assert probes == []
