"""Scheduling policies, one file each, registered by name (see `base.register`).

The package imports no policy module itself: `BUILTIN` names the module of each built-in policy, so that
`make_policy("fifo")` imports `fifo.py` alone (a `sim run` then loads one policy, not every optimiser and its
dependencies) and a name check costs no import. `base.registered()` still imports every module of the
package, so a policy missing from this table only costs speed, never its availability
(tests/policies/test_policy_registry.py checks the table against what the modules register).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from elastisched.policies.base import Policy, PolicyContext, make_policy, register, registered

#: policy name -> module under `elastisched.policies` that registers it
BUILTIN: dict[str, str] = {
    "fifo": "fifo",
    "gavel": "gavel",
    "jabas": "jabas",
    "jabas_scaled": "jabas_scaled",
    "lyra": "lyra",
    "lyra_scaled": "lyra_scaled",
    "ones": "ones",
    "optimus": "optimus",
    "optimus-online": "optimus_online",
    "pollux": "pollux",
    "sia": "sia",
    "srtf": "srtf",
    "tiresias": "tiresias",
}

__all__ = ["BUILTIN", "Policy", "PolicyContext", "fifo", "gavel", "jabas", "jabas_scaled", "lyra", "lyra_scaled",
           "make_policy", "ones", "optimus", "optimus_online", "pollux", "register", "registered", "sia", "srtf",
           "tiresias"]


def __getattr__(name: str) -> ModuleType:
    """`elastisched.policies.fifo` and `from elastisched.policies import *` import the module on first use."""
    if name in BUILTIN.values():
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
