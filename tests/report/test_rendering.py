"""Every report a user opens renders: figures titled, labelled and with legends; the page loads in headless
Chromium without console errors and its tables fit 1,280 px (screenshots under results/screenshots)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rendering import check_page, checked_figures
from typer.testing import CliRunner

SYN = "synthetic:num_jobs=30,rate=20,seed=4"
REPORTS = {
    "compare": ["sim", "compare", "-w", SYN, "--policies", "fifo,tiresias", "--cluster", "4x4:t4"],
    "trace-describe": ["trace", "describe", "pollux:workload-2"],
    "plan": ["plan", "-w", SYN, "--cluster-sizes", "8,16,24", "-p", "fifo,tiresias"],
    "sweep": ["sim", "sweep", "-w", SYN, "-p", "fifo,tiresias", "--seeds", "0,1", "-c", "4x4:t4"],
}


@pytest.mark.parametrize("name", list(REPORTS))
def test_report_renders(tmp_path: Path, name: str) -> None:
    from elastisched.cli.main import app

    out = tmp_path / name
    with checked_figures() as problems:
        res = CliRunner().invoke(app, [*REPORTS[name], "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not problems, problems
    check_page(out / "report.html", name)


def test_peers_table_report_renders(tmp_path: Path) -> None:
    """benchmarks/peers_table.py's report.html, from the committed table (no simulation)."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("peers_table", root / "benchmarks" / "peers_table.py")
    assert spec is not None and spec.loader is not None
    pt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pt)
    assert pt.main(["--render-only", "--reuse", str(root / "docs" / "peers-table.json"), "--out", str(tmp_path)]) == 0
    check_page(tmp_path / "report.html", "peers-table")


# Every `reproduce` report renders too. pollux, lyra and ones are checked by their own tests
# (tests/experiments/test_{pollux,lyra,ones}_experiment.py, same `check_page`); these are the others, each on
# the smallest configuration that still draws every plot of its report.
TINY_DEEPBOOT = """name,time,application,num_replicas,batch_size,duration,num_task
cifar10-0,0,cifar10,4,512,4.0,-1
ncf-1,30,ncf,1,256,4.0,-1
cifar10-2,60,cifar10,2,256,4.0,-1
inference-ncf-0,10,infer-ncf-1,1,1,5.0,100
inference-ncf-1,400,infer-ncf-1,1,1,5.0,100
"""


def _reproduce_args(name: str, tmp_path: Path) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import peer_data

    def need(*parts: str) -> str:
        p = peer_data.path(*parts)
        if p is None:
            msg = f"{peer_data.MISSING}: {peer_data.PEER_DATA.joinpath(*parts)}"
            pytest.fail(msg) if peer_data.in_ci() else pytest.skip(msg)
        return str(p)

    if name == "lyra-deepboot":
        wl = tmp_path / "tiny.csv"
        wl.write_text(TINY_DEEPBOOT)
        return ["--workload", str(wl), "--servers", "4", "--inference-servers", "2", "--policies", "lyra,tiresias"]
    if name == "jabas":
        return ["--profiles", need("sia", "traces"), "--apps", "cifar10", "--epochs", "3", "--seeds", "0"]
    if name == "pollux-policy":
        return ["--peer-data", need("adaptdl-pollux"), "--seeds", "0", "--workloads", "workload-1", "--loads", "1.0",
                "--generations", "3", "--pop-size", "8"]
    if name == "sia":
        return ["--root", need("sia"), "--workloads", "1", "--seeds", "0", "--policies", "sia,gavel"]
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["lyra-deepboot", "jabas", "pollux-policy", "sia"])
def test_reproduce_report_renders(tmp_path: Path, name: str) -> None:
    from elastisched.cli.main import app

    args = _reproduce_args(name, tmp_path)
    out = tmp_path / name
    with checked_figures() as problems:
        res = CliRunner().invoke(app, ["reproduce", name, *args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not problems, problems
    assert list(out.glob("*.png")), "no plot written"
    check_page(out / "report.html", f"reproduce-{name}")
