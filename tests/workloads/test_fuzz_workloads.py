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
- anything accepted lies within the documented ranges (`RANGES`, copied from docs/workloads.md).
Counts (rows, files, formats, seconds) are printed and written to `$ELASTISCHED_FUZZ_OUT` when set.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
from elastisched.workloads.gavel import load_gavel_tsv
from elastisched.workloads.ones import history_runs, load_ones_csv
from elastisched.workloads.pollux import load_pollux_csv
from elastisched.workloads.traces import load_raw_trace
from peer_data import ONES_HISTORY

SEED = int(os.environ.get("ELASTISCHED_FUZZ_SEED", "0"))
CASE_LIMIT_S = 5.0
# the documented ranges (docs/workloads.md), restated here so that the oracle does not trust the schema
MAX_TIME = 10 * 365 * 86400.0
RANGES = {"submit_time": (0.0, MAX_TIME), "num_gpus": (1, 65_536), "batch_size": (1, 2**20),
          "work_scale": (0.0, 1e6), "duration": (0.0, MAX_TIME)}
# never a valid number in any field (the range of every field excludes -1, 1e23 and 1e308 too)
NASTY = ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "1_000", "+5", "１２", "٣", "۴", "५",
         "0x10", "1e23", "1e308", "-1", "abc", "", " ", "1.5e", ".", "-", "5" * 5000]
ODD = ["0", "-0", "1.5", "1e-400", "3", "64", "100000", "2.0", "1e9", "\x00", "\u2028", "é", "x" * 300, '"', "'",
       "a\tb", "a,b", '"q"', "\ufeff1", " 7 ", "1e3", "00012", "\\", "\r", "%s", "{}", "-5e-3"]
BYTES = [b"\xff", b"\x00", b"\r", b"\n", b'"', b"\t", b",", b"\xc3", b"\xe2\x80\xa8", b"9", b"-", b"e", b" "]
STRUCTURAL = {"row", "encoding", "file", "rows"}


@dataclass
class Fmt:
    name: str
    suffix: str
    header: list[str] | None  # None: headerless (Gavel TSV)
    rows: list[list[str]]
    numeric: set[int]  # columns whose values are numbers (a nasty value there must be rejected)
    load: Callable[[Path], Workload]
    sep: str = ","
    gz: bool = False


def _formats(models: PerfModels, history: Any) -> list[Fmt]:
    pollux = [["cifar10-0", "107", "cifar10", "6", "2048"], ["ncf-1", "110", "ncf", "1", "256"],
              ["bert-2", "3600.5", "bert", "4", "48"], ["imagenet-3", "7200", "imagenet", "16", "3200"]]
    raw = [["2017-10-09 07:01:55", "3600.0", "1", "3600", "11cb48"], ["2017-10-09 08:00:00", "7200", "4", "1", "x"],
           ["2017-10-10T01:02:03", "600", "2", "", "c"], ["1507532515", "900.5", "8", "", "d"]]
    gavel = [["ResNet-50 (batch size 64)", "cmd", "-n", "1", "1000", "0.0", "2"],
             ["CycleGAN", "cmd", "-n", "1", "500", "30.0", "1"],
             ["Transformer (batch size 128)", "cd x", "-step", "1", "95121", "0.000000", "1"],
             ["ResNet-18 (batch size 64)", "python3 main.py", "image_classification/cifar10", "--num_steps", "1",
              "17484476", "8", "1", "-1.000000", "0.000000"],
             ["A3C", "cmd", "dir", "-n", "1", "2000", "4", "1", "-1", "0", "x", "12.5"]]
    ones = [["0", "resnet50", "imagenet", "10000", "10", "32", "5.00E-04", "0.008", "0.55", "16"],
            ["5", "bert", "sst2", "20000", "5", "16", "1e-5", "", "0.9", "2"],
            ["30", "resnet18", "cifar", "40000", "3", "64", "0.01", "0.1", "0.93", "4"]]
    apps = models.apps
    return [
        Fmt("pollux", ".csv", ["name", "time", "application", "num_replicas", "batch_size"], pollux, {1, 3, 4},
            lambda p: load_pollux_csv(p, apps)),
        Fmt("sia", ".csv", ["name", "time", "application", "num_replicas", "batch_size", "category"],
            [[*r, c] for r, c in zip(pollux, ["adaptive", "rigid", "scale-gpus", ""], strict=True)], {1, 3, 4},
            lambda p: load_workload(str(p), models)),
        Fmt("deepboot", ".csv", ["name", "time", "application", "num_replicas", "batch_size", "duration", "num_task"],
            [[*r, "4.0", "-1"] for r in pollux[:2]] + [["inference-ncf-2", "33", "infer-ncf-1", "1", "1", "2.0",
                                                        "3271"], ["inference-yolo-9", "19", "infer-yolov3-1", "2",
                                                                  "1", "7.0", "530"]], {1, 3, 4, 5, 6},
            lambda p: load_pollux_csv(p, apps)),
        Fmt("raw", ".csv", ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"], raw, {1, 2},
            lambda p: load_raw_trace(p, models)),
        Fmt("raw-gz", ".csv.gz", ["time", "duration", "num_gpus"], [["0", "3600", "1"], ["100.5", "7200", "4"],
                                                                    ["250", "600", "2"]], {0, 1, 2},
            lambda p: load_workload(str(p), models), gz=True),
        Fmt("gavel", ".trace", None, gavel, set(), lambda p: load_gavel_tsv(p, models), sep="\t"),
        Fmt("ones", ".csv", ["time", "model", "task", "epoch_size", "patience", "batch_size", "lr", "max_lr",
                             "target_acc", "num_gpus"], ones, {0, 3, 4, 5, 6, 7, 8, 9},
            lambda p: load_ones_csv(p, history, models)),
    ]


GAVEL_NUMERIC = {7: {4, 5, 6}, 10: {5, 6, 9}, 12: {5, 6, 11}}
GAVEL_NAMES = {7: {4: "total_steps", 5: "arrival_time", 6: "scale_factor"},
               10: {5: "total_steps", 6: "scale_factor", 9: "arrival_time"},
               12: {5: "total_steps", 6: "scale_factor", 11: "arrival_time"}}


class Hang(Exception):
    pass


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def on_alarm(*_: object) -> None:
        raise Hang(f"case ran past {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_accepted(w: Workload) -> str | None:
    """Independent range oracle for an accepted workload."""
    if not w.jobs:
        return "empty workload accepted"
    for j in w.jobs:
        for col, (lo, hi) in RANGES.items():
            v = getattr(j, col)
            if v is None and col == "duration":
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
                return f"{j.job_id}: {col}={v!r} outside [{lo}, {hi}]"
            if col in ("num_gpus", "batch_size") and not isinstance(v, int):
                return f"{j.job_id}: {col}={v!r} not an integer"
        if j.work_scale <= 0 or (j.duration is not None and j.duration <= 0):
            return f"{j.job_id}: non-positive work_scale/duration"
    return None


@dataclass
class Tally:
    rows: int = 0
    files: int = 0
    accepted: int = 0
    rejected: int = 0
    slowest: float = 0.0
    failures: list[str] | None = None
    kept: list[Workload] | None = None  # a sample of accepted workloads, simulated afterwards
    by_format: Counter[str] | None = None
    cases_by_format: Counter[str] | None = None
    seconds_by_format: Counter[str] | None = None
    n_failures: int = 0

    def __post_init__(self) -> None:
        self.failures, self.kept = [], []
        self.by_format, self.cases_by_format, self.seconds_by_format = Counter(), Counter(), Counter()

    def fail(self, what: str) -> None:
        assert self.failures is not None
        self.n_failures += 1
        if len(self.failures) < 30:
            self.failures.append(what[:400])


def run_case(t: Tally, fmt: str, fn: Callable[[], Any], check: Callable[[Exception | None, Any], str | None],
             what: str, rows: int = 1) -> None:
    t.rows += rows
    t.files += 1
    assert t.by_format is not None and t.cases_by_format is not None
    t.by_format[fmt] += rows
    t.cases_by_format[fmt] += 1
    t0 = time.perf_counter()
    err: Exception | None = None
    out: Any = None
    try:
        with deadline(CASE_LIMIT_S):
            out = fn()
    except (WorkloadError, ConfigError) as e:
        err = e
    except Exception as e:  # a traceback or a hang: the failure this suite exists to find
        t.fail(f"{fmt}: {what}: {type(e).__name__}: {e}")
        return
    t.slowest = max(t.slowest, time.perf_counter() - t0)
    assert t.seconds_by_format is not None
    t.seconds_by_format[fmt] += time.perf_counter() - t0
    if err is not None:
        t.rejected += 1
        msg = str(err)
        if "\n" in msg or "\r" in msg or len(msg) > 600:
            t.fail(f"{fmt}: {what}: message not one short line: {msg[:200]!r}")
    elif getattr(out, "exit_code", 0) != 0:  # a CLI invocation that refused its options
        t.rejected += 1
    else:
        t.accepted += 1
        if isinstance(out, Workload) and t.kept is not None and t.accepted % 25 == 1:
            t.kept.append(out)
    bad = check(err, out)
    if bad:
        t.fail(f"{fmt}: {what}: {bad}")


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
    fmts = {f.name: f for f in _formats(models, history)}
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


def _report(t: Tally, seconds: float, name: str) -> None:
    assert t.by_format is not None and t.cases_by_format is not None
    summary = {"seed": SEED, "suite": name, "malformed_rows": t.rows, "cases": t.files, "accepted": t.accepted,
               "rejected": t.rejected, "rows_by_format": {k: v for k, v in t.by_format.items() if v},
               "cases_by_format": dict(t.cases_by_format), "formats": len(t.cases_by_format),
               "seconds_by_format": {k: round(v, 1) for k, v in (t.seconds_by_format or {}).items()},
               "slowest_case_s": round(t.slowest, 3), "seconds": round(seconds, 1), "failures": t.n_failures}
    print(json.dumps(summary))
    out = os.environ.get("ELASTISCHED_FUZZ_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"fuzz_{name}.json").write_text(json.dumps(summary, indent=2))


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
    _report(t, time.perf_counter() - t0, "workloads")
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
    _report(t, time.perf_counter() - t0, "ones")
    assert not t.failures, "\n".join(t.failures or [])
    assert t.rows == 600 and t.accepted > 0 and t.rejected > 0
