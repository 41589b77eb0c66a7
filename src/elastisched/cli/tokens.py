"""`elastisched token`: per-user API tokens, written straight to the service's database (create, list, revoke).
SQLAlchemy is imported inside the commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from elastisched.cli.client_io import JsonOpt, age, dump, table

WorkdirOpt = typer.Option(Path(".elastisched"), "--workdir", help="the service's workdir (its default database)")
DbOpt = typer.Option(None, "--db", help="SQLAlchemy URL without a password (default $ELASTISCHED_DB, else "
                     "sqlite:///<workdir>/elastisched.db)")


def token_store(workdir: Path, db: str | None) -> Any:
    """The service's store, its file created private (0600) when this makes it. The URL as `serve` takes it:
    `--db` (no password on a command line), else $ELASTISCHED_DB, else the workdir's SQLite file."""
    from elastisched.core.errors import ConfigError
    from elastisched.service import auth
    from elastisched.service.secret_inputs import database_url
    from elastisched.service.server import default_db
    from elastisched.service.store import Store

    try:
        url = database_url(db, None, default_db(workdir))
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    file = auth.sqlite_path(url)
    if file is not None:
        auth.secure_workdir(file.parent, shared=None) if url == default_db(workdir) else os.umask(0o077)
        auth.precreate_private(file)
    return Store(url)


def create(user: str = typer.Option(..., "--user", help="who the token acts as; owns the jobs it submits"),
           admin: bool = typer.Option(False, "--admin", help="sees and acts on all jobs; loans and reclaims"),
           workdir: Path = WorkdirOpt, db: str = DbOpt, as_json: bool = JsonOpt) -> None:
    """Create a token for USER and print it (shown once: only its salted hash is stored)."""
    from elastisched.service import auth

    store = token_store(workdir, db)
    try:
        tid, tok = auth.create_token(store, user, admin=admin)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    finally:
        store.close()
    dump({"id": tid, "user": user, "admin": admin, "token": tok}) if as_json else typer.echo(tok)


def list_(workdir: Path = WorkdirOpt, db: str = DbOpt, as_json: bool = JsonOpt) -> None:
    """Token ids, users and roles (never the tokens)."""
    from elastisched.service import auth

    store = token_store(workdir, db)
    try:
        rows = auth.list_tokens(store)
    finally:
        store.close()
    if as_json:
        return dump(rows)
    table(["ID", "USER", "ROLE", "AGE", "REVOKED"], [[r["id"], r["user"], "admin" if r["admin"] else "user",
                                                      age(r["created_at"]), age(r["revoked_at"])] for r in rows])
    return None


def revoke(token_id: str, workdir: Path = WorkdirOpt, db: str = DbOpt) -> None:
    """Revoke a token by its id (a running service stops accepting it within seconds)."""
    from elastisched.service import auth

    store = token_store(workdir, db)
    try:
        ok = auth.revoke_token(store, token_id)
    finally:
        store.close()
    if not ok:
        typer.echo(f"error: token_id: no live token {token_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{token_id} revoked")


def token_app() -> typer.Typer:
    """The `token` group: create, list, revoke."""
    group = typer.Typer(help="Per-user API tokens (stored hashed in the service's database).", no_args_is_help=True)
    group.command("create")(create)
    group.command("list")(list_)
    group.command("revoke")(revoke)
    return group
