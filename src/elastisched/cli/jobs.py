"""Job commands in the Slurm/Kueue tradition: submit, ls, describe, logs, cancel, suspend, resume, resize, and
nodes. Each is one REST call (service/client.py): a human table by default, `--json` for scripts; any API error
exits non-zero with the server's message."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from elastisched.cli.client_io import JsonOpt, ServerOpt, TokenOpt, age, dump, parse_range, table
from elastisched.service.client import call, client, fail, no_logs_message
from elastisched.service.spec_defaults import DEFAULT_BATCH_SIZE

WAITING = ("PENDING", "SUSPENDED")  # states whose REASON says why the job waits


def submit(
    ctx: typer.Context,
    script: Path = typer.Argument(..., help="training script (arguments after it are passed through)"),
    gpus: str = typer.Option("1", "--gpus", help="N, or MIN:MAX for an elastic job"),
    batch_size: int = typer.Option(DEFAULT_BATCH_SIZE, "--batch-size", min=1, help="global batch size"),
    adaptive: str = typer.Option(None, "--adaptive", help="adaptive global batch MIN:MAX"),
    gpu_type: str = typer.Option(None, "--gpu-type"),
    name: str = typer.Option(None, "--name"),
    duration: float = typer.Option(None, "--duration", help="runtime estimate (s) for SJF-style policies"),
    application: str = typer.Option(None, "--application", help="profiled model name (e.g. cifar10)"),
    work_scale: float = typer.Option(None, "--work-scale", min=0.0, help="job length as a multiple of "
                                     "the profiled application's run (its validation epochs)"),
    env: list[str] = typer.Option([], "--env", "-e", help="NAME=VALUE for the job's environment (repeatable)"),
    key: str = typer.Option(None, "--idempotency-key", help="the submission's key (default: a fresh one); a retry "
                            "with the same key never makes a second job"),
    as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt,
) -> None:
    """Submit a job; prints its id. A timeout or a lost connection is retried with the same Idempotency-Key,
    so a submission the service committed before the connection broke is not made twice."""
    import uuid

    lo, hi = parse_range(gpus, "--gpus") or (1, 1)
    body: dict[str, Any] = {"script": _script(script), "args": list(ctx.args), "gpus": lo, "min_gpus": lo,
                            "max_gpus": hi, "batch_size": batch_size, "name": name, "gpu_type": gpu_type,
                            "duration_s": duration, "adaptive": parse_range(adaptive, "--adaptive"),
                            "application": application, "work_scale": work_scale, "env": _env(env)}
    headers = {"Idempotency-Key": key or str(uuid.uuid4())}
    out = call(server, token, "POST", "/v1/jobs", json=body, headers=headers, retry=True)
    dump(out) if as_json else typer.echo(out["id"])


def _script(script: Path) -> str:
    """The script's absolute path (the service resolves it again inside its scripts directory)."""
    try:
        return str(script.resolve())
    except (OSError, RuntimeError) as e:
        raise typer.BadParameter(f"SCRIPT={str(script)[:200]!r}: {getattr(e, 'strerror', None) or e}") from None


def _env(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise typer.BadParameter(f"--env {item[:60]!r}: expected NAME=VALUE")
        out[name] = value
    return out


def ls(state: str = typer.Option(None, "--state", "-s", help="e.g. RUNNING,PENDING"),
       as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
    """List jobs (REASON says why a pending job waits)."""
    jobs = call(server, token, "GET", "/v1/jobs", params={"state": state} if state else None)
    if as_json:
        return dump(jobs)
    table(["ID", "NAME", "STATE", "GPUS", "TYPE", "BATCH", "GEN", "RESTARTS", "AGE", "REASON"],
          [[j["id"], j["name"], j["state"], f"{j['gpus']}/{j['min_gpus']}-{j['max_gpus']}", j["gpu_type"],
            j["batch_size"], j["generation"], j["restarts"], age(j["submit_time"]),
            j["reason"] if j["state"] in WAITING else None] for j in jobs])
    return None


def describe(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Spec, allocation history (generations), restarts and events of a job."""
    d = call(server, token, "GET", f"/v1/jobs/{job}")
    if as_json:
        return dump(d)
    for k in ("id", "name", "state", "reason", "gpus", "placement", "batch_size", "generation", "restarts",
              "retries", "script", "args", "message"):
        waits = k == "reason" and d["state"] in WAITING
        from elastisched.service.reasons import describe_reason

        typer.echo(f"{k + ':':12} {describe_reason(d[k]) if waits else d[k]}")
    typer.echo("\ngenerations:")
    table(["GEN", "CAUSE", "PLACEMENT", "OUTCOME", "EXIT", "STARTED"],
          [[g["generation"], g["cause"], g["placement"], g["outcome"] or g["state"], g["exit_codes"],
            age(g["started_at"])] for g in d["generations"]])
    typer.echo("\nevents:")
    for e in d["events"]:
        typer.echo(f"  {time.strftime('%H:%M:%S', time.localtime(e['time']))} {e['kind']} {e['data'] or ''}")
    return None


def logs(job: str, follow: bool = typer.Option(False, "--follow", "-f"), server: str = ServerOpt,
         token: str = TokenOpt) -> None:
    """Print a job's logs (all generations and ranks); -f follows until the job ends. A job with no output
    yet says why (pending and its reason, starting, ended without output)."""
    if not follow:
        text = call(server, token, "GET", f"/v1/jobs/{job}/logs")
        if text:
            typer.echo(text, nl=False)
        else:
            typer.echo(no_logs_message(call(server, token, "GET", f"/v1/jobs/{job}")), err=True)
        return
    d = call(server, token, "GET", f"/v1/jobs/{job}")
    if d["state"] in WAITING:
        typer.echo(no_logs_message(d) + "\nFollowing: its output appears here once it starts.", err=True)
    c, source = client(server, token)
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


def cancel(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Cancel a job (running workers checkpoint and stop)."""
    out = call(server, token, "DELETE", f"/v1/jobs/{job}")
    dump(out) if as_json else typer.echo(f"{out['id']} cancel requested")


def suspend(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Hold a job: running workers checkpoint and stop; no policy schedules it until `resume`."""
    out = call(server, token, "POST", f"/v1/jobs/{job}:suspend")
    dump(out) if as_json else typer.echo(f"{out['id']} suspend requested")


def resume(job: str, as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Release a held job: it queues again and continues from its checkpoint."""
    out = call(server, token, "POST", f"/v1/jobs/{job}:resume")
    dump(out) if as_json else typer.echo(f"{out['id']} resume requested")


def resize(job: str, gpus: int = typer.Argument(..., min=1), as_json: bool = JsonOpt,
           server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Admin override: run JOB on GPUS GPUs (checkpoint → relaunch); the job stays at that size."""
    out = call(server, token, "POST", f"/v1/jobs/{job}:resize", json={"gpus": gpus})
    dump(out) if as_json else typer.echo(f"{out['id']} resize to {gpus} requested")


def nodes(as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Nodes (training and loaned) with GPUs used / total."""
    out = call(server, token, "GET", "/v1/nodes")
    if as_json:
        return dump(out)
    table(["NODE", "TYPE", "POOL", "USED", "GPUS"], [[n["node"], n["gpu_type"], n["pool"], n["used"], n["gpus"]]
                                                     for n in out])
    return None


def register(app: typer.Typer) -> None:
    """Add the job commands to `app`, in the order `--help` lists them."""
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(submit)
    app.command("ls")(ls)
    for command in (describe, logs, cancel, suspend, resume, resize, nodes):
        app.command()(command)
