"""The valid range of every field: docs/workloads.md and `schema.FIELDS` agree, and the number grammar holds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastisched.core.errors import ConfigError
from elastisched.sim.runner import setup
from elastisched.workloads.schema import FIELDS, GPUS, LR, SEED, parse_number

DOC = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"


def test_docs_table_matches_the_schema() -> None:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] in ("integer", "number"):
            rows[cells[0]] = (cells[1], cells[2])
    assert set(rows) == {f.name for f in FIELDS}
    for f in FIELDS:
        assert rows[f.name] == ("integer" if f.integer else "number", f.range_text), f.name


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "+5", "1_000", "１２", "٣", "0x10",
                                  "", " ", ".", "-", "1.5e", "1e5000", "5" * 100, "1,5", "\u200b1"])
def test_numbers_are_plain_ascii_decimals(text: str) -> None:
    with pytest.raises(ValueError):
        parse_number(text)


@pytest.mark.parametrize("text,value", [("12", 12.0), (" 7 ", 7.0), ("3600.5", 3600.5), ("5.00E-04", 5e-4),
                                        ("-3", -3.0), (".5", 0.5), ("4.", 4.0), ("1e3", 1000.0)])
def test_plain_numbers_parse(text: str, value: float) -> None:
    assert parse_number(text) == value


def test_ranges_bound_both_ends_and_integers() -> None:
    assert GPUS("4") == 4 and GPUS("4.0") == 4 and isinstance(GPUS("4.0"), int)
    for bad in ("0", "4.5", "65537", "1e23"):
        with pytest.raises(ValueError, match=r"must be an integer in \[1, 65536\]"):
            GPUS(bad)
    with pytest.raises(ValueError, match=r"\(0, 100\]"):
        LR("0")
    assert SEED("4294967295") == 2**32 - 1
    with pytest.raises(ValueError):
        SEED("-1")


@settings(max_examples=600, derandomize=True, deadline=None)
@given(st.text(max_size=40) | st.from_regex(r"[-+]?[0-9_١-٩０-９.eE]{1,12}", fullmatch=True))
def test_any_text_is_a_plain_finite_number_or_refused(text: str) -> None:
    try:
        x = parse_number(text)
    except ValueError:
        return
    assert math.isfinite(x) and text.strip(" ").isascii() and "_" not in text and "+" not in text.strip(" ")[:1]
    assert x == float(text.strip(" "))


def test_setup_refuses_a_bad_restart_cost() -> None:
    for bad in (-1.0, math.nan, math.inf, 1e9):
        with pytest.raises(ConfigError, match="--restart-cost"):
            setup("synthetic:num_jobs=2", "1x4:t4", restart_cost=bad)


def test_check_job_fast_and_detailed_paths_agree() -> None:
    import dataclasses

    import numpy as np

    from elastisched.core.types import JobSpec
    from elastisched.workloads.schema import check_job

    ok = JobSpec("a", 0.0, "ncf", 4, 256, min_gpus=4, max_gpus=4, work_scale=0.5, duration=60.0)
    assert check_job(ok) is None
    assert check_job(dataclasses.replace(ok, num_gpus=np.int64(4))) is None  # numpy ints: the detailed path
    for change, column in ((dict(num_gpus=0), "num_gpus"), (dict(num_gpus=4.5), "num_gpus"),
                           (dict(batch_size=2**21), "batch_size"), (dict(submit_time=math.nan), "submit_time"),
                           (dict(work_scale=math.inf), "work_scale"), (dict(duration=0.0), "duration"),
                           (dict(min_gpus=8), "min_gpus"), (dict(job_id="a\nb"), "name"), (dict(job_id=""), "name")):
        bad = check_job(dataclasses.replace(ok, **change))
        assert bad is not None and bad.startswith(column + ":"), (change, bad)
