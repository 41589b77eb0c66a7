"""The fuzz suite's corpus (tests/workloads/test_fuzz_workloads.py): values that are never valid numbers, odd
values and bytes to insert, and valid rows of each workload format with the loader that reads it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.models import PerfModels
from elastisched.workloads import Workload, load_workload
from elastisched.workloads.gavel import load_gavel_tsv
from elastisched.workloads.ones import load_ones_csv
from elastisched.workloads.pollux import load_pollux_csv
from elastisched.workloads.traces import load_raw_trace

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


def formats(models: PerfModels, history: Any) -> list[Fmt]:
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
