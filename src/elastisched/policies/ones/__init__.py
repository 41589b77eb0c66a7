"""ONES (SC'21) wing: the policy, its presets, the evolutionary operators and the online throughput and
progress predictors only ONES believes (docs/ones.md).

The package imports nothing: `policies.BUILTIN` names the module that registers each policy."""
