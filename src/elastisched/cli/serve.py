"""`elastisched serve`: the API and the engine loop in one process, with a banner saying where to point a
browser and where the admin token is. FastAPI, uvicorn and SQLAlchemy are imported inside the command."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def serve(
    db: str = typer.Option(None, "--db", help="SQLAlchemy URL (default sqlite:///<workdir>/elastisched.db)"),
    cluster: str = typer.Option("2x4:cpu", "--cluster", help="node inventory, e.g. 2x4:cpu or 6x4:t4,2x8:a100 "
                                "(a part without a type is cpu; t4 under --backend fake)"),
    policy: str = typer.Option("fifo", "--policy", help="any registered policy (elastisched policies)"),
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
    backend: str = typer.Option("local", "--backend", help="local (processes here), ray (docs/ray.md), or fake: "
                                "nodes that exist only in the service, jobs that run by their performance model "
                                "(scale tests; --cluster 1000x8:t4 or a mix such as 500x8:t4,200x4:v100)"),
    fake_mtbf: float = typer.Option(None, "--fake-mtbf", help="--backend fake: mean seconds until a running "
                                    "generation fails (default: never)"),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster for --backend ray: auto or HOST:PORT"),
) -> None:
    """Run the API and the engine loop (state in --db; workers survive a restart and are adopted)."""
    from elastisched.core.errors import ConfigError, ElastischedError
    from elastisched.service.server import serve as run

    try:
        if scripts_dir is not None and not scripts_dir.is_dir():  # before the banner: one line, no URL
            raise ConfigError("--scripts-dir", str(scripts_dir), "is not a directory")
        tok = serve_banner(host, port, workdir, policy, cluster)
        run(host=host, port=port, db=db, cluster=cluster, policy=policy, workdir=workdir, token=tok,
            scripts_dir=scripts_dir, tick_s=tick, grace_s=grace, max_retries=max_retries, max_follows=max_follows,
            profiles=None if profiles is None else str(profiles), backend=backend, ray_address=ray_address,
            policy_interval=policy_interval, fake_mtbf_s=fake_mtbf)
    except ElastischedError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


def serve_banner(host: str, port: int, workdir: Path, policy: str, cluster: str) -> str:
    """Print where the service listens, the dashboard URL with its token fragment and where the token lives;
    return the admin token (resolved here, as `server.build` would, so the URL carries the one it uses)."""
    import socket

    from elastisched.service.auth import secure_workdir
    from elastisched.service.server import TOKEN_ENV, resolve_token

    work = secure_workdir(workdir.resolve())
    from_env = bool(os.environ.get(TOKEN_ENV))
    tok = resolve_token(None, work)
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    base = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}"
    out = [f"elastisched serving on {base} (policy {policy}, cluster {cluster})",
           f"dashboard: {base}/#token={tok}"]
    if from_env:
        out.append(f"admin token: from ${TOKEN_ENV} (not written to a file); clients use the same variable")
    else:
        here = f"clients run in {work.parent} read it; elsewhere " if work.name == ".elastisched" else ""
        out.append(f"admin token: {work / 'token'} ({here}export {TOKEN_ENV}=$(cat {work / 'token'}))")
    out.append(f"per-user tokens: elastisched token create --user NAME --workdir {work}")
    typer.echo("\n".join(out), err=True)
    return tok


def register(app: typer.Typer) -> None:
    app.command()(serve)
