"""Assemble store + local backend + engine loop + API and run them under uvicorn (`elastisched serve`)."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from fastapi import FastAPI

from elastisched.backends.local import LocalBackend
from elastisched.core.cluster import parse_cluster
from elastisched.service.app import create_app
from elastisched.service.daemon import Service
from elastisched.service.store import Store

TOKEN_ENV = "ELASTISCHED_TOKEN"


def default_db(workdir: str | os.PathLike[str]) -> str:
    return f"sqlite:///{Path(workdir).resolve() / 'elastisched.db'}"


def resolve_token(token: str | None, workdir: Path) -> str:
    """The token from the flag or ELASTISCHED_TOKEN; else a fresh one written to <workdir>/token (0600)."""
    token = token or os.environ.get(TOKEN_ENV)
    if token:
        return token
    path = workdir / "token"
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(24)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


def build(*, db: str | None, cluster: str, policy: str, workdir: str | os.PathLike[str],
          scripts_dir: str | os.PathLike[str], token: str | None = None, tick_s: float = 0.5,
          grace_s: float = 15.0, max_retries: int = 2, seed: int = 0, profiles: str | None = None,
          python: str = sys.executable) -> tuple[FastAPI, Service, str]:
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    store = Store(db or default_db(work))
    nodes = parse_cluster(cluster, default_gpu_type="cpu")
    backend = LocalBackend(work, python=python, grace_s=grace_s, nodes=nodes)
    service = Service(store, nodes, backend, policy, tick_s=tick_s, seed=seed, max_retries=max_retries,
                      profiles_dir=None if profiles is None else str(Path(profiles).resolve()))
    tok = resolve_token(token, work)
    return create_app(service, tok, scripts_dir), service, tok


def serve(*, host: str = "127.0.0.1", port: int = 8470, **kwargs: object) -> None:
    import uvicorn

    app, _service, _tok = build(**kwargs)  # type: ignore[arg-type]
    # The engine thread is CPU-bound during a round; a request thread waiting for the GIL would wait the default
    # 5 ms switch interval at each of its hand-offs (event loop <-> thread pool). 1 ms bounds that wait.
    sys.setswitchinterval(0.001)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
