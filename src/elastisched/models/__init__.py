"""Performance models built from measured profiles: throughput, statistical efficiency, restart cost."""

from elastisched.models.application import Application, BatchConfig
from elastisched.models.registry import PerfModels

__all__ = ["Application", "BatchConfig", "PerfModels"]
