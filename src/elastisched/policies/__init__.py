"""Scheduling policies, registered by name (see `base.register`): one file per simple policy, one wing (a
sub-package: `ones/`, `lyra/`, `jabas/`, `pollux/`, `sia/`) per system of several files.

The package imports no policy module itself: `BUILTIN` names the module of each built-in policy, so that
`make_policy("fifo")` imports `fifo.py` alone and no wing (a `sim run` then loads one policy, not every
optimiser and its dependencies) and a name check costs no import. `base.registered()` still imports every module of the
package and its wings, so a policy missing from this table only costs speed, never its availability
(tests/policies/test_policy_registry.py checks the table against what the modules register).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from elastisched.policies.base import Policy, PolicyContext, make_policy, register, registered

#: policy name -> module under `elastisched.policies` that registers it
BUILTIN: dict[str, str] = {
    "elastisched": "elastisched.policy",
    "fifo": "fifo",
    "gavel": "gavel",
    "jabas": "jabas.policy",
    "jabas_scaled": "jabas.scaled",
    "lyra": "lyra.policy",
    "lyra_scaled": "lyra.scaled",
    "ones": "ones.policy",
    "optimus": "optimus",
    "optimus-online": "optimus_online",
    "pollux": "pollux.policy",
    "sia": "sia.policy",
    "srtf": "srtf",
    "tiresias": "tiresias",
}

__all__ = ["BUILTIN", "Policy", "PolicyContext", "elastisched", "fifo", "gavel", "jabas", "jabas_scaled", "lyra",
           "lyra_scaled", "make_policy", "ones", "optimus", "optimus_online", "pollux", "register", "registered", "sia",
           "srtf", "tiresias"]


def __getattr__(name: str) -> ModuleType:
    """`elastisched.policies.fifo` and `from elastisched.policies import *` import the module on first use."""
    if name in {module.partition(".")[0] for module in BUILTIN.values()}:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
