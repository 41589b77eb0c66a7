"""How long the daemon's rounds take, as operators and the scale benchmark read it: the wall time of each
step that ran a round (backend poll, users' requests, snapshot, policy, persisting the decision, handing the
actions to the backend) beside the policy and engine part of it (`RoundResult.latency_s`).

A bounded window of recent rounds gives exact quantiles (`GET /v1/scheduler`, `round_seconds`); a cumulative
histogram since start feeds Prometheus (`elastisched_round_seconds` at `/metrics`).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


def _quantile(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else 0.0


class RoundTimes:
    def __init__(self, window: int = 100_000) -> None:
        self.recent: deque[tuple[float, float]] = deque(maxlen=window)  # (step wall s, policy + engine s)
        self.buckets = [0] * len(BUCKETS)  # rounds at most BUCKETS[i] seconds (cumulative)
        self.count = 0
        self.total_s = 0.0
        self._lock = threading.Lock()

    def add(self, step_s: float, engine_s: float) -> None:
        with self._lock:
            self.recent.append((step_s, engine_s))
            self.count += 1
            self.total_s += step_s
            for i, b in enumerate(BUCKETS):
                if step_s <= b:
                    self.buckets[i] += 1

    def summary(self) -> dict[str, Any]:
        """Count since start; p50, p99 and max of the recent window, of the step and of its engine part."""
        with self._lock:
            steps = sorted(s for s, _ in self.recent)
            engine = sorted(e for _, e in self.recent)
            count = self.count
        part = lambda xs: {"p50": _quantile(xs, 0.5), "p99": _quantile(xs, 0.99),  # noqa: E731
                           "max": xs[-1] if xs else 0.0}
        return {"count": count, "window": len(steps), "step": part(steps), "engine": part(engine)}

    def prometheus(self) -> list[str]:
        with self._lock:
            buckets, count, total = list(self.buckets), self.count, self.total_s
        name = "elastisched_round_seconds"
        out = [f"# HELP {name} Wall time of the engine loop's steps that ran a round.", f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{le="{b:g}"}} {n}' for b, n in zip(BUCKETS, buckets, strict=True)]
        return [*out, f'{name}_bucket{{le="+Inf"}} {count}', f"{name}_sum {total:.6f}", f"{name}_count {count}"]
