"""JABAS (EuroSys'25) wing: the policy, its auto-scaling search and the gradient-similarity batch rule
(docs/jabas.md). The IIDP rate rule it shares with the simulator lives in `models/iidp/`.

The package imports nothing: `policies.BUILTIN` names the module that registers each policy."""
