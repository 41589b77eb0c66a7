"""Tiresias (NSDI'19) wing: the policy (two queues by attained GPU-time) and its queues in blocks, which keep a
round O(changes) where the body reports them.

The package imports nothing: `policies.BUILTIN` names the module that registers each policy."""
