"""`jabas_scaled`: JABAS with jobs allowed past their request (to the application's profile cap) and past the
even share (up to twice it).

The Pollux workloads mark no job elastic, and JABAS's auto-scaling then stops at the request; Pollux itself
grows jobs past it. This preset sets `scale_to="cap"` and `share_factor=2` (readings written down in
`policies/jabas/policy.py`); `jabas` keeps the request as the cap and the even share. Figures: docs/seeds.md.
"""

from __future__ import annotations

from typing import Any

from elastisched.policies.base import register
from elastisched.policies.jabas.policy import JabasPolicy


@register
class JabasScaledPolicy(JabasPolicy):
    name = "jabas_scaled"
    description = "JABAS with auto-scaling up to the profile cap and twice the even share of the cluster."

    def __init__(self, scale_to: str = "cap", share_factor: float = 2.0, **options: Any) -> None:
        super().__init__(scale_to=scale_to, share_factor=share_factor, **options)
