"""Lyra (EuroSys'23) wing: the policy, its multiple-choice knapsack, loan-aware placement and the
minimal-preemption choice of servers to return on a reclaim (docs/lyra.md).

The package imports nothing: `policies.BUILTIN` names the module that registers each policy."""
