"""`benchmarks/peers_table.py`: one real cell per process, JSON + markdown, n/a with its reason, reuse."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pt(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # importable by name: each cell runs in a spawned process, which imports the module again
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("peers_table")


def test_one_cell_runs_a_timeout_is_na_and_reuse_keeps_it(pt: ModuleType, tmp_path: Path) -> None:
    assert pt.main(["--out", str(tmp_path / "a"), "--policies", "fifo", "--pollux", "1", "--saturn", "",
                    "--workers", "1"]) == 0
    data = json.loads((tmp_path / "a" / "peers_table.json").read_text())
    (cell,) = data["cells"]
    s = cell["summary"]
    assert cell["policy"] == "fifo" and s["n_finished"] == s["n_jobs"] > 0
    assert s["avg_jct"] > 0 and s["p95_jct"] >= s["avg_jct"] and s["makespan"] > 0 and s["gpu_hours"] > 0
    md = (tmp_path / "a" / "peers_table.md").read_text()
    assert f"| fifo | {s['avg_jct']:,.0f} |" in md
    # a cell past its time limit is n/a with the reason; the finished one is reused, not rerun
    assert pt.main(["--out", str(tmp_path / "b"), "--policies", "fifo,srtf", "--pollux", "1", "--saturn", "",
                    "--cell-timeout", "0.01", "--reuse", str(tmp_path / "a" / "peers_table.json")]) == 0
    b = json.loads((tmp_path / "b" / "peers_table.json").read_text())
    by = {c["policy"]: c for c in b["cells"]}
    assert by["fifo"]["summary"] == s
    assert "timeout" in by["srtf"]["error"]
    assert "| srtf | n/a |" in (tmp_path / "b" / "peers_table.md").read_text()


def test_unknown_policy_is_one_clear_error(pt: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert pt.main(["--policies", "fifo,nope"]) == 2
    assert "--policies: unknown ['nope']" in capsys.readouterr().err
