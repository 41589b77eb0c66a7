"""Scheduling policies, one file each, registered by name (see `base.register`)."""

from elastisched.policies import fifo, gavel, jabas, lyra, ones, optimus, optimus_online, pollux, sia, srtf, tiresias
from elastisched.policies.base import Policy, PolicyContext, make_policy, register, registered

__all__ = ["Policy", "PolicyContext", "fifo", "gavel", "jabas", "lyra", "make_policy", "ones", "optimus",
           "optimus_online", "pollux", "register", "registered", "sia", "srtf", "tiresias"]
