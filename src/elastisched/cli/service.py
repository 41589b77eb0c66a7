"""Service commands in the Slurm/Kueue tradition (ecosystem.md §B.4): serve, submit, ls, describe, logs,
cancel, suspend, resume, resize, nodes, loans, token. `register(app)` adds them to the `elastisched` Typer app
from one module per command group: `serve`, `jobs`, `loans`, `tokens`.

Client commands talk to the REST API (`--server` / ELASTISCHED_SERVER, token from --token, ELASTISCHED_TOKEN or
`.elastisched/token`; service/client.py). Human tables by default, `--json` for scripts; any API error exits
non-zero with the server's message (a 401 also says where the token was looked for). Heavy imports (FastAPI,
uvicorn, SQLAlchemy) happen only inside the commands that need them.
"""

from __future__ import annotations

import os
import sys

import typer

from elastisched.cli import jobs, serve
from elastisched.cli.loans import loans_app
from elastisched.cli.tokens import token_app


def register(app: typer.Typer) -> None:
    """Add the service commands to `app`."""
    app.add_typer(loans_app(), name="loans")
    app.add_typer(token_app(), name="token")
    serve.register(app)
    jobs.register(app)


if __name__ == "__main__":  # pragma: no cover - `python -m elastisched.cli.service ...`
    _app = typer.Typer()
    register(_app)
    _app(prog_name=os.path.basename(sys.argv[0]))
