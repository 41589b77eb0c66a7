"""One self-contained HTML report: summary table plus embedded PNG figures (no external files)."""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}img{max-width:100%}
pre{background:#f7f7f7;padding:8px;font-size:12px;overflow-x:auto}"""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return html.escape(str(v))


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def decimals(values: Sequence[Any]) -> int:
    """One precision for a whole column: fewer decimals the larger its numbers (no exponent notation)."""
    nums = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v)]
    big = max(nums, default=0.0)
    return 0 if big >= 1000 else 1 if big >= 10 else 3 if big >= 0.1 or not nums else 4


def cell(v: Any, digits: int) -> str:
    """Plain text of one value: thousands separators, `digits` decimals for floats, yes/no for booleans."""
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.{digits}f}" if math.isfinite(v) else str(v)
    return str(v)


def unit_table(columns: Mapping[str, str], rows: Sequence[Mapping[str, Any]]) -> str:
    """A table whose headers (`columns`: key → header with unit) carry the units and whose numbers have one
    fixed precision per column."""
    digits = {k: decimals([r.get(k) for r in rows]) for k in columns}
    head = "".join(f"<th>{html.escape(h)}</th>" for h in columns.values())
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(r.get(k), digits[k]))}</td>" for k in columns)
                   + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def page(title: str, sections: Sequence[tuple[str, str]], config: Mapping[str, Any] | None = None) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    for heading, content in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>{content}")
    if config:
        parts.append(f"<h2>Configuration</h2><pre>{html.escape(json.dumps(config, indent=2, default=str))}</pre>")
    parts.append("</body></html>")
    return "".join(parts)
