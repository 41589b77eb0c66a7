"""Issue 24 item 4: an unknown GPU type is named with the known ones (not "pass --profiles"), `trace describe`
refuses the same typo, and a known type without its profile names the folder that adds it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from elastisched.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("args", [["sim", "run", "-w", "pollux:workload-6", "-p", "fifo"],
                                  ["trace", "describe", "pollux:workload-6"]], ids=["sim-run", "trace-describe"])
def test_a_gpu_type_typo_is_named_with_the_known_types(args: list[str], tmp_path: Path) -> None:
    r = runner.invoke(app, [*args, "-c", "16x4:tt4", "-o", str(tmp_path / "o")])
    lines = r.stderr.strip().splitlines() if r.stderr else r.output.strip().splitlines()
    text = " ".join(" ".join(lines).split())  # trace describe prints through rich, which wraps
    assert r.exit_code == 2, r.output
    assert "unknown GPU type 'tt4'; did you mean 't4'? known: a100, rtx, rtx6000, t4, v100" in text, text
    assert not (tmp_path / "o").exists()


def test_a_known_type_without_its_profile_names_the_profiles_folder(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "fifo", "-c", "6x4:t4,2x8:a100",
                            "-o", str(tmp_path)])
    assert r.exit_code == 2
    assert "GPU type 'a100' has no profile loaded; pass --profiles ../shared/peer-data/sia/traces" in r.stderr
