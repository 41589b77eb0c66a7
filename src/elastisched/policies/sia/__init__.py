"""Sia (SOSP'23) wing: the policy (a MILP over GPU types) and its per-type goodput estimates.

The package imports nothing: `policies.BUILTIN` names the module that registers each policy."""
