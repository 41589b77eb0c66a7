"""`python -m elastisched.cli`."""

from elastisched.cli.main import app

app()
