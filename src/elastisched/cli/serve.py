"""`elastisched serve`: the API and the engine loop in one process, with a banner saying where to point a
browser and where the admin token is. FastAPI, uvicorn and SQLAlchemy are imported inside the command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer


def serve(
    db: str = typer.Option(None, "--db", help="SQLAlchemy URL (default sqlite:///<workdir>/elastisched.db)"),
    cluster: str = typer.Option("2x4:cpu", "--cluster", help="nodes, e.g. 2x4:cpu or 6x4:t4,2x8:a100 (no type: cpu)"),
    policy: str = typer.Option("elastisched", "--policy", help="a policy spec, as sim run -p takes"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8470, "--port"),
    workdir: Path = typer.Option(Path(".elastisched"), "--workdir", help="logs, checkpoints, token"),
    scripts_dir: Path = typer.Option(None, "--scripts-dir", help="job scripts must live under it (default: an "
                                     "empty <workdir>/scripts)"),
    tick: float = typer.Option(0.5, "--tick", min=0.05, help="engine loop period (s)"),
    policy_interval: float = typer.Option(None, "--policy-interval", min=0.1, help="period of a periodic "
                                          "policy's rounds (s; default the policy's own, e.g. pollux 60)"),
    grace: float = typer.Option(15.0, "--grace", min=0.0, help="checkpoint deadline before SIGKILL (s)"),
    max_retries: int = typer.Option(2, "--max-retries", min=0, help="relaunches of a failed job"),
    max_follows: int = typer.Option(32, "--max-follows", min=1, help="concurrent `logs --follow` streams"),
    profiles: Path = typer.Option(None, "--profiles", help="measured profiles (elastisched profile), one dir "
                                  "per application, used as performance models next to the bundled ones"),
    backend: str = typer.Option("local", "--backend", help="local, ray, slurm or fake (docs/ray, slurm, scale.md)"),
    fake_mtbf: float = typer.Option(None, "--fake-mtbf", help="fake: mean s until a generation fails"),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster for --backend ray: auto or HOST:PORT"),
    db_file: Path = typer.Option(None, "--db-file", help="file holding the database URL (a URL with a password "
                                 "never goes on the command line: this, or $ELASTISCHED_DB)"),
    token_file: Path = typer.Option(None, "--token-file", help="file holding the admin token (else "
                                    "$ELASTISCHED_TOKEN, else <workdir>/token)"),
    isolation: str = typer.Option("auto", "--isolation", help="users: jobs run as each user's Unix account "
                                  "(needs root); none: as the service; auto: users when root (docs/security.md)"),
    user_map: Path = typer.Option(None, "--user-map", help="file of `USER ACCOUNT` lines: the Unix account each "
                                  "user's jobs run as"),
    create_job_users: bool = typer.Option(False, "--create-job-users", help="create an unprivileged account "
                                          "es-<user> at each user's first launch (root)"),
    job_env: list[str] = typer.Option([], "--job-env", help="NAME (or NAME*) passed to jobs from this "
                                      "environment, or NAME=VALUE set for them (repeatable)"),
    job_python: str = typer.Option(None, "--job-python", help="interpreter jobs run under (default: this one)"),
    max_queued: int = typer.Option(1000, "--max-queued-per-user", min=1, help="queued jobs a user who is not an "
                                   "admin may have; more are refused with 429"),
    api_threads: int = typer.Option(2, "--api-threads", min=1, max=64, help="worker threads of the API's reads "
                                    "(ls, describe), and as many of submissions (docs/service.md)"),
    slurm: list[str] = typer.Option([], "--slurm", help="--backend slurm: KEY=VALUE, repeatable (docs/slurm.md)"),
) -> None:
    """Run the API and the engine loop (state in --db; workers survive a restart and are adopted)."""
    from elastisched.core.errors import ElastischedError
    from elastisched.service.isolation import JobsConfig
    from elastisched.service.secret_inputs import reexec_without_secrets
    from elastisched.service.server import serve as run

    if sys.argv[1:2] == ["serve"]:  # the command's own process (not one that calls it in-process, e.g. a test)
        reexec_without_secrets()
    jobs = JobsConfig(isolation=isolation, user_map=None if user_map is None else str(user_map),
                      create_users=create_job_users, job_env=tuple(job_env), python=job_python, max_queued=max_queued)
    try:
        tok = serve_banner(host, port, workdir, policy, cluster, jobs,
                           None if token_file is None else str(token_file), backend, scripts_dir)
        run(host=host, port=port, db=db, cluster=cluster, policy=policy, workdir=workdir, token=tok,
            scripts_dir=scripts_dir, tick_s=tick, grace_s=grace, max_retries=max_retries, max_follows=max_follows,
            profiles=None if profiles is None else str(profiles), backend=backend, ray_address=ray_address,
            policy_interval=policy_interval, jobs=jobs, db_file=None if db_file is None else str(db_file),
            fake_mtbf_s=fake_mtbf, slurm=tuple(slurm), api_threads=api_threads)
    except ElastischedError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def serve_banner(host: str, port: int, workdir: Path, policy: str, cluster: str, jobs: Any,
                 token_file: str | None = None, backend: str = "local", scripts_dir: Path | None = None) -> str:
    """Print where the service listens, the dashboard URL with its token fragment, where the token lives and
    as whom jobs run; return the admin token (resolved here, as `server.build` would, so the URL carries the
    one it uses). A `scripts_dir` that is not a directory is refused first, in one line (no URL)."""
    import socket

    from elastisched.core.errors import ConfigError
    from elastisched.service.auth import secure_workdir
    from elastisched.service.server import TOKEN_ENV, resolve_token

    if scripts_dir is not None and not scripts_dir.is_dir():
        raise ConfigError("--scripts-dir", str(scripts_dir), "is not a directory")
    mode = jobs.mode(backend)
    work = secure_workdir(workdir.resolve(), shared=mode == "users")
    tok, source = resolve_token(None, work, token_file)
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    base = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}"
    out = [f"elastisched serving on {base} (policy {policy}, cluster {cluster})",
           f"dashboard: {base}/#token={tok}"]
    if source == "env":
        out.append(f"admin token: from ${TOKEN_ENV} (not written to a file); clients use the same variable")
    elif source == "file":
        out.append(f"admin token: from {token_file}; clients: export {TOKEN_ENV}=$(cat {token_file})")
    else:
        here = f"clients run in {work.parent} read it; elsewhere " if work.name == ".elastisched" else ""
        out.append(f"admin token: {work / 'token'} ({here}export {TOKEN_ENV}=$(cat {work / 'token'}))")
    out.append(f"per-user tokens: elastisched token create --user NAME --workdir {work}")
    out.append(_jobs_line(mode, jobs, backend))
    typer.echo("\n".join(out), err=True)
    return tok


def _jobs_line(mode: str, jobs: Any, backend: str) -> str:
    if backend not in ("local", "slurm"):
        return f"jobs run as: the account of the {backend} nodes, not each user's (docs/security.md, Ray and Slurm)"
    if mode == "users":
        who = "es-<user>, created at its first launch" if jobs.create_users else "the account of the same name"
        how = " through sbatch --uid" if backend == "slurm" else ""
        return (f"jobs run as: each user's own Unix account{how} ({'--user-map, else ' if jobs.user_map else ''}"
                f"{who})")
    return ("WARNING: jobs run as this service's own account (--isolation none): a job can read the database, the "
            "token and other users' files; see docs/security.md")


def register(app: typer.Typer) -> None:
    app.command()(serve)
