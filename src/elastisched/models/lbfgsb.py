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
later (the signature read here) and only once it has taken `minimize`'s steps on a small problem; anywhere
else the fit goes through `minimize`, as before.
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
    """scipy's compiled L-BFGS-B step where it has the signature of scipy ≥ 1.15 and, on a small bounded
    problem, takes `minimize`'s very steps (a scipy that changed it falls back to `minimize`, not to an error);
    None elsewhere. Looked up on the first fit, not on import: `sim run` imports every policy module, few fit."""
    try:
        import scipy
        import scipy.optimize
        from scipy.optimize import _lbfgsb
    except ImportError:
        return None
    major, minor = (int(p) for p in scipy.__version__.split(".")[:2])
    step = getattr(_lbfgsb, "setulb", None) if (major, minor) >= (1, 15) else None
    if step is None:
        return None
    x0, lower, upper = [-1.2, 1.0] * 3, [-2.0] * 6, [2.0, 2.0, np.inf, 0.8, 2.0, np.inf]
    args = (np.ones(6),)
    try:
        ours = _drive(step, _probe, x0, np.array(lower), np.array(upper), args, FTOL, GTOL)
    except Exception:  # any failure of a private routine means: do not use it
        return None
    want = scipy.optimize.minimize(_probe, np.array(x0), args=args, jac=True, method="L-BFGS-B",
                                   bounds=list(zip(lower, upper, strict=True))).x
    return step if np.array_equal(ours, want) else None


def _probe(x: np.ndarray, c: np.ndarray) -> tuple[float, np.ndarray]:
    """A bounded test problem for `compiled_step` that takes some 40 iterations, so every correction kept
    counts: Rosenbrock's function towards `c`, and its gradient."""
    f = float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (c[:-1] - x[:-1]) ** 2))
    g = np.zeros_like(x)
    g[:-1] += -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (c[:-1] - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return f, g


def _bound_codes(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`setulb`'s bounds: (lower, upper, kind per variable: 0 none, 1 lower, 2 both, 3 upper)."""
    has_lo, has_hi = ~np.isinf(lower), ~np.isinf(upper)
    kind = np.where(has_lo, np.where(has_hi, 2, 1), np.where(has_hi, 3, 0)).astype(np.int32)
    return np.where(has_lo, lower, 0.0), np.where(has_hi, upper, 0.0), kind


def minimize_bounded(fun: Objective, x0: Sequence[float], lower: Sequence[float], upper: Sequence[float],
                     args: tuple[Any, ...], tol: float | None = None) -> np.ndarray:
    """The minimiser `scipy.optimize.minimize(fun, x0, args, jac=True, method="L-BFGS-B", bounds=..., tol=tol)`
    returns (`fun` gives the value and gradient; an infinite bound is none)."""
    lo, hi = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    step = compiled_step()
    if step is None:
        import scipy.optimize

        return scipy.optimize.minimize(fun, np.asarray(x0, dtype=float), args=args, jac=True, method="L-BFGS-B",
                                       bounds=list(zip(lower, upper, strict=True)), tol=tol).x
    return _drive(step, fun, x0, lo, hi, args, FTOL if tol is None else tol, GTOL if tol is None else tol)


def _drive(step: Callable[..., None], fun: Objective, x0: Sequence[float], lo: np.ndarray, hi: np.ndarray,
           args: tuple[Any, ...], ftol: float, gtol: float) -> np.ndarray:
    """The reverse-communication loop around the compiled `step` (module docstring)."""
    n, m = len(lo), CORRECTIONS
    low, high, kind = _bound_codes(lo, hi)
    x = np.array(np.clip(np.asarray(x0, dtype=np.float64), lo, hi), dtype=np.float64)
    at = x.tolist()  # the point last evaluated (as floats: compared as `array_equal` compares, NaN unequal to
    value, grad = fun(x.copy(), *args)  # itself), its value and gradient
    evaluations, iterations = 1, 0
    f: Any = np.array(0.0)
    g = np.zeros(n)
    work, iwork = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m), np.zeros(3 * n, dtype=np.int32)
    task, ln_task = np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32)
    lsave, isave, dsave = np.zeros(4, dtype=np.int32), np.zeros(44, dtype=np.int32), np.zeros(29)
    factr = ftol / np.finfo(float).eps
    while True:  # (`g`: what `step` is handed, a float64 copy of the last gradient, never the objective's own)
        step(m, x, low, high, kind, f, g, factr, gtol, work, iwork, task, lsave, isave, dsave, LINE_SEARCH_STEPS,
             ln_task)
        if task[0] == _ASK_FG:
            point = x.tolist()
            if point != at:
                at = point
                value, grad = fun(x.copy(), *args)
                evaluations += 1
            f, g = value, np.array(grad, dtype=np.float64)
        elif task[0] == _NEW_ITERATION:
            iterations += 1
            if iterations >= MAX_STEPS:
                task[:] = (_STOP, _STOP_MAXITER)
            elif evaluations > MAX_STEPS:
                task[:] = (_STOP, _STOP_MAXFUN)
        else:
            return x
