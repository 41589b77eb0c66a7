"""Assemble store + backend (local, Ray or fake) + engine loop + API and run them under uvicorn (`elastisched serve`).

Shutdown (SIGTERM/SIGINT) always ends within `--grace` seconds (at least 1): open log follows end at their
next poll, uvicorn stops waiting for connections after half of it, and a watchdog exits the process when the
rest has not finished in time. Exiting then loses nothing: the store is written before the service acts, and
workers outlive the service by design (a restart adopts them).
"""

from __future__ import annotations

import gc
import logging
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from elastisched.backends.local import LocalBackend
from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError
from elastisched.core.types import NodeView
from elastisched.service import secret_inputs
from elastisched.service.app import create_app
from elastisched.service.auth import precreate_private, secure_workdir, sqlite_path, write_private
from elastisched.service.daemon import Service
from elastisched.service.isolation import JobsConfig
from elastisched.service.logstream import Follows
from elastisched.service.routes.context import API_THREADS, API_THREADS_MAX
from elastisched.service.secret_inputs import TOKEN_ENV, check_admin_token, read_secret_file
from elastisched.service.store import Store

BACKENDS = ("local", "ray", "slurm", "fake")
log = logging.getLogger("elastisched.service")


def default_db(workdir: str | os.PathLike[str]) -> str:
    return f"sqlite:///{Path(workdir).resolve() / 'elastisched.db'}"


def default_scripts_dir(workdir: str | os.PathLike[str]) -> Path:
    """`<workdir>/scripts`, created empty: without `--scripts-dir` the service runs only what is put there."""
    return Path(workdir).resolve() / "scripts"


def resolve_token(token: str | None, workdir: Path, token_file: str | None = None) -> tuple[str, str]:
    """The admin token and where it came from: the argument, $ELASTISCHED_TOKEN (handed over by the re-exec,
    `secret_inputs`), `--token-file`, else `<workdir>/token` (a fresh one is written there, 0600 from its
    creation). A token shorter than `MIN_TOKEN_CHARS` is refused."""
    env = secret_inputs.taken().get(TOKEN_ENV)
    if token:
        return check_admin_token(token, "token"), "arg"
    if env:
        return check_admin_token(env, f"${TOKEN_ENV}"), "env"
    if token_file:
        return check_admin_token(read_secret_file(token_file, "--token-file"), "--token-file"), "file"
    path = workdir / "token"
    if path.exists():
        return check_admin_token(path.read_text().strip(), str(path)), "workdir"
    token = secrets.token_urlsafe(24)
    write_private(path, token + "\n")
    return token, "workdir"


def build(*, db: str | None, cluster: str, policy: str, workdir: str | os.PathLike[str],
          scripts_dir: str | os.PathLike[str] | None = None, token: str | None = None, tick_s: float = 0.5,
          grace_s: float = 15.0, max_retries: int = 2, seed: int = 0, profiles: str | None = None,
          python: str = sys.executable, max_follows: int = 32,
          follow_idle_s: float = 300.0, backend: str = "local",
          ray_address: str | None = None, policy_interval: float | None = None,
          fake_mtbf_s: float | None = None, jobs: JobsConfig | None = None, db_file: str | None = None,
          token_file: str | None = None, slurm: Any = None, api_threads: int = API_THREADS
          ) -> tuple[FastAPI, Service, str]:
    """The app, its service and the admin token. `jobs`: how jobs are isolated (`service/isolation.py`);
    `api_threads`: worker threads of the API's reads, and of its submissions."""
    if not 1 <= api_threads <= API_THREADS_MAX:
        raise ConfigError("--api-threads", api_threads, f"must be 1 to {API_THREADS_MAX}")
    jobs = jobs or JobsConfig()
    mode = jobs.mode(backend)
    work = secure_workdir(Path(workdir).resolve(), shared=mode == "users")
    url = secret_inputs.database_url(db, db_file, default_db(work))
    file = sqlite_path(url)
    if file is not None:
        precreate_private(file)
    if scripts_dir is None:
        scripts_dir = default_scripts_dir(work)
        if not scripts_dir.is_dir():  # job accounts read the scripts put there (mode `users`)
            scripts_dir.mkdir()
            scripts_dir.chmod(0o755 if mode == "users" else 0o700)
    elif not Path(scripts_dir).is_dir():
        raise ConfigError("--scripts-dir", str(scripts_dir), "is not a directory")
    tok, _source = resolve_token(token, work, token_file)
    if backend not in BACKENDS:
        raise ConfigError("--backend", backend, f"must be one of {', '.join(BACKENDS)}")
    if policy_interval is not None and not (policy_interval > 0 and policy_interval < float("inf")):
        raise ConfigError("--policy-interval", str(policy_interval), "must be a positive number of seconds")
    if fake_mtbf_s is not None and (backend != "fake" or not 0 < fake_mtbf_s < float("inf")):
        raise ConfigError("--fake-mtbf", str(fake_mtbf_s), "needs --backend fake and a positive number of seconds")
    profiles_dir = None if profiles is None else str(Path(profiles).resolve())
    models = None
    if backend == "fake":  # the fake runs jobs by the models the policy sees: one set, built once
        from elastisched.service.profiles import load_models

        models = load_models(profiles_dir)
    store = Store(url)
    runner, nodes = _backend(backend, work, cluster, python, grace_s, ray_address, jobs, mode,
                             fake=(models, fake_mtbf_s, seed), slurm=slurm)
    service = Service(store, nodes, runner, policy, tick_s=tick_s, seed=seed, max_retries=max_retries,
                      policy_interval=policy_interval, models=models, profiles_dir=profiles_dir)
    follows = Follows(limit=max_follows, per_user=max(1, max_follows // 4), idle_s=follow_idle_s)
    app = create_app(service, tok, scripts_dir, follows=follows, max_queued=jobs.max_queued, isolation=mode,
                     api_threads=api_threads)
    return app, service, tok


def _backend(backend: str, work: Path, cluster: str, python: str, grace_s: float, ray_address: str | None,
             jobs: JobsConfig, mode: str, fake: tuple[Any, float | None, int],
             slurm: Any = None) -> tuple[Any, tuple[NodeView, ...]]:
    """The backend and its nodes: local processes (run as each user's account in mode `users`), Ray, Slurm
    (`slurm`: the `--slurm KEY=VALUE` words), or fake nodes that exist only in the service (`fake`: the models,
    mean time between failures, seed)."""
    if backend == "slurm":  # the inventory comes from Slurm (--cluster is not used)
        from elastisched.backends._slurm_setup import slurm_backend

        return slurm_backend(work, jobs.python or python, grace_s, jobs, mode, slurm)
    if backend == "ray":  # the inventory comes from the Ray cluster; --cluster is not used
        from elastisched.backends.ray import RayBackend

        runner = RayBackend(work, address=ray_address or "auto", grace_s=grace_s)
        nodes = runner.inventory()
        if not nodes:
            raise ConfigError("--ray-address", ray_address or "auto", "has no alive node with a gpu_<type> resource "
                              "in the train pool")
        return runner, nodes
    if backend == "fake":  # nodes that exist only in the service; the bundled profiles are of t4 GPUs
        from elastisched.backends.fake import FakeBackend

        nodes = parse_cluster(cluster, default_gpu_type="t4")
        models, mtbf_s, seed = fake
        return FakeBackend(nodes, models, mtbf_s=mtbf_s, seed=seed), nodes
    nodes = parse_cluster(cluster, default_gpu_type="cpu")
    python = jobs.python or python
    users, env = jobs.runtime(mode, python, work)
    return LocalBackend(work, python=python, grace_s=grace_s, nodes=nodes, users=users, job_env=env), nodes


def serve(*, host: str = "127.0.0.1", port: int = 8470, **kwargs: Any) -> None:
    import uvicorn

    grace = max(1.0, float(kwargs.get("grace_s", 15.0)))
    app, _service, _tok = build(**kwargs)
    # The engine thread is CPU-bound during a round; a request thread waiting for the GIL would wait the default
    # 5 ms switch interval at each of its hand-offs (event loop <-> thread pool). 1 ms bounds that wait.
    sys.setswitchinterval(0.001)
    quiet_gc()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=max(0.5, grace / 2))
    _server(config, app, grace).run()


def quiet_gc() -> None:
    """Fewer and shorter garbage collections while serving: what start-up made (modules, models, the app)
    lives for the whole run and is moved out of the collector's sight (`gc.freeze`), and the youngest
    generation is collected after 50,000 allocations rather than 700 (a request allocates a few thousand
    objects, so at 700 nearly every request paid for a collection, and each older one walked every job row
    kept in memory)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)


def _server(config: Any, app: FastAPI, grace: float) -> Any:
    """uvicorn's server whose exit signal also ends the log follows and arms the `--grace` watchdog."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.follows.closing = True
            _arm_watchdog(grace)
            super().handle_exit(sig, frame)

    return Server(config)


_armed = threading.Event()


def _arm_watchdog(grace: float) -> None:
    if _armed.is_set():
        return
    _armed.set()

    def expire() -> None:
        time.sleep(grace)
        sys.stderr.write(f"elastisched: shutdown took longer than --grace ({grace:g} s); exiting now\n")
        sys.stderr.flush()
        os._exit(1)

    threading.Thread(target=expire, name="elastisched-shutdown-watchdog", daemon=True).start()
