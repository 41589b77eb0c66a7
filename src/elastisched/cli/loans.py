"""`elastisched loans`: servers on loan from the inference cluster (list, offer, reclaim), for admins."""

from __future__ import annotations

import typer

from elastisched.cli.client_io import JsonOpt, ServerOpt, TokenOpt, age, dump, table
from elastisched.service.client import call


def loans_list(ctx: typer.Context, as_json: bool = JsonOpt, server: str = ServerOpt,
               token: str = TokenOpt) -> None:
    """List loaned servers and reclaim requests."""
    if ctx.invoked_subcommand is not None:
        return
    out = call(server, token, "GET", "/v1/loans")
    if as_json:
        return dump(out)
    table(["NODE", "TYPE", "GPUS", "STATE", "AGE"],
          [[x["node_id"], x["gpu_type"], x["num_gpus"], x["state"], age(x["offered_at"])] for x in out["loans"]])
    return None


def loans_offer(nodes: int = typer.Option(1, "--nodes", min=1), gpus: int = typer.Option(..., "--gpus", min=1),
                gpu_type: str = typer.Option("cpu", "--gpu-type"), as_json: bool = JsonOpt,
                server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Lend NODES servers of GPUS GPUs each to the training cluster."""
    out = call(server, token, "POST", "/v1/loans", json={"nodes": nodes, "gpus_per_node": gpus, "gpu_type": gpu_type})
    dump(out) if as_json else typer.echo(" ".join(x["node_id"] for x in out))


def loans_reclaim(count: int = typer.Argument(..., min=1),
                  deadline: float = typer.Option(60.0, "--deadline", min=0.0, help="seconds"),
                  as_json: bool = JsonOpt, server: str = ServerOpt, token: str = TokenOpt) -> None:
    """Ask COUNT loaned servers back; the policy chooses which, the service vacates them."""
    out = call(server, token, "POST", "/v1/reclaims", json={"count": count, "deadline_s": deadline})
    dump(out) if as_json else typer.echo(f"reclaim {out['id']} of {count} server(s) requested")


def loans_app() -> typer.Typer:
    """The `loans` group: its callback lists, `offer` and `reclaim` are its commands."""
    group = typer.Typer(help="Servers on loan from the inference cluster (Lyra): list, offer, reclaim.")
    group.callback(invoke_without_command=True)(loans_list)
    group.command("offer")(loans_offer)
    group.command("reclaim")(loans_reclaim)
    return group
