"""`jabas_scaled`: JABAS with every job allowed past its request to the application's profile cap.

The Pollux workloads mark no job elastic, and JABAS's auto-scaling then stops at the request; Pollux itself
grows jobs past it. This preset sets `scale_to="cap"` (reading written down in `policies/jabas.py`); `jabas`
keeps the request as the cap. Figures: docs/seeds.md.
"""

from __future__ import annotations

from typing import Any

from elastisched.policies.base import register
from elastisched.policies.jabas import JabasPolicy


@register
class JabasScaledPolicy(JabasPolicy):
    name = "jabas_scaled"
    description = "JABAS with auto-scaling up to the application's profile cap, not only the job's request."

    def __init__(self, scale_to: str = "cap", **options: Any) -> None:
        super().__init__(scale_to=scale_to, **options)
