"""An example elastisched policy package: `ljf` (largest job first) and, for `elastisched policies check`'s
sake, a deliberately broken policy (`broken.OverCommit`) that is not registered."""
