"""`python -m elastisched` = the `elastisched` command."""

from elastisched.cli.main import app

app()
