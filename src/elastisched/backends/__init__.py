"""Backends execute the engine's actions on real workers: `local` (subprocesses on this machine).

See `base.Backend` for the protocol; Ray and Kubernetes backends plug in the same way.
"""
