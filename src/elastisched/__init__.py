"""elastisched: elastic scheduling of deep-learning training on shared GPU clusters."""

__version__ = "0.1.0"
