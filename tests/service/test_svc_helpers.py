"""The tests' service harness (`_svc_helpers.ServiceProc`): a port found free but taken before the service binds it
(a Ray cluster's workers open ports all the time) is not a failed test, the service is started on another."""

from __future__ import annotations

import socket
from pathlib import Path

import _svc_helpers
import pytest
from _svc_helpers import ServiceProc


def test_a_port_taken_before_the_service_binds_it_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real = _svc_helpers.free_port
        monkeypatch.setattr(_svc_helpers, "free_port", lambda: next(ports, None) or real())
        svc = ServiceProc(tmp_path).start()
        try:
            assert svc.port != busy
            assert svc.api("GET", "/healthz").status_code == 200
            assert "address already in use" in svc.log_text()  # the first start really met the taken port
        finally:
            svc.stop()
