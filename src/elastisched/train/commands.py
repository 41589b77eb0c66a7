"""`launch` and `profile` commands; `register(app)` adds them to the elastisched Typer app.

Run standalone with `python -m elastisched.train.commands launch ...`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from elastisched.train.contract import ContractError


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None or text == "":
        return None
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{what}={text!r} must be comma-separated integers") from None
    if not out or any(v < 1 for v in out):
        raise typer.BadParameter(f"{what}={text!r} needs positive integers")
    return out


_EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}


def launch_cmd(
    ctx: typer.Context,
    script: Path = typer.Argument(..., exists=True, dir_okay=False, help="training script"),
    nproc: int = typer.Option(1, "--nproc", min=1, help="worker processes on this machine"),
    accum: str | None = typer.Option(None, "--accum", help="accumulation steps per rank, e.g. 1,3"),
    local_batch: int | None = typer.Option(None, "--local-batch", min=1, help="samples per micro-batch"),
    global_batch: int | None = typer.Option(None, "--global-batch", min=1,
                                            help="default: local batch × Σaccum"),
    job_id: str = typer.Option("local", "--job-id"),
    generation: int = typer.Option(0, "--generation", min=0),
    checkpoint_dir: Path | None = typer.Option(None, "--checkpoint-dir", help="where to checkpoint/resume"),
    grace: float = typer.Option(30.0, "--grace", help="seconds between SIGTERM and SIGKILL"),
) -> None:
    """Start NPROC workers of SCRIPT on the launch contract (gloo on CPU, nccl with GPUs).

    Arguments after SCRIPT go to the script. SIGTERM to this command is forwarded to the workers,
    which checkpoint and exit 0; relaunch with another --nproc to resume at a new size.
    """
    from elastisched.train.launcher import launch

    try:
        codes = launch(script, list(ctx.args), grace=grace, nproc=nproc, accum=_ints(accum, "--accum"),
                       local_batch=local_batch, global_batch=global_batch, job_id=job_id,
                       generation=generation,
                       checkpoint_dir=None if checkpoint_dir is None else str(checkpoint_dir))
    except ContractError as exc:
        raise typer.BadParameter(str(exc)) from None
    bad = [c for c in codes if c != 0]
    if bad:
        typer.echo(f"workers exited with codes {codes}", err=True)
        raise typer.Exit(code=bad[0] if bad[0] > 0 else 1)


def profile_cmd(
    ctx: typer.Context,
    script: Path = typer.Argument(..., exists=True, dir_okay=False, help="training script"),
    local_batches: str = typer.Option("8,16,32", "--local-batches", help="grid of local batch sizes"),
    workers: str = typer.Option("1,2", "--workers", help="grid of worker counts (one node)"),
    out: Path = typer.Option(Path("results/profile"), "--out", "-o", help="writes placements.csv, scalability.csv"),
    steps: int = typer.Option(12, "--steps", min=3, help="steps per point (the first 2 are warm-up)"),
) -> None:
    """Measure step and sync time of SCRIPT on a grid; write the simulator's (Pollux) profile format."""
    from elastisched.train.profiler import profile

    lbs = _ints(local_batches, "--local-batches") or []
    ws = _ints(workers, "--workers") or []
    rows = profile(script, list(ctx.args), local_batches=lbs, workers=ws, out=out, steps=steps,
                   progress=typer.echo)
    typer.echo(f"wrote {len(rows)} points to {out}/placements.csv and {out}/scalability.csv")


def register(app: typer.Typer) -> None:
    """Add `launch` and `profile` to `app` (the elastisched CLI)."""
    app.command("launch", context_settings=_EXTRA)(launch_cmd)
    app.command("profile", context_settings=_EXTRA)(profile_cmd)


def main() -> None:
    app = typer.Typer(add_completion=False, help="elastisched training commands")
    register(app)
    app()


if __name__ == "__main__":
    main()
