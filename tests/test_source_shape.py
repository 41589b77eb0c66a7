"""DESIGN.md's size rule on the source: no function over 60 lines, no file over 400 (split jobs, not lines).

A function's length runs from its `def` (decorators excluded) to its last line, docstring and comments
included, as a reader scrolls it. Tests are exempt (a scripted scenario reads best in one piece); benchmarks
and examples are not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("src", "benchmarks", "examples")
MAX_FUNCTION_LINES = 60
MAX_FILE_LINES = 400
#: "path:function" -> why it stays long (keep this short; every entry is a debt)
FUNCTION_EXCEPTIONS: dict[str, str] = {}
#: path -> why it stays long
FILE_EXCEPTIONS: dict[str, str] = {}


def _sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in CHECKED for p in (root / d).rglob("*.py") if ".venv" not in p.parts)


def long_functions(paths: list[Path], root: Path = ROOT, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """'path:name (N lines)' for every function or method longer than `limit`."""
    out = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > limit and f"{rel}:{node.name}" not in FUNCTION_EXCEPTIONS:
                    out.append(f"{rel}:{node.name} ({n} lines)")
    return out


def long_files(paths: list[Path], root: Path = ROOT, limit: int = MAX_FILE_LINES) -> list[str]:
    """'path (N lines)' for every file longer than `limit`."""
    out = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit and rel not in FILE_EXCEPTIONS:
            out.append(f"{rel} ({n} lines)")
    return out


def test_no_function_over_60_lines() -> None:
    bad = long_functions(_sources())
    assert not bad, "split these by job (or name the exception and its reason):\n" + "\n".join(bad)


def test_no_file_over_400_lines() -> None:
    bad = long_files(_sources())
    assert not bad, "split these by job:\n" + "\n".join(bad)


@pytest.mark.parametrize("table", [FUNCTION_EXCEPTIONS, FILE_EXCEPTIONS])
def test_every_exception_still_exists_and_says_why(table: dict[str, str]) -> None:
    for key, why in table.items():
        assert (ROOT / key.split(":")[0]).is_file(), f"stale exception {key!r}"
        assert len(why.split()) >= 4, f"exception {key!r} gives no reason"


def test_a_planted_long_function_and_file_are_found(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (tmp_path / "src").mkdir()
    long_fn = tmp_path / "src" / "a.py"
    long_fn.write_text(f"def fine():\n    return 1\n\n\ndef too_long():\n{body}\n")
    long_file = tmp_path / "src" / "b.py"
    long_file.write_text("\n".join(f"y{i} = {i}" for i in range(401)) + "\n")
    assert long_functions([long_fn, long_file], tmp_path) == ["src/a.py:too_long (61 lines)"]
    assert long_files([long_fn, long_file], tmp_path) == ["src/b.py (401 lines)"]
