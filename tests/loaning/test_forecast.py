"""The inference-side forecast the elastisched policy reclaims ahead with (loaning/forecast.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from elastisched.loaning.forecast import DAY, SeasonalForecast


def _diurnal(t: float) -> float:
    """Loaned servers: 10 at night, 2 in the afternoon (a smooth daily cycle)."""
    return round(6 + 4 * math.cos(2 * math.pi * (t % DAY) / DAY))


def test_persistence_before_a_day_then_the_same_hour_of_earlier_days() -> None:
    f = SeasonalForecast()
    assert f.predict(0.0) is None and f.lowest(0.0, 3600) is None
    f.observe(0.0, 10)
    assert f.predict(12 * 3600) == 10  # no history at that hour yet: the last value
    rng = np.random.default_rng(0)
    for t in np.arange(0.0, 3 * DAY, 300.0):
        f.observe(float(t), _diurnal(t) + (5 if rng.random() < 0.02 else 0))  # rare outliers
    errors = [abs(f.predict(3 * DAY + h) - _diurnal(h)) for h in np.arange(0, DAY, 900.0)]  # type: ignore[operator]
    assert max(errors) <= 1 and np.mean(errors) < 0.3


def test_lowest_sees_the_afternoon_dip_coming() -> None:
    f = SeasonalForecast()
    for t in np.arange(0.0, 2 * DAY, 600.0):
        f.observe(float(t), _diurnal(t))
    morning = 2 * DAY + 8 * 3600  # cos is falling: fewer loans ahead
    assert f.last is not None
    low = f.lowest(morning, 4 * 3600)
    assert low is not None and low < _diurnal(morning) - 1
    assert f.lowest(morning, 0) == f.last  # nothing ahead but now


def test_memory_is_bounded_and_old_days_roll_out() -> None:
    f = SeasonalForecast(days=2)
    for day, value in enumerate((1, 5, 9)):
        f.observe(day * DAY + 100, value)
    assert f.values.shape == (2, 96)
    assert f.predict(3 * DAY + 100) == 7  # median of the last two days (5, 9); day 0's 1 rolled out


def test_state_round_trip_and_bad_arguments() -> None:
    f = SeasonalForecast()
    for t in np.arange(0.0, DAY + 7200, 900.0):
        f.observe(float(t), _diurnal(t))
    g = SeasonalForecast()
    g.load_state_dict(json.loads(json.dumps(f.state_dict())))
    assert all(g.predict(DAY + h) == f.predict(DAY + h) for h in range(0, 86400, 3600))
    assert g.lowest(DAY + 7200, 7200) == f.lowest(DAY + 7200, 7200)
    with pytest.raises(ValueError, match="before the last"):
        f.observe(0.0, 1)
    with pytest.raises(ValueError, match="multiple"):
        SeasonalForecast(bin_s=7)
