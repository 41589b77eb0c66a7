"""Plot helpers: the binned utilisation is the exact time-weighted mean of the step function."""

from __future__ import annotations

import numpy as np
import pytest


def test_binned_mean_of_a_step_function() -> None:
    from elastisched.report.plots import binned_mean

    t = np.array([0.0, 10.0, 30.0])
    v = np.array([1.0, 0.0, 0.5])  # 1 on [0,10), 0 on [10,30), 0.5 on [30,40]
    x, y = binned_mean(t, v, 40.0, 4)
    np.testing.assert_allclose(x, [5, 15, 25, 35])
    np.testing.assert_allclose(y, [1.0, 0.0, 0.0, 0.5])
    _, y2 = binned_mean(t, v, 40.0, 1)
    assert y2[0] == pytest.approx((10 * 1 + 20 * 0 + 10 * 0.5) / 40)
