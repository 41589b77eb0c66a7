"""The elastisched wing: the project's own scheduler (`policy.py`) and what only it believes (module docstrings)."""
