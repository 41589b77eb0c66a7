"""L-BFGS-B for the step-time fits of Pollux and Sia, driven without `scipy.optimize.minimize`'s per-step
wrappers.

A fit (`policies/pollux/goodput.py` `fit_perf_params`, `policies/sia/goodput.py` `fit_observed`) has seven
parameters and a handful of observations, so each of its ~80 steps costs more in scipy's generic machinery
(the `ScalarFunction` that copies, counts and memoises every point, a result object per iteration) than in
the objective itself. This module talks to the same compiled routine scipy uses, `setulb`, through its
reverse-communication protocol (scipy 1.17 `optimize/_lbfgsb_py.py`, `_minimize_lbfgsb`: call it; when it asks
for the function at x, evaluate; when it reports a new iteration, count it; otherwise stop), with
`minimize(method="L-BFGS-B")`'s defaults: 10 corrections, ftol 2.22e-9 and gtol 1e-5 (both `tol` when
`minimize` is given one), 20 line-search steps, at most 15,000 iterations and evaluations, x0 clipped to the
bounds, the objective evaluated once per distinct point. The iterates are therefore the same, bit for bit
(tests/models/test_lbfgsb.py compares the two on random fits of both objectives).

`setulb`'s signature is scipy's own, not public API: it is used where scipy has the C routine of 1.15 and
later (the signature read here); anywhere else the fit goes through `minimize`, as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Objective = Callable[..., tuple[float, np.ndarray]]

CORRECTIONS, FTOL, GTOL, LINE_SEARCH_STEPS, MAX_STEPS = 10, 2.2204460492503131e-09, 1e-5, 20, 15000
_ASK_FG, _NEW_ITERATION, _STOP, _STOP_MAXITER, _STOP_MAXFUN = 3, 1, 5, 504, 502


@functools.cache
def compiled_step() -> Callable[..., None] | None:
    """scipy's compiled L-BFGS-B step with the signature of scipy ≥ 1.15; None elsewhere. Looked up on the
    first fit, not on import: `sim run` imports every policy module and few runs fit."""
    try:
        import scipy
        from scipy.optimize import _lbfgsb
    except ImportError:
        return None
    major, minor = (int(p) for p in scipy.__version__.split(".")[:2])
    return getattr(_lbfgsb, "setulb", None) if (major, minor) >= (1, 15) else None


def _bound_codes(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`setulb`'s bounds: (lower, upper, kind per variable: 0 none, 1 lower, 2 both, 3 upper)."""
    has_lo, has_hi = ~np.isinf(lower), ~np.isinf(upper)
    kind = np.where(has_lo, np.where(has_hi, 2, 1), np.where(has_hi, 3, 0)).astype(np.int32)
    return np.where(has_lo, lower, 0.0), np.where(has_hi, upper, 0.0), kind


def minimize_bounded(fun: Objective, x0: Sequence[float], lower: Sequence[float], upper: Sequence[float],
                     args: tuple[Any, ...], tol: float | None = None) -> np.ndarray:
    """The minimiser `scipy.optimize.minimize(fun, x0, args, jac=True, method="L-BFGS-B", bounds=..., tol=tol)`
    returns (`fun` gives the value and gradient; an infinite bound is none)."""
    ftol, gtol = (FTOL, GTOL) if tol is None else (tol, tol)
    lo, hi = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    setulb = compiled_step()
    if setulb is None:
        import scipy.optimize

        return scipy.optimize.minimize(fun, np.asarray(x0, dtype=float), args=args, jac=True, method="L-BFGS-B",
                                       bounds=list(zip(lower, upper, strict=True)), tol=tol).x
    n, m = len(lo), CORRECTIONS
    low, high, kind = _bound_codes(lo, hi)
    x = np.array(np.clip(np.asarray(x0, dtype=np.float64), lo, hi), dtype=np.float64)
    at = x.copy()  # the point last evaluated, and its value and gradient
    value, grad = fun(x.copy(), *args)
    evaluations, iterations = 1, 0
    f: Any = np.array(0.0)
    g = np.zeros(n)
    work, iwork = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m), np.zeros(3 * n, dtype=np.int32)
    task, ln_task = np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32)
    lsave, isave, dsave = np.zeros(4, dtype=np.int32), np.zeros(44, dtype=np.int32), np.zeros(29)
    factr = ftol / np.finfo(float).eps
    while True:
        g = g.astype(np.float64)
        setulb(m, x, low, high, kind, f, g, factr, gtol, work, iwork, task, lsave, isave, dsave,
               LINE_SEARCH_STEPS, ln_task)
        if task[0] == _ASK_FG:
            if not np.array_equal(x, at):
                at = x.copy()
                value, grad = fun(x.copy(), *args)
                evaluations += 1
            f, g = value, grad
        elif task[0] == _NEW_ITERATION:
            iterations += 1
            if iterations >= MAX_STEPS:
                task[:] = (_STOP, _STOP_MAXITER)
            elif evaluations > MAX_STEPS:
                task[:] = (_STOP, _STOP_MAXFUN)
        else:
            return x
