"""`lyra_scaled`: Lyra with every job elastic, the configuration of the Pollux benchmark (docs/seeds.md).

The Pollux workloads mark no job elastic (min = max = request), so the paper's reading (`lyra`'s defaults)
never runs its knapsack there, while Pollux itself scales every job. This preset reads each job as elastic
from 1 GPU to its profile cap (`scale_all="cap"`) with the request's local batch kept per worker
(`batch="worker"`); both readings are written down in `policies/lyra/policy.py`. `lyra` keeps the paper's defaults.
"""

from __future__ import annotations

from typing import Any

from elastisched.policies.base import register
from elastisched.policies.lyra.policy import LyraPolicy


@register
class LyraScaledPolicy(LyraPolicy):
    name = "lyra_scaled"
    description = "Lyra with every job elastic from 1 GPU to its profile cap, local batch kept per worker."

    def __init__(self, scale_all: str = "cap", batch: str = "worker", **options: Any) -> None:
        super().__init__(scale_all=scale_all, batch=batch, **options)
