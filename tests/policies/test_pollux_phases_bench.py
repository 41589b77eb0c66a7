"""`benchmarks/pollux_phases.py` (issue 22): a real quick run, its counters consistent with one another."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_quick_run_counts_tables_refits_and_fits_per_searching_round(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("pollux_phases", ROOT / "benchmarks" / "pollux_phases.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from elastisched.policies.pollux.beliefs import PolluxBeliefs

    methods = (PolluxBeliefs.__dict__["_compute"], PolluxBeliefs.refit, PolluxBeliefs._fit)
    out = tmp_path / "phases.json"
    try:
        assert mod.main(["--label", "quick", "--quick", "--out", str(out)]) == 0
        assert mod.main(["--label", "again", "--quick", "--cap", "1", "--out", str(out)]) == 0
    finally:  # the counters wrap the class's methods: put them back for the other tests
        PolluxBeliefs._compute, PolluxBeliefs.refit, PolluxBeliefs._fit = methods  # type: ignore[method-assign]
    data = json.loads(out.read_text())
    r = data["quick"]
    assert set(data) == {"quick", "again"} and r["workload"] == "philly:sample=300,seed=1"
    assert r["finished"] and r["rounds"] > r["searching_rounds"] > 0  # quiet rounds do not search
    assert r["tables"]["calls"] == r["refit"]["calls"] == r["searching_rounds"]
    assert 0 < r["tables"]["raw_same_fit_and_size"] < r["tables"]["raw"]
    assert r["fits"]["count"] > 0 and 0 < r["fits"]["ms"] < r["refit"]["ms"] < 1000 * r["cpu_s"]
    assert r["options"] == {"budget_s": 0.005, "quiet_s": 300.0} and r["commit"]
    stopped = data["again"]
    assert not stopped["finished"] and 0 < stopped["day_reached"] < 106 and stopped["cap_s"] == 1
