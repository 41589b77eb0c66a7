"""Pollux (OSDI'21) wing: the policy, its goodput fit and its genetic search (docs/pollux.md).

The package imports nothing: `policies.BUILTIN` names the module that registers each policy."""
