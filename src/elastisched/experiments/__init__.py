"""Reproduced studies, one module each (DESIGN.md `experiments/`): the only place that knows a paper's set-up.

Each module defines an `Experiment` subclass decorated with `@register_experiment`; the CLI's `reproduce`
group lists them from `experiments.base.registered_experiments()` (no special cases).
"""
