"""loaning."""
