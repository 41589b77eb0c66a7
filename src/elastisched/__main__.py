"""`python -m elastisched` = the `elastisched` command."""

from elastisched.cli import app

app()
