"""Scheduling policies, one file each, registered by name (see `base.register`)."""

from elastisched.policies import (
    fifo,
    gavel,
    jabas,
    jabas_scaled,
    lyra,
    lyra_scaled,
    ones,
    optimus,
    optimus_online,
    pollux,
    sia,
    srtf,
    tiresias,
)
from elastisched.policies.base import Policy, PolicyContext, make_policy, register, registered

__all__ = ["Policy", "PolicyContext", "fifo", "gavel", "jabas", "jabas_scaled", "lyra", "lyra_scaled",
           "make_policy", "ones", "optimus", "optimus_online", "pollux", "register", "registered", "sia", "srtf",
           "tiresias"]
