"""Service commands in the Slurm/Kueue tradition (ecosystem.md §B.4): serve, submit, ls, describe, logs,
cancel, resize, nodes, loans. `register(app)` adds them to the `elastisched` Typer app.

Client commands talk to the REST API (`--server` / ELASTISCHED_SERVER, token from --token, ELASTISCHED_TOKEN or
`.elastisched/token`; service/client.py). Human tables by default, `--json` for scripts; any API error exits
non-zero with the server's message (a 401 also says where the token was looked for). Heavy imports (FastAPI,
uvicorn, SQLAlchemy) happen only inside `serve`, which prints where to point a browser and where the token is.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer

from elastisched.service.client import DEFAULT_SERVER, fail, no_logs_message
from elastisched.service.client import call as _call
from elastisched.service.client import client as _client

JsonOpt = typer.Option(False, "--json", help="machine-readable output")
ServerOpt = typer.Option(None, "--server", envvar="ELASTISCHED_SERVER", help=f"API URL (default {DEFAULT_SERVER})")
TokenOpt = typer.Option(None, "--token", envvar="ELASTISCHED_TOKEN", help="bearer token (default: .elastisched/token)")


def _range(text: str | None, what: str) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        parts = [int(x) for x in text.split(":")]
    except ValueError:
        raise typer.BadParameter(f"{what}={text!r}: expected N or MIN:MAX") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or not 1 <= parts[0] <= parts[1]:
        raise typer.BadParameter(f"{what}={text!r}: expected N or MIN:MAX with 1 <= MIN <= MAX")
    return parts[0], parts[1]


def _age(t: float | None) -> str:
    if not t:
        return "-"
    s = int(max(0.0, time.time() - t))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def _table(headers: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for h in headers:
        t.add_column(h)
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    Console(width=200).print(t)


def _dump(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


def register(app: typer.Typer) -> None:
    """Add the service commands to `app`."""
    loans_app = typer.Typer(help="Servers on loan from the inference cluster (Lyra): list, offer, reclaim.")
    app.add_typer(loans_app, name="loans")
    token_app = typer.Typer(help="Per-user API tokens (stored hashed in the service's database).",
                            no_args_is_help=True)
    app.add_typer(token_app, name="token")
    _token_commands(token_app)

    @app.command()
    def serve(
        db: str = typer.Option(None, "--db", help="SQLAlchemy URL (default sqlite:///<workdir>/elastisched.db)"),
        cluster: str = typer.Option("2x4:cpu", "--cluster", help="node inventory, e.g. 2x4:cpu"),
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
        backend: str = typer.Option("local", "--backend", help="local (processes here) or ray (docs/ray.md)"),
        ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster for --backend ray: auto or HOST:PORT"),
    ) -> None:
        """Run the API and the engine loop (state in --db; workers survive a restart and are adopted)."""
        from elastisched.core.errors import ConfigError, ElastischedError
        from elastisched.service.server import serve as run

        try:
            if scripts_dir is not None and not scripts_dir.is_dir():  # before the banner: one line, no URL
                raise ConfigError("--scripts-dir", str(scripts_dir), "is not a directory")
            tok = _serve_banner(host, port, workdir, policy, cluster)
            run(host=host, port=port, db=db, cluster=cluster, policy=policy, workdir=workdir, token=tok,
                scripts_dir=scripts_dir, tick_s=tick, grace_s=grace, max_retries=max_retries, max_follows=max_follows,
                profiles=None if profiles is None else str(profiles), backend=backend, ray_address=ray_address,
                policy_interval=policy_interval)
        except ElastischedError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def submit(
        ctx: typer.Context,
        script: Path = typer.Argument(..., help="training script (arguments after it are passed through)"),
        gpus: str = typer.Option("1", "--gpus", help="N, or MIN:MAX for an elastic job"),
        batch_size: int = typer.Option(64, "--batch-size", min=1, help="global batch size"),
        adaptive: str = typer.Option(None, "--adaptive", help="adaptive global batch MIN:MAX"),
        gpu_type: str = typer.Option(None, "--gpu-type"),
        name: str = typer.Option(None, "--name"),
        duration: float = typer.Option(None, "--duration", help="runtime estimate (s) for SJF-style policies"),
        application: str = typer.Option(None, "--application", help="profiled model name (e.g. cifar10)"),
        work_scale: float = typer.Option(None, "--work-scale", min=0.0, help="job length as a multiple of "
                                         "the profiled application's run (its validation epochs)"),
        as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt,
    ) -> None:
        """Submit a job; prints its id."""
        lo, hi = _range(gpus, "--gpus") or (1, 1)
        body: dict[str, Any] = {"script": str(script.resolve()), "args": list(ctx.args), "gpus": lo, "min_gpus": lo,
                                "max_gpus": hi, "batch_size": batch_size, "name": name, "gpu_type": gpu_type,
                                "duration_s": duration, "adaptive": _range(adaptive, "--adaptive"),
                                "application": application, "work_scale": work_scale}
        out = _call(server, token, "POST", "/v1/jobs", json=body)
        _dump(out) if as_json else typer.echo(out["id"])

    @app.command("ls")
    def ls(state: str = typer.Option(None, "--state", "-s", help="e.g. RUNNING,PENDING"),
           as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
        """List jobs (REASON says why a pending job waits)."""
        jobs = _call(server, token, "GET", "/v1/jobs", params={"state": state} if state else None)
        if as_json:
            return _dump(jobs)
        _table(["ID", "NAME", "STATE", "GPUS", "TYPE", "BATCH", "GEN", "RESTARTS", "AGE", "REASON"],
               [[j["id"], j["name"], j["state"], f"{j['gpus']}/{j['min_gpus']}-{j['max_gpus']}", j["gpu_type"],
                 j["batch_size"], j["generation"], j["restarts"], _age(j["submit_time"]),
                 j["reason"] if j["state"] in ("PENDING", "SUSPENDED") else None] for j in jobs])
        return None

    @app.command()
    def describe(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Spec, allocation history (generations), restarts and events of a job."""
        d = _call(server, token, "GET", f"/v1/jobs/{job}")
        if as_json:
            return _dump(d)
        for k in ("id", "name", "state", "reason", "gpus", "placement", "batch_size", "generation", "restarts",
                  "retries", "script", "args", "message"):
            waits = k == "reason" and d["state"] in ("PENDING", "SUSPENDED")
            from elastisched.service.reasons import describe_reason

            typer.echo(f"{k + ':':12} {describe_reason(d[k]) if waits else d[k]}")
        typer.echo("\ngenerations:")
        _table(["GEN", "CAUSE", "PLACEMENT", "OUTCOME", "EXIT", "STARTED"],
               [[g["generation"], g["cause"], g["placement"], g["outcome"] or g["state"], g["exit_codes"],
                 _age(g["started_at"])] for g in d["generations"]])
        typer.echo("\nevents:")
        for e in d["events"]:
            typer.echo(f"  {time.strftime('%H:%M:%S', time.localtime(e['time']))} {e['kind']} {e['data'] or ''}")
        return None

    @app.command()
    def logs(job: str, follow: bool = typer.Option(False, "--follow", "-f"), server: str = ServerOpt,
             token: str = TokenOpt) -> None:
        """Print a job's logs (all generations and ranks); -f follows until the job ends. A job with no output
        yet says why (pending and its reason, starting, ended without output)."""
        if not follow:
            text = _call(server, token, "GET", f"/v1/jobs/{job}/logs")
            if text:
                typer.echo(text, nl=False)
            else:
                typer.echo(no_logs_message(_call(server, token, "GET", f"/v1/jobs/{job}")), err=True)
            return
        d = _call(server, token, "GET", f"/v1/jobs/{job}")
        if d["state"] in ("PENDING", "SUSPENDED"):
            typer.echo(no_logs_message(d) + "\nFollowing: its output appears here once it starts.", err=True)
        c, source = _client(server, token)
        with c, c.stream("GET", f"/v1/jobs/{d['id']}/logs", params={"follow": True}, timeout=None) as r:
            if r.status_code >= 400:
                r.read()
                try:
                    detail = r.json().get("detail", r.text)
                except ValueError:
                    detail = r.text
                fail(r.status_code, detail, source)
            for chunk in r.iter_bytes():
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()

    @app.command()
    def cancel(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Cancel a job (running workers checkpoint and stop)."""
        out = _call(server, token, "DELETE", f"/v1/jobs/{job}")
        _dump(out) if as_json else typer.echo(f"{out['id']} cancel requested")

    @app.command()
    def suspend(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Hold a job: running workers checkpoint and stop; no policy schedules it until `resume`."""
        out = _call(server, token, "POST", f"/v1/jobs/{job}:suspend")
        _dump(out) if as_json else typer.echo(f"{out['id']} suspend requested")

    @app.command()
    def resume(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Release a held job: it queues again and continues from its checkpoint."""
        out = _call(server, token, "POST", f"/v1/jobs/{job}:resume")
        _dump(out) if as_json else typer.echo(f"{out['id']} resume requested")

    @app.command()
    def resize(job: str, gpus: int = typer.Argument(..., min=1), as_json: bool = JsonOpt,
               server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Admin override: run JOB on GPUS GPUs (checkpoint → relaunch); the job stays at that size."""
        out = _call(server, token, "POST", f"/v1/jobs/{job}:resize", json={"gpus": gpus})
        _dump(out) if as_json else typer.echo(f"{out['id']} resize to {gpus} requested")

    @app.command()
    def nodes(as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Nodes (training and loaned) with GPUs used / total."""
        out = _call(server, token, "GET", "/v1/nodes")
        if as_json:
            return _dump(out)
        _table(["NODE", "TYPE", "POOL", "USED", "GPUS"],
               [[n["node"], n["gpu_type"], n["pool"], n["used"], n["gpus"]] for n in out])
        return None

    @loans_app.callback(invoke_without_command=True)
    def loans_list(ctx: typer.Context, as_json: bool = JsonOpt, server: str = ServerOpt,
                   token: str = TokenOpt) -> None:
        """List loaned servers and reclaim requests."""
        if ctx.invoked_subcommand is not None:
            return
        out = _call(server, token, "GET", "/v1/loans")
        if as_json:
            return _dump(out)
        _table(["NODE", "TYPE", "GPUS", "STATE", "AGE"],
               [[x["node_id"], x["gpu_type"], x["num_gpus"], x["state"], _age(x["offered_at"])] for x in out["loans"]])
        return None

    @loans_app.command("offer")
    def loans_offer(nodes: int = typer.Option(1, "--nodes", min=1), gpus: int = typer.Option(..., "--gpus", min=1),
                    gpu_type: str = typer.Option("cpu", "--gpu-type"), as_json: bool = JsonOpt,
                    server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Lend NODES servers of GPUS GPUs each to the training cluster."""
        out = _call(server, token, "POST", "/v1/loans",
                    json={"nodes": nodes, "gpus_per_node": gpus, "gpu_type": gpu_type})
        _dump(out) if as_json else typer.echo(" ".join(x["node_id"] for x in out))

    @loans_app.command("reclaim")
    def loans_reclaim(count: int = typer.Argument(..., min=1),
                      deadline: float = typer.Option(60.0, "--deadline", min=0.0, help="seconds"),
                      as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
        """Ask COUNT loaned servers back; the policy chooses which, the service vacates them."""
        out = _call(server, token, "POST", "/v1/reclaims", json={"count": count, "deadline_s": deadline})
        _dump(out) if as_json else typer.echo(f"reclaim {out['id']} of {count} server(s) requested")


def _serve_banner(host: str, port: int, workdir: Path, policy: str, cluster: str) -> str:
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


WorkdirOpt = typer.Option(Path(".elastisched"), "--workdir", help="the service's workdir (its default database)")
DbOpt = typer.Option(None, "--db", help="SQLAlchemy URL (default sqlite:///<workdir>/elastisched.db)")


def _token_store(workdir: Path, db: str | None) -> Any:
    from elastisched.service import auth
    from elastisched.service.server import default_db
    from elastisched.service.store import Store

    url = db or default_db(workdir)
    file = auth.sqlite_path(url)
    if file is not None:
        auth.secure_workdir(file.parent) if db is None else os.umask(0o077)
        auth.precreate_private(file)
    return Store(url)


def _token_commands(token_app: typer.Typer) -> None:
    @token_app.command("create")
    def create(user: str = typer.Option(..., "--user", help="who the token acts as; owns the jobs it submits"),
               admin: bool = typer.Option(False, "--admin", help="sees and acts on all jobs; loans and reclaims"),
               workdir: Path = WorkdirOpt, db: str = DbOpt, as_json: bool = JsonOpt) -> None:
        """Create a token for USER and print it (shown once: only its salted hash is stored)."""
        from elastisched.service import auth

        store = _token_store(workdir, db)
        try:
            tid, tok = auth.create_token(store, user, admin=admin)
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        finally:
            store.close()
        _dump({"id": tid, "user": user, "admin": admin, "token": tok}) if as_json else typer.echo(tok)

    @token_app.command("list")
    def list_(workdir: Path = WorkdirOpt, db: str = DbOpt, as_json: bool = JsonOpt) -> None:
        """Token ids, users and roles (never the tokens)."""
        from elastisched.service import auth

        store = _token_store(workdir, db)
        try:
            rows = auth.list_tokens(store)
        finally:
            store.close()
        if as_json:
            return _dump(rows)
        _table(["ID", "USER", "ROLE", "AGE", "REVOKED"], [[r["id"], r["user"], "admin" if r["admin"] else "user",
                                                           _age(r["created_at"]), _age(r["revoked_at"])] for r in rows])
        return None

    @token_app.command("revoke")
    def revoke(token_id: str, workdir: Path = WorkdirOpt, db: str = DbOpt) -> None:
        """Revoke a token by its id (a running service stops accepting it within seconds)."""
        from elastisched.service import auth

        store = _token_store(workdir, db)
        try:
            ok = auth.revoke_token(store, token_id)
        finally:
            store.close()
        if not ok:
            typer.echo(f"error: token_id: no live token {token_id!r}", err=True)
            raise typer.Exit(1)
        typer.echo(f"{token_id} revoked")


if __name__ == "__main__":  # pragma: no cover - `python -m elastisched.cli.service ...`
    _app = typer.Typer()
    register(_app)
    _app(prog_name=os.path.basename(sys.argv[0]))
