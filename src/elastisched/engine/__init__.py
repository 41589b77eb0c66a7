"""The shared scheduling loop: snapshot → policy → placer → invariant check → diff → actions."""

from elastisched.engine.loop import Engine, RoundResult, diff
from elastisched.engine.placer import place

__all__ = ["Engine", "RoundResult", "diff", "place"]
