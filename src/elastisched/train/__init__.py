"""elastisched.train: the library a training script imports to become elastic.

    import elastisched.train as et
    ctx = et.init()
    loader = et.ElasticDataLoader(dataset, batch_size=64)
    model = et.ElasticDataParallel(net, optimizer, scheduler, scaling_rule="sqrt")
    for epoch in ctx.remaining_epochs_until(10):
        for x, y in loader:
            loss_fn(model(x), y).backward()
            optimizer.step()

Exports are resolved lazily so that `elastisched.train.contract` (used by backends) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LaunchEnv": "contract",
    "ContractError": "contract",
    "init": "runtime",
    "current_context": "runtime",
    "ElasticContext": "runtime",
    "ElasticDataLoader": "data",
    "ElasticDataParallel": "parallel",
    "SimilarityRule": "adaptive",
    "GoodputRule": "adaptive",
    "SqrtScale": "adaptive",
    "LinearScale": "adaptive",
    "AdaScale": "adaptive",
    "NoScale": "adaptive",
    "GradStats": "adaptive",
    "NoiseEstimate": "adaptive",
    "launch": "launcher",
    "start_workers": "launcher",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'elastisched.train' has no attribute {name!r}")
    return getattr(importlib.import_module(f"elastisched.train.{mod}"), name)


def remaining_epochs_until(epochs: int) -> Any:
    """Epochs still to run for this job (resumes from the checkpointed epoch)."""
    from elastisched.train.runtime import current_context

    return current_context().remaining_epochs_until(epochs)
