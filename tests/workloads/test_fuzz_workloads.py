"""Fuzz suite for every workload loader, workload spec string and cluster spec (issue 11, items 6-8).

A seeded corpus: valid rows of each format, each mutated once (a nasty value in a numeric column, an odd
value anywhere, a cell dropped or added, a random byte inserted), one mutated row per file among valid
rows, plus file-level mutations (BOM, CR-only and CRLF endings, truncated gzip, header damage, NUL, a
field over the CSV limit), mutated `synthetic:` / `philly:` specs, cluster strings and YAML/JSON files, and
`sim run` / `sim compare` invocations with mutated options; a sample of the accepted workloads is simulated.
The oracle, written independently of the loaders:
- the only exceptions are `WorkloadError` / `ConfigError` (anything else is a traceback);
- no case takes more than `CASE_LIMIT_S` (a hang fails the case; the per-case alarm enforces it);
- a rejected row names the file, the mutated line (or a later one, for a byte that opens a quote or splits
  the line) and a real column; a nasty value (`nan`, `inf`, `1_000`, `+5`, full-width or Arabic-Indic
  digits, ...) in a numeric column is rejected naming that column;
- anything accepted lies within the documented ranges (`RANGES` in tests/fuzz_harness.py, copied from
  docs/workloads.md).
Counts (rows, files, formats, seconds) are printed and written to `$ELASTISCHED_FUZZ_OUT` when set.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from elastisched.cli.main import app
from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError, WorkloadError
from elastisched.core.types import NodeView
from elastisched.models import PerfModels
from elastisched.policies.base import make_policy
from elastisched.sim import SimConfig, simulate
from elastisched.sim.runner import load_cluster
from elastisched.workloads import Workload, load_workload
from elastisched.workloads.ones import history_runs
from fuzz_corpus import BYTES, GAVEL_NAMES, GAVEL_NUMERIC, NASTY, ODD, STRUCTURAL, Fmt, formats
from fuzz_harness import SEED, Tally, check_accepted, report, run_case
from peer_data import ONES_HISTORY


def _mutate_row(rng: random.Random, f: Fmt, cells: list[str]) -> tuple[str, int | None, bool, str]:
    """(row text, mutated column index or None, must be rejected, description)."""
    cells = list(cells)
    numeric = GAVEL_NUMERIC[len(cells)] if f.name == "gavel" else f.numeric
    kind = rng.choice(["nasty", "nasty", "odd", "drop", "add", "byte", "byte"])
    if kind == "nasty" and numeric:
        i = rng.choice(sorted(numeric))
        v = rng.choice(NASTY)
        cells[i] = v
        must = True
        if v.strip() == "" and ((f.name == "ones" and i == 7) or (f.name == "deepboot" and i in (5, 6))):
            must = False  # an optional cell left empty
        if f.name == "deepboot" and i in (5, 6) and v == "-1":
            must = False  # DeepBoot's "not applicable" on a training row
        return f.sep.join(cells), i, must, f"column {i} = {v[:20]!r}"
    if kind in ("odd", "nasty"):
        i = rng.randrange(len(cells))
        cells[i] = rng.choice(ODD + NASTY)
        return f.sep.join(cells), i, False, f"column {i} = {cells[i][:20]!r}"
    if kind == "drop":
        i = rng.randrange(len(cells))
        del cells[i]
        return f.sep.join(cells), None, False, f"cell {i} dropped"
    if kind == "add":
        cells.insert(rng.randrange(len(cells) + 1), rng.choice(ODD))
        return f.sep.join(cells), None, False, "cell added"
    text = f.sep.join(cells)
    b = text.encode()
    pos = rng.randrange(len(b) + 1)
    ins = rng.choice(BYTES)
    return (b[:pos] + ins + b[pos:]).decode("utf-8", "surrogateescape"), None, False, f"byte {ins!r} at {pos}"


def _write(path: Path, f: Fmt, lines: list[str], gz: bool) -> None:
    data = "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n"
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)


def _row_check(f: Fmt, path: Path, line: int, col: int | None, must: bool, ncells: int, last: int,
               ) -> Callable[[Exception | None, Any], str | None]:
    names = f.header if f.header is not None else None

    def check(err: Exception | None, out: Any) -> str | None:
        if err is None:
            if must:
                return "nasty value accepted"
            return check_accepted(out)
        if not isinstance(err, WorkloadError):
            return f"ConfigError for a row: {err}"
        if err.path != str(path):
            return f"error names {err.path!r}, not the file"
        known = set(names or []) | STRUCTURAL | {"job_type", "total_steps", "scale_factor", "arrival_time", "name",
                                                 "submit_time", "num_gpus", "min_gpus", "max_gpus", "work_scale"}
        if err.column not in known:
            return f"column {err.column!r} is not a field"
        span = "after the first job" in err.why  # two rows too far apart in time: the later one is named
        if not (line if not span else 1) <= err.line <= last and not (err.column in STRUCTURAL and err.line in (0, 1)):
            return f"line {err.line}, expected {line}..{last}: {err}"
        if must and col is not None:
            want = names[col] if names is not None else GAVEL_NAMES[ncells][col]
            if err.column != want and not (f.name == "gavel" and err.column == "row"):
                return f"names column {err.column!r}, expected {want!r}: {err}"
            if err.line != line:
                return f"names line {err.line}, expected {line}"
        return None
    return check


def fuzz_rows(tmp: Path, models: PerfModels, history: Any, counts: dict[str, int], t: Tally) -> None:
    rng = random.Random(SEED)
    fmts = {f.name: f for f in formats(models, history)}
    for name, n in counts.items():
        f = fmts[name]
        for k in range(n):
            valid = [rng.choice(f.rows) for _ in range(rng.randint(1, 2))]
            text, col, must, what = _mutate_row(rng, f, rng.choice(f.rows))
            pos = 0 if name == "ones" else rng.randrange(len(valid) + 1)
            body = [f.sep.join(r) for r in valid]
            # unique names so that a duplicate name is never the (correct) reason for a rejection
            body = [b.replace(r[0], f"{r[0]}-v{i}", 1) if f.header and f.header[0] == "name" else b
                    for i, (b, r) in enumerate(zip(body, valid, strict=True))]
            body.insert(pos, text)
            lines = ([",".join(f.header)] if f.header else []) + body
            path = tmp / f"{name}-{k}{f.suffix}"
            _write(path, f, lines, f.gz)
            first = pos + (2 if f.header else 1)
            ncells = len(text.split(f.sep))
            run_case(t, name, lambda p=path, f=f: f.load(p),
                     _row_check(f, path, first, col, must, ncells, len(lines) + 1), f"{path.name} {what}")


def fuzz_files(tmp: Path, models: PerfModels, n: int, t: Tally) -> None:
    """Whole-file damage on Pollux and raw traces: each must load the same jobs, or be rejected cleanly."""
    rng = random.Random(SEED + 1)
    good = "name,time,application,num_replicas,batch_size\na,0,ncf,1,256\nb,5,cifar10,4,512\n"
    raw = "time,duration,num_gpus\n0,3600,1\n100,7200,4\n"
    for k in range(n):
        base = rng.choice([good, raw])
        kind = rng.choice(["bom", "cr", "crlf", "gz-trunc", "gz-garbage", "empty", "header-only", "header-typo",
                           "nul", "huge-field", "not-utf8", "quote", "wide-header", "wide-row"])
        data = base.encode()
        suffix = ".csv"
        must_load = kind in ("bom", "cr", "crlf")
        if kind == "bom":
            data = b"\xef\xbb\xbf" + data
        elif kind == "cr":
            data = data.replace(b"\n", b"\r")
        elif kind == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif kind.startswith("gz"):
            suffix = ".csv.gz"
            z = gzip.compress(data, mtime=0)
            data = z[:rng.randrange(1, len(z) - 1)] if kind == "gz-trunc" else bytes(rng.randrange(256) for _ in z)
        elif kind == "empty":
            data = b""
        elif kind == "header-only":
            data = data.split(b"\n")[0] + b"\n"
        elif kind == "header-typo":
            data = data.replace(b"time", b"tiem", 1)
        elif kind == "nul":
            data = data.replace(b"\n", b"\n\x00", 1)
        elif kind == "huge-field":
            data = data + b"c," + b"9" * 140_000 + b",ncf,1,2\n"
        elif kind == "not-utf8":
            data = data + b"\xff\xfe,1,2\n"
        elif kind == "quote":
            data = data.replace(b"\n", b'\n"', 1)
        elif kind == "wide-header":  # 100k columns: nothing may be quadratic in the header width
            data = b",".join(b"c%d" % i if rng.random() < 0.5 else b"" for i in range(100_000)) + b"\n" + data
        elif kind == "wide-row":
            data = data + b"1," * 100_000 + b"\n"
        path = tmp / f"file-{k}{suffix}"
        path.write_bytes(data)

        def check(err: Exception | None, out: Any, kind: str = kind, path: Path = path,
                  must_load: bool = must_load) -> str | None:
            if err is None:
                return check_accepted(out) if not must_load or len(out) == 2 else f"{kind}: {len(out)} jobs, not 2"
            if must_load:
                return f"{kind}: a valid file was rejected: {err}"
            if isinstance(err, WorkloadError) and err.path != str(path):
                return f"error names {err.path!r}"
            return None
        run_case(t, "file", lambda p=path: load_workload(str(p), models), check, f"{kind} {path.name}", rows=0)


def fuzz_specs(models: PerfModels, n: int, t: Tally) -> None:
    rng = random.Random(SEED + 2)
    for _k in range(n):
        kind = rng.choice(["synthetic", "synthetic", "philly", "pollux", "path"])
        if kind == "synthetic":
            opts = {"num_jobs": rng.choice(["3", "5", "0", "100001", *NASTY]),
                    "rate": rng.choice(["20", "0.5", "0", "1e-9", *NASTY]), "seed": rng.choice(["0", "7", *NASTY])}
            used = {key: v for key, v in opts.items() if rng.random() < 0.8}
            parts = [f"{key}={v}" for key, v in used.items()]
            extra = rng.choice(["foo=1", "work_scale=inf", "num_jobs=3", "x", "=", ""]) if rng.random() < 0.2 else None
            if extra is not None:
                parts.append(extra)
            spec = "synthetic:" + ",".join(parts)
            must_reject = (any(v in NASTY for v in used.values()) or used.get("num_jobs") in ("0", "100001")
                           or used.get("rate") == "0" or extra in ("foo=1", "work_scale=inf", "x", "=")
                           or (extra == "num_jobs=3" and "num_jobs" in used) or (extra == "" and bool(used)))
            valid: bool | None = False if must_reject else (None if used.get("rate") == "1e-9" else True)
        elif kind == "philly":  # only invalid ones: a valid one loads the 82k-job trace (seconds)
            key = rng.choice(["sample", "seed", "days", "bogus"])
            spec = f"philly:{key}={rng.choice(NASTY)}"
            valid = False
        elif kind == "pollux":
            spec = "pollux:" + rng.choice(["workload-0", "workload-99", "../x", "", "workload-1\x00", "ｗ", "%"])
            valid = False
        else:
            spec = rng.choice(["/", ".", "/nonexistent.csv", "x\x00y", "", " ", "a" * 5000, "/dev/null", "/proc"])
            valid = False

        def check(err: Exception | None, out: Any, valid: bool | None = valid, spec: str = spec) -> str | None:
            if err is None:
                return check_accepted(out) if valid is not False else f"{spec[:60]!r} accepted"
            if valid is True:
                return f"valid spec rejected: {err}"
            if not isinstance(err, ConfigError) or not err.field.startswith(("synthetic:", "philly:", "--workload")):
                return f"rejection does not name the option: {err}"
            return None
        run_case(t, "spec", lambda s=spec: load_workload(s, models), check, repr(spec[:80]), rows=0)


def _cluster_ok(nodes: tuple[NodeView, ...]) -> str | None:
    if not 1 <= len(nodes) <= 100_000:
        return f"{len(nodes)} nodes accepted"
    for n in nodes:
        if not (isinstance(n.num_gpus, int) and 1 <= n.num_gpus <= 64) or not n.gpu_type.isascii():
            return f"node {n} accepted"
    return None


def fuzz_clusters(tmp: Path, n: int, t: Tally) -> None:
    rng = random.Random(SEED + 3)
    values: list[Any] = [4, 0, -1, 2.5, True, None, "4", "x", [], {}, 10**23, 100_000_000, 65, 1e308, "nan",
                         float("nan"), float("inf"), 2]
    for k in range(n):
        kind = rng.choice(["string", "string", "yaml", "json", "bytes", "bigint"])
        if kind == "bigint":
            spec = str(tmp / f"cluster-{k}.yaml")
            Path(spec).write_text(f"- {{nodes: {'9' * rng.choice([10, 5000])}, gpus_per_node: 4}}\n")
        elif kind == "string":
            a, b = rng.choice(["4", "0", "100000000", "1_000", "+5", "１６", "٣", "99999999999", "-1", "2", ""]), \
                rng.choice(["4", "0", "65", "1e3", "８", "8", "x"])
            spec = rng.choice([f"{a}x{b}:t4", f"{a}x{b}:a100@loanable,2x4", f"{a}x{b}:{'t' * 40}", f"{a}*{b}",
                               f"2x4:t4,{a}x{b}@nowhere", ",", f"{a}x{b}:t4," * 3])
        else:
            item: dict[str, Any] = {"nodes": rng.choice(values), "gpus_per_node": rng.choice(values)}
            if rng.random() < 0.3:
                item[rng.choice(["gpu_type", "pool", "colour"])] = rng.choice(["a100", "t 4", 5, "loanable", "x"])
            doc: Any = rng.choice([[item], {"nodes": [item]}, item, [item, 5], "text", 3])
            if kind == "json":
                text = json.dumps(doc, default=str)
            else:
                import yaml
                text = yaml.safe_dump(doc)
            raw = text.encode()
            if kind == "bytes" or rng.random() < 0.2:
                pos = rng.randrange(len(raw) + 1)
                raw = raw[:pos] + rng.choice([b"\xff", b"{", b"[", b":", b"\x00", b"\t", b"&a *a"]) + raw[pos:]
            spec = str(tmp / f"cluster-{k}.{'json' if kind == 'json' else 'yaml'}")
            Path(spec).write_bytes(raw)

        def check(err: Exception | None, out: Any) -> str | None:
            return _cluster_ok(out) if err is None else None
        run_case(t, "cluster", lambda s=spec: load_cluster(s), check, repr(spec[:80]), rows=0)


def simulate_accepted(t: Tally, models: PerfModels) -> int:
    """Every kept accepted workload runs through the simulator within the per-case limit (no hang)."""
    nodes = parse_cluster("2x4:t4")
    for w in t.kept or []:
        def run(w: Workload = w) -> Any:
            return simulate(w, make_policy("fifo"), nodes, models, SimConfig(restart_cost=0.0))

        def check(err: Exception | None, out: Any) -> str | None:
            return f"simulator rejected an accepted workload: {err}" if err is not None else None
        run_case(t, "simulate", run, check, f"simulate {w.source}", rows=0)
    return len(t.kept or [])


def fuzz_cli(tmp: Path, n: int, t: Tally) -> None:
    """`sim run` / `sim compare` with one or more mutated options: exit 2 and one `error:` line, or a clean run."""
    rng = random.Random(SEED + 4)
    runner = CliRunner()
    (tmp / "cli-file").write_text("x")
    (tmp / "cli-dir").mkdir(exist_ok=True)
    bad_csv = tmp / "cli-bad.csv"
    bad_csv.write_text("name,time,application,num_replicas,batch_size\na,0,ncf,nan,256\n")
    choices = {
        "--seed": ["0", "5", *NASTY, "4294967296", "1e3"],
        "--cluster": ["1x4:t4", "100000000x4:t4", "4x65", "0x4", "１x4", "1x4:t 4", str(tmp / "no.yaml"), ""],
        "-w": ["synthetic:num_jobs=2,rate=60", "synthetic:num_jobs=0", "synthetic:bogus=1", "philly:sample=abc",
               str(tmp / "cli-dir"), str(bad_csv), "pollux:nope", "", "x\x00"],
        "--out": [str(tmp / "cli-out"), str(tmp / "cli-file"), str(tmp / "cli-file" / "sub"), "x\x00"],
        "--restart-cost": ["0", "30", *NASTY, "86401"],
        "-p": ["fifo", "nope", "", "fifo,srtf"],
        "--policies": ["fifo", "fifo,nope", ",", "fifo,fifo", "nope"],
    }
    good = {"--seed": "0", "--cluster": "1x4:t4", "-w": "synthetic:num_jobs=2,rate=60", "--out": str(tmp / "cli-out"),
            "--restart-cost": "0", "-p": "fifo", "--policies": "fifo"}
    for _ in range(n):
        cmd = rng.choice(["run", "compare"])
        keys = ["--seed", "--cluster", "-w", "--out"] + (["--restart-cost", "-p"] if cmd == "run" else ["--policies"])
        opts = dict(good)
        for k in rng.sample(keys, rng.randint(1, 2)):
            opts[k] = rng.choice(choices[k][1:])  # mostly bad values; a valid run (plots, files) costs ~1 s
        args = ["sim", cmd, *[x for k in keys for x in (k, opts[k])]]
        valid = all(opts[k] == good[k] or (k, opts[k]) in (("--seed", "5"), ("--seed", "1e3"), ("--restart-cost",
                                                                                                   "30")) for k in keys)

        def invoke(args: list[str] = args) -> Any:
            return runner.invoke(app, args)

        def check(err: Exception | None, r: Any, valid: bool = valid) -> str | None:
            if r.exception is not None and not isinstance(r.exception, SystemExit):
                return f"{type(r.exception).__name__}: {r.exception}"
            if r.exit_code == 0:
                return None if valid else "invalid options accepted (exit 0)"
            lines = r.stderr.strip().splitlines()
            if r.exit_code != 2 or len(lines) != 1 or not lines[0].startswith("error: "):
                return f"exit {r.exit_code}, stderr {r.stderr[:200]!r}"
            return "valid options rejected: " + lines[0] if valid else None
        run_case(t, "cli", invoke, check, repr(args)[:200], rows=0)


@pytest.mark.timeout(300)
def test_fuzz_workload_rows_and_specs(tmp_path: Path, models: PerfModels) -> None:
    t0 = time.perf_counter()
    t = Tally()
    history = history_runs(ONES_HISTORY) if ONES_HISTORY is not None else None
    counts = {"pollux": 2200, "sia": 1500, "deepboot": 1500, "raw": 1600, "raw-gz": 1000, "gavel": 2200}
    fuzz_rows(tmp_path, models, history, counts, t)
    fuzz_files(tmp_path, models, 600, t)
    fuzz_specs(models, 1200, t)
    fuzz_clusters(tmp_path, 1200, t)
    fuzz_cli(tmp_path, 200, t)
    simulated = simulate_accepted(t, models)
    report(t, time.perf_counter() - t0, "workloads")
    assert not t.failures, "\n".join(t.failures or [])
    assert t.rows >= 10_000 and len(t.cases_by_format or {}) >= 11
    assert t.accepted > 0 and t.rejected > 0 and simulated >= 20


def test_fuzz_ones_rows(tmp_path: Path, models: PerfModels) -> None:
    path = ONES_HISTORY
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("peer-data/ones (job_history.csv) is missing: the ONES fuzz cases need it")
        pytest.skip("peer-data/ones not found")
    t0 = time.perf_counter()
    t = Tally()
    fuzz_rows(tmp_path, models, history_runs(path), {"ones": 600}, t)
    report(t, time.perf_counter() - t0, "ones")
    assert not t.failures, "\n".join(t.failures or [])
    assert t.rows == 600 and t.accepted > 0 and t.rejected > 0
