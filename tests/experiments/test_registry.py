"""The reproduce registry and its two consumers: the generated CLI commands and the one result writer."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from elastisched.cli.main import app
from elastisched.cli.reproduce import build_command
from elastisched.experiments.base import (
    Experiment,
    ExperimentResult,
    ProgressFactory,
    Table,
    Verdict,
    registered_experiments,
)
from elastisched.experiments.writer import decimals, render_table, write_result
from elastisched.report.plots import bar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from rendering import check_page

runner = CliRunner()
STUDIES = {"pollux", "lyra", "lyra-deepboot", "ones"}


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m|[│╭╮╰╯─]", " ", text))


def test_every_registered_experiment_has_a_command_listed_with_its_title() -> None:
    exps = registered_experiments()
    assert exps.keys() >= STUDIES
    r = runner.invoke(app, ["reproduce", "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    listing = _plain(r.output)
    for name, exp in exps.items():
        assert name in listing and exp.title.split(":")[0] in listing, name


def test_each_command_offers_every_config_field_with_its_doc() -> None:
    for name, exp in registered_experiments().items():
        r = runner.invoke(app, ["reproduce", name, "--help"], terminal_width=400)
        assert r.exit_code == 0, (name, r.output)
        text = _plain(r.output)
        assert "--out" in text
        for f in dataclasses.fields(exp.Config):
            assert "--" + f.name.replace("_", "-") in text, (name, f.name)


@dataclass(frozen=True)
class ToyConfig:
    n: int = 3  # how many values
    scale: float = 1.5  # multiplies every value
    label: str = "toy"  # a free text label
    loud: bool = False  # shout the label
    where: Path | None = None  # an optional path
    names: tuple[str, ...] = ("a", "b")  # some names
    sizes: tuple[int, ...] = field(default=(1, 2), metadata={"help": "sizes from metadata"})


class Toy(Experiment):
    name = "toy"
    title = "A toy study"
    paper = "nobody, 2026"
    Config = ToyConfig

    def run(self, config: ToyConfig, progress: ProgressFactory | None = None) -> ExperimentResult:
        cb = progress("toy") if progress else None
        if cb:
            cb(0.0, 1, 1)
        vals = {f"v{i}": config.scale * (i + 1) * 4340.0407 for i in range(config.n)}
        return ExperimentResult(
            self.name, self.title, dataclasses.asdict(config),
            [Verdict("sum of values", sum(vals.values()), "≥ 1", True, "s")],
            [Table({"k": "key", "v": "value (s)", "f": "fraction (fraction)"},
                   [{"k": k, "v": v, "f": 0.17625555800498338} for k, v in vals.items()], "values")],
            {"values.png": bar(vals, "toy values", "value (s)", xlabel="key")}, {"vals": vals, "label": config.label})


def _toy_app(seen: list[str]) -> typer.Typer:
    @contextmanager
    def bars() -> Any:
        yield lambda name: (lambda t, d, n: seen.append(f"{name}:{d}/{n}"))

    @contextmanager
    def errors() -> Any:
        yield

    toy = typer.Typer()
    toy.command("toy")(build_command(Toy, bars, errors, seen.append))
    toy.command("other")(lambda: None)  # a second command keeps `toy` a named sub-command
    return toy


def test_generated_command_parses_every_field_type_and_writes_the_result(tmp_path: Path) -> None:
    seen: list[str] = []
    toy = _toy_app(seen)
    h = _plain(runner.invoke(toy, ["toy", "--help"], terminal_width=400).output)
    for doc in ("how many values", "multiplies every value", "sizes from metadata", "(comma-separated)"):
        assert doc in h
    out = tmp_path / "toy"
    r = runner.invoke(toy, ["toy", "--n", "2", "--scale", "2", "--loud", "--where", str(tmp_path),
                            "--names", "x,y,z", "--sizes", "4,5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    saved = json.loads((out / "toy.json").read_text())
    assert saved["config"] == {"n": 2, "scale": 2.0, "label": "toy", "loud": True, "where": str(tmp_path),
                               "names": ["x", "y", "z"], "sizes": [4, 5]}
    assert "toy:1/1" in seen and any(s.startswith("PASS: sum of values") for s in seen)
    assert (out / "values.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_writer_produces_json_html_and_png_with_fixed_precision(tmp_path: Path) -> None:
    res = Toy().run(ToyConfig(n=3))
    paths = write_result(res, tmp_path, Toy.paper)
    assert {p.name for p in paths} == {"toy.json", "values.png", "report.html"}
    doc = json.loads((tmp_path / "toy.json").read_text())
    assert doc["verdicts"][0]["passed"] and doc["tables"][0]["columns"]["v"] == "value (s)"
    assert doc["data"]["label"] == "toy" and doc["figures"] == ["values.png"]
    page = (tmp_path / "report.html").read_text()
    assert "PASS: sum of values" in page and "nobody, 2026" in page and "data:image/png;base64," in page
    assert "e+0" not in page and "0.17625555800498338" not in page and "13,020" in page
    assert "<th>value (s)</th>" in page and "0.176" in page
    check_page(tmp_path / "report.html", "reproduce-writer")


def test_column_precision_is_fixed_per_column() -> None:
    assert decimals([13020.123, 5.5]) == 0 and decimals([12.5, 3.25]) == 1 and decimals([0.5, 2.0]) == 3
    html = render_table(Table({"a": "a (x)"}, [{"a": 1.302e4}, {"a": 2.6}]))
    assert "13,020" in html and "<td>3</td>" in html and "e+" not in html
