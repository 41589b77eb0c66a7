"""Scheduling policies, one file each, registered by name (see `base.register`)."""

from elastisched.policies import fifo, jabas, lyra, ones, optimus, pollux, srtf, tiresias
from elastisched.policies.base import Policy, PolicyContext, make_policy, register, registered

__all__ = ["Policy", "PolicyContext", "fifo", "jabas", "lyra", "make_policy", "ones", "optimus", "pollux", "register",
           "registered", "srtf", "tiresias"]
