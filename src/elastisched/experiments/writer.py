"""The one writer for any `ExperimentResult`: `NAME.json` (config, verdicts, tables, data), its PNG plots,
and one styled `report.html` of the same shape for every study — verdict lines against the paper's figure,
tables whose headers carry units and whose numbers have a fixed precision per column, the plots, the
configuration. Everything is rendered before the first file is written (nothing half-written on failure)."""

from __future__ import annotations

import dataclasses
import html as _html
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from elastisched import __version__
from elastisched.experiments.base import ExperimentResult, Table, Verdict
from elastisched.report import html
from elastisched.report.compare import write_files
from elastisched.report.html import cell, decimals


def render_table(t: Table) -> str:
    """HTML of one table: headers from `t.columns` (they carry the units), one precision per column."""
    return html.unit_table(t.columns, t.rows)


def verdict_line(v: Verdict) -> str:
    digits = decimals([v.measured])
    unit = f" {v.unit}" if v.unit else ""
    return (f"{'PASS' if v.passed else 'FAIL'}: {v.claim} = {cell(float(v.measured), digits)}{unit} "
            f"(bar {v.target}{unit})")


def render_html(result: ExperimentResult, paper: str = "") -> str:
    verdicts = "".join(f"<p style='color:{'#1a7f37' if v.passed else '#b42318'}'><b>{_html.escape(verdict_line(v))}"
                       "</b></p>" for v in result.verdicts) or "<p>(no verdict: this study has no bar)</p>"
    if paper:
        verdicts += f"<p>Reproduces: {_html.escape(paper)}</p>"
    sections = [("Verdict", verdicts)]
    sections += [(t.title or "Table", render_table(t)) for t in result.tables]
    sections += [(name.removesuffix(".png"), f"<p><a href='{_html.escape(name)}'>{_html.escape(name)}</a></p>"
                  + html.img(png, name)) for name, png in result.figures.items()]
    return html.page(result.title, sections, {**result.config, "version": __version__})


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _jsonable(x.item())
    return x


def to_json(result: ExperimentResult) -> str:
    doc = {"name": result.name, "title": result.title, "version": __version__, "passed": result.passed,
           "config": result.config, "verdicts": [dataclasses.asdict(v) for v in result.verdicts],
           "tables": [{"title": t.title, "columns": t.columns, "rows": t.rows} for t in result.tables],
           "figures": sorted(result.figures), "files": sorted(result.files), "data": result.data}
    return json.dumps(_jsonable(doc), indent=2, default=str)


def write_result(result: ExperimentResult, out: Path, paper: str = "") -> list[Path]:
    """Write NAME.json, every PNG, the result's other files and report.html into `out`; returns the paths."""
    files: dict[str, bytes | str] = {**result.files, f"{result.name}.json": to_json(result), **result.figures,
                                     "report.html": render_html(result, paper)}
    write_files(out, files)
    return [out / n for n in files]
