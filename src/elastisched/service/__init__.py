"""The live service: FastAPI app (`app`), SQLAlchemy store (`store`), engine loop (`daemon`), CLI (`commands`).

Run it with `elastisched serve` or `python -m elastisched.service`. See docs/service.md.
"""
