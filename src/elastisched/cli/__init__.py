"""The `elastisched` command (Typer): `main` builds the app, one module per command group."""
