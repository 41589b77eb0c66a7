"""The `elastisched` command end to end (Typer's runner, real files)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from elastisched.cli.main import app

runner = CliRunner()


def test_policies_json() -> None:
    r = runner.invoke(app, ["policies", "--json"])
    assert r.exit_code == 0, r.output
    names = {p["name"] for p in json.loads(r.stdout)}
    assert {"fifo", "srtf", "tiresias", "optimus"} <= names


def test_sim_run_writes_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = runner.invoke(app, ["sim", "run", "-w", "synthetic:num_jobs=20,rate=40,seed=2", "-p", "tiresias",
                            "--cluster", "4x4:t4", "--seed", "5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    for key in ("policy", "workload", "n_jobs", "avg_jct", "median_jct", "p95_jct", "p99_jct", "avg_queue",
                "makespan", "gpu_utilization", "restarts", "decision_ms_p50", "decision_ms_max", "wall_seconds",
                "seed", "version"):
        assert key in s, key
    assert s["seed"] == 5 and s["n_jobs"] == 20 and s["n_finished"] == 20
    assert (out / "jobs.csv").read_text().count("\n") == 21


def test_sim_compare_report(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    r = runner.invoke(app, ["sim", "compare", "-w", "synthetic:num_jobs=15,rate=40,seed=1", "--policies",
                            "fifo,tiresias", "--cluster", "2x4:t4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "tiresias" in html
    assert (out / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "summary.csv").read_text().splitlines()[0].startswith("policy,")


def test_bad_input_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\na,0,ncf,zero,256\n")
    out = tmp_path / "never"
    r = runner.invoke(app, ["sim", "run", "-w", str(bad), "-p", "fifo", "--out", str(out)])
    assert r.exit_code == 2
    assert "num_replicas" in r.output and "'zero'" in r.output and ":2:" in r.output
    assert not out.exists()
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-1", "-p", "fifo", "--cluster", "4y4", "--out",
                            str(out)])
    assert r.exit_code == 2 and "--cluster" in r.output and not out.exists()
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-1", "-p", "nope", "--out", str(out)])
    assert r.exit_code == 2 and "unknown policy" in r.output and not out.exists()


# ------------------------------------------------ issue 11 items 6-8: every bad input → one line, exit code 2
POLLUX = "name,time,application,num_replicas,batch_size\n"


def _files(tmp: Path) -> dict[str, Path]:
    """The bad inputs of the issue, as real files."""
    f: dict[str, Path] = {}

    def put(name: str, data: str | bytes) -> None:
        f[name] = tmp / name
        f[name].write_bytes(data if isinstance(data, bytes) else data.encode())
    put("inf.csv", POLLUX + "a,0,ncf,1e400,256\n")
    put("bytes.csv", POLLUX.encode() + b"a,0,ncf,1,256\nb\xff,5,ncf,1,256\n")
    put("field.csv", POLLUX + "a,0,ncf,1,256\n" + "b" * 200_000 + ",5,ncf,1,256\n")
    put("corrupt.csv.gz", gzip.compress(b"time,duration,num_gpus\n0,3600,1\n", mtime=0)[:20])
    put("bad.yaml", "- {nodes: 2, gpus_per_node: [\n")
    put("bad.json", "[1, 2]")
    put("gpus.csv", POLLUX + "a,0,ncf,1e23,256\n")
    put("batch.csv", POLLUX + "a,0,ncf,1,1e23\n")
    put("late.csv", POLLUX + "a,1e308,ncf,1,256\n")
    put("steps.trace", "ResNet-50\tcmd\t-n\t1\t1e308\t0.0\t2\n")
    put("empty.csv", POLLUX)
    put("underscore.csv", POLLUX + "a,0,ncf,1_000,256\n")
    put("fullwidth.csv", POLLUX + "a,0,ncf,１２,256\n")
    put("arabic.csv", POLLUX + "a,0,ncf,٣,256\n")
    put("plus.csv", POLLUX + "a,0,ncf,+5,256\n")
    put("nan.csv", "time,duration,num_gpus\n0,3600,1\nnan,7200,4\n")
    put("cr.csv", "time,duration,num_gpus\r0,3600,1\r100,600,2\r")
    put("bom.csv", b"\xef\xbb\xbf" + (POLLUX + "a,0,ncf,1,256\n").encode())
    put("existing-file", "keep me")
    f["a-dir"] = tmp / "a-dir"
    f["a-dir"].mkdir()
    return f


# (case, extra args; `{name}` is replaced by the path of that file, expected text in the one-line error)
BAD = [
    ("int-inf", ["-w", "{inf.csv}"], "column 'num_replicas' = '1e400'"),
    ("undecodable-bytes", ["-w", "{bytes.csv}"], ":3: column 'encoding'"),
    ("csv-field-limit", ["-w", "{field.csv}"], ":3: column 'row'"),
    ("corrupt-gz", ["-w", "{corrupt.csv.gz}"], "not a valid gzip file"),
    ("cluster-yaml", ["--cluster", "{bad.yaml}"], "invalid YAML at line 2"),
    ("cluster-json", ["--cluster", "{bad.json}"], "cluster[0]=1"),
    ("workload-dir", ["-w", "{a-dir}"], "is a directory"),
    ("out-file", ["--out", "{existing-file}"], "--out="),
    ("philly-sample-abc", ["-w", "philly:sample=abc"], "philly:sample='abc'"),
    ("seed-negative", ["--seed", "-1"], "--seed='-1'"),
    ("synthetic-num-jobs-0", ["-w", "synthetic:num_jobs=0"], "synthetic:num_jobs='0'"),
    ("cluster-unbounded", ["--cluster", "100000000x4:t4"], "100000000 nodes; at most 100000 in a cluster"),
    ("gpus-1e23", ["-w", "{gpus.csv}"], "column 'num_replicas' = '1e23'"),
    ("batch-1e23", ["-w", "{batch.csv}"], "column 'batch_size' = '1e23'"),
    ("submit-1e308", ["-w", "{late.csv}"], "column 'time' = '1e308'"),
    ("work-scale-inf", ["-w", "{steps.trace}"], "column 'total_steps' = '1e308'"),
    ("empty-workload", ["-w", "{empty.csv}"], "no training jobs"),
    ("restart-cost-negative", ["--restart-cost", "-1"], "--restart-cost='-1'"),
    ("restart-cost-nan", ["--restart-cost", "nan"], "--restart-cost='nan'"),
    ("restart-cost-inf", ["--restart-cost", "inf"], "--restart-cost='inf'"),
    ("synthetic-unknown-key", ["-w", "synthetic:num_jobs=5,foo=1"], "synthetic:foo='1': unknown option"),
    ("digits-underscore", ["-w", "{underscore.csv}"], "'1_000'"),
    ("digits-fullwidth", ["-w", "{fullwidth.csv}"], "column 'num_replicas'"),
    ("digits-arabic-indic", ["-w", "{arabic.csv}"], "column 'num_replicas'"),
    ("digits-plus", ["-w", "{plus.csv}"], "'+5'"),
    ("seed-underscore", ["--seed", "1_000"], "--seed='1_000'"),
    ("seed-plus", ["--seed", "+5"], "--seed='+5'"),
    ("seed-fullwidth", ["--seed", "１"], "--seed="),
    ("nan-timestamp", ["-w", "{nan.csv}"], "column 'time' = 'nan'"),
    ("unknown-policy", ["-p", "nope"], "--policy='nope': unknown policy"),
]


def _args(tmp: Path, files: dict[str, Path], extra: list[str], cmd: str = "run") -> tuple[list[str], Path]:
    out = tmp / "never"
    base = {"-w": "synthetic:num_jobs=3,rate=40", "--cluster": "1x4:t4", "--out": str(out)}
    if cmd == "run":
        base["-p"] = "fifo"
    else:
        base["--policies"] = "fifo"
    extra = [files[a[1:-1]].as_posix() if a.startswith("{") else a for a in extra]
    for k, v in zip(extra[::2], extra[1::2], strict=True):
        base[k] = v
    return ["sim", cmd, *[x for kv in base.items() for x in kv]], Path(base["--out"])


COMPARE_ONLY = [
    ("unknown-policies", ["--policies", "fifo,nope"], "--policies='nope': unknown policy"),
    ("repeated-policies", ["--policies", "fifo,fifo"], "--policies='fifo': named more than once"),
    ("empty-policies", ["--policies", ","], "--policies=','"),
]
CASES = [("run", *c) for c in BAD] + [("compare", *c) for c in BAD + COMPARE_ONLY
                                      if not c[0].startswith(("restart-cost", "unknown-policy"))]


@pytest.mark.parametrize("cmd,case,extra,expect", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_bad_input_is_one_line_exit_2(tmp_path: Path, cmd: str, case: str, extra: list[str],
                                            expect: str) -> None:
    files = _files(tmp_path)
    args, out = _args(tmp_path, files, extra, cmd)
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (case, r.output)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (case, r.stderr)
    assert expect in lines[0], (case, lines[0])
    assert "Traceback" not in r.output
    assert not (out.exists() and out.is_dir()), "nothing may be written on bad input"
    assert files["existing-file"].read_text() == "keep me"


@pytest.mark.parametrize("name", ["cr.csv", "bom.csv"])
def test_cr_only_and_bom_files_run(tmp_path: Path, name: str) -> None:
    files = _files(tmp_path)
    out = tmp_path / "ok"
    r = runner.invoke(app, ["sim", "run", "-w", str(files[name]), "-p", "fifo", "--cluster", "1x4:t4", "--out",
                            str(out), "--restart-cost", "0"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "summary.json").read_text())["n_finished"] >= 1


def test_real_binary_gives_one_line_and_exit_2(tmp_path: Path) -> None:
    """The installed entry point, in its own process (no test runner in between)."""
    files = _files(tmp_path)
    for extra, expect in ((["--seed", "-1"], "--seed='-1'"), (["-w", str(files["inf.csv"])], "num_replicas"),
                          (["--cluster", "100000000x4:t4"], "--cluster")):
        args, out = _args(tmp_path, files, extra)
        p = subprocess.run([sys.executable, "-m", "elastisched", *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, p.stderr
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: ") and expect in p.stderr, p.stderr
        assert not out.exists()


def test_restart_cost_zero_is_zero(tmp_path: Path) -> None:
    """`--restart-cost 0` was read as "unset" (30 s): the three runs must give three different JCTs."""
    jct = {}
    for cost in ("0", "1", "30"):
        out = tmp_path / cost
        r = runner.invoke(app, ["sim", "run", "-w", "synthetic:num_jobs=20,rate=40,seed=2", "-p", "tiresias",
                                "--cluster", "2x4:t4", "--out", str(out), "--restart-cost", cost])
        assert r.exit_code == 0, r.output
        jct[cost] = json.loads((out / "summary.json").read_text())["avg_jct"]
    assert jct["0"] < jct["1"] < jct["30"]
