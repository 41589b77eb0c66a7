"""Shapes of packed placements, used by policies that predict step times before placing."""

from __future__ import annotations


def packed_shape(num_gpus: int, per_node: int) -> tuple[int, ...]:
    """GPUs per node when `num_gpus` are packed onto nodes of `per_node` GPUs (fullest first)."""
    full, rest = divmod(num_gpus, per_node)
    return (per_node,) * full + ((rest,) if rest else ())
