"""`python -m elastisched.train._entry SCRIPT` keeps `python SCRIPT` semantics but ends with hard_exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(("body", "code"), [
    ("pass", 0),
    ("import sys; sys.exit(3)", 3),
    ("import sys; sys.exit('bad config')", 1),
    ("raise ValueError('boom')", 1),
])
def test_exit_code_and_unflushed_writes_survive(tmp_path: Path, body: str, code: int) -> None:
    out = tmp_path / "out.txt"
    script = tmp_path / "s.py"
    # A file left open and unflushed, and argv / sys.path[0] as `python s.py a b` would have them.
    script.write_text(
        "import sys\n"
        f"f = open({str(out)!r}, 'w'); f.write(repr(sys.argv[1:]) + ' ' + sys.path[0])\n"
        "import atexit; atexit.register(lambda: print('atexit ran'))\n"
        f"{body}\n"
    )
    res = subprocess.run([sys.executable, "-m", "elastisched.train._entry", str(script), "a", "b"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path.parent)
    assert res.returncode == code, res.stderr
    assert out.read_text() == f"['a', 'b'] {tmp_path}"
    assert "atexit ran" in res.stdout
    if code == 1:
        assert "boom" in res.stderr or "bad config" in res.stderr


def test_entry_without_script_is_usage_error() -> None:
    res = subprocess.run([sys.executable, "-m", "elastisched.train._entry"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "usage" in res.stderr


def test_threads_and_executor_work_finish_before_exit(tmp_path: Path) -> None:
    """As plain `python s.py`: a non-daemon thread and a queued executor task still run to the end."""
    script = tmp_path / "s.py"
    script.write_text(
        "import threading, time\nfrom concurrent.futures import ThreadPoolExecutor\n"
        "def write(name):\n    time.sleep(0.5)\n"
        f"    open({str(tmp_path)!r} + '/' + name, 'w').write('done')\n"
        "threading.Thread(target=write, args=('thread',)).start()\n"
        "ThreadPoolExecutor(1).submit(write, 'task')\n"
    )
    res = subprocess.run([sys.executable, "-m", "elastisched.train._entry", str(script)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "thread").read_text() == "done" and (tmp_path / "task").read_text() == "done"
