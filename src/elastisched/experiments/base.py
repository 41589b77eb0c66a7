"""The shape every reproduced study takes: a config dataclass → runs through the shared runner → a result.

An `Experiment` is found by name in one registry (`elastisched reproduce NAME`). Its `Config` is a frozen
dataclass whose fields (int, float, str, bool, Path, their `| None`, tuples of str/int) become CLI options
(`cli/reproduce.py`; each option's help is the field's `metadata["help"]` or its trailing `# comment`);
`run` returns an `ExperimentResult`, which `report/` turns into `NAME.json`, PNG plots and one `report.html`
of the same shape for every study: a verdict against the paper's figure, tables with units, the plots and
the configuration.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from elastisched.core.errors import ConfigError

#: progress factory: task name → callback(done, total) (or None for no progress display)
ProgressFactory = Callable[[str], Callable[[float, int, int], None] | None]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One headline figure against the paper's (or the issue's) bar."""

    claim: str  # what is compared, e.g. "JCT reduction vs FIFO baseline (×)"
    measured: float
    target: str  # the bar as text, e.g. "≥ 1.48"
    passed: bool
    unit: str = ""


@dataclass
class Table:
    """Rows of a result table; `columns` maps each key to its header with unit, e.g. {"avg_jct": "avg JCT (s)"}."""

    columns: dict[str, str]
    rows: list[dict[str, Any]]
    title: str = ""


@dataclass
class ExperimentResult:
    name: str
    title: str
    config: dict[str, Any]
    verdicts: list[Verdict] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)  # file name (…png) → PNG bytes; each titled, labelled
    data: dict[str, Any] = field(default_factory=dict)  # everything else that goes to NAME.json
    files: dict[str, bytes | str] = field(default_factory=dict)  # other outputs by file name, e.g. per-run CSVs

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)


class Experiment:
    """Base class: set `name`, `title`, `paper`, `Config`; implement `run`."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    paper: ClassVar[str] = ""  # citation of the figure reproduced (paper, section / artifact file)
    Config: ClassVar[type] = object

    def run(self, config: Any, progress: ProgressFactory | None = None) -> ExperimentResult:
        raise NotImplementedError


_REGISTRY: dict[str, type[Experiment]] = {}


def register_experiment(cls: type[Experiment]) -> type[Experiment]:
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"experiment name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def registered_experiments() -> dict[str, type[Experiment]]:
    """Every experiment module under `elastisched.experiments` (imported on first call), by name."""
    import elastisched.experiments as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_") and info.name != "base":
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    return dict(sorted(_REGISTRY.items()))


def get_experiment(name: str) -> type[Experiment]:
    exps = registered_experiments()
    if name not in exps:
        raise ConfigError("experiment", name, f"unknown; known: {', '.join(exps)}")
    return exps[name]
