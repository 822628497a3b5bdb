"""Weighted logistic regression on a few features of a score, by Newton passes.

Platt's sigmoid (:mod:`distcal.core.sigmoid`) and beta calibration
(:mod:`distcal.core.beta`) both minimise

    L(theta) = sum_s  W(s) softplus(z_s) - Y(s) z_s,   z_s = theta . (x(s), 1),

over a distinct-score table: W(s) a distinct score's weight, Y(s) its
target mass (its positives, or Platt's smoothed targets times W) and x(s)
one or two features of s. L, its gradient sum (W expit(z) - Y) (x, 1) and
its Hessian sum W expit(z) (1 - expit(z)) (x, 1)(x, 1)^T are sums over the
score ranges, so each Newton iterate is one pass over the ranges plus a
small solve on the driver, and the fit is exact on any engine.

L is convex. Each pass gives L with the derivatives, so a step is checked
by the pass that computes the next: a step that does not lower L is halved
(backtracking), except in the quadratic region (a step below 1e-4
relative), where L cannot tell steps apart from rounding any more. The fit
stops after a Newton step below 1e-10 relative (the error left is its
square): a rule on the step, not on the loss, so that every engine,
whatever the order of its sums, stops at the same point to rounding. A
singular Hessian (the optimum is then a line or a plane of parameters,
all giving the same predictions at the fitted scores) takes the
least-squares (minimum-norm) step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
from scipy.special import expit

from ..errors import sums_overflow
from .distinct import DistinctTable

__all__ = ["newton_plan"]

#: Features of a range's distinct scores, and their target masses Y.
Features = Callable[[DistinctTable], list[np.ndarray]]
Targets = Callable[[DistinctTable], np.ndarray]


class _Sums:
    """L, its gradient and its Hessian at ``theta`` over one range's table (one pass).

    Weights and target masses are multiplied by ``w_scale`` (a power of
    two: exact; the minimiser does not change).
    """

    def __init__(self, theta: np.ndarray, features: Features, targets: Targets,
                 w_scale: float):
        self.theta, self.features, self.targets = theta, features, targets
        self.w_scale = w_scale

    def __call__(self, t: DistinctTable) -> np.ndarray:
        cols = self.features(t)
        z = self.theta[-1] + sum(c * x for c, x in zip(self.theta[:-1].tolist(), cols))
        w, y = t.weight * self.w_scale, self.targets(t) * self.w_scale
        p = expit(z)
        r = w * p - y
        h = w * p * (1.0 - p)
        hx = [h * x for x in cols]
        m = len(cols) + 1
        out = np.empty(1 + m + m * m)
        out[0] = np.dot(w, np.logaddexp(0.0, z)) - np.dot(y, z)
        out[1:1 + m] = [*(np.dot(r, x) for x in cols), r.sum()]
        hess = out[1 + m:].reshape(m, m)
        for i in range(m - 1):
            for j in range(i, m - 1):
                hess[i, j] = hess[j, i] = np.dot(hx[i], cols[j])
            hess[i, m - 1] = hess[m - 1, i] = hx[i].sum()
        hess[m - 1, m - 1] = h.sum()
        return out


def newton_plan(features: Features, targets: Targets, start: list[float], *,
                w_scale: float = 1.0, max_iter: int = 100, name: str = "logistic regression"
                ) -> Generator[Any, list[Any], np.ndarray]:
    """The minimiser theta of L (module docstring) from ``start``, by Newton passes.

    A plan (:mod:`distcal.core.plans`): one pass per iterate. ``theta``'s
    last element is the intercept. After ``max_iter`` passes without
    convergence (scores that separate the classes have no finite optimum)
    it warns, naming ``name``, and returns the last iterate.
    """
    m = len(start)

    def at(theta: np.ndarray) -> Generator[Any, list[Any], tuple[float, np.ndarray, np.ndarray]]:
        sums: np.ndarray = np.sum((yield _Sums(theta, features, targets, w_scale)), axis=0)
        if not np.all(np.isfinite(sums)):
            raise sums_overflow()
        return float(sums[0]), sums[1:1 + m], sums[1 + m:].reshape(m, m)

    theta = np.array(start, dtype=np.float64)
    loss, g, h = yield from at(theta)
    for _ in range(max_iter):
        step = -np.linalg.lstsq(h, g, rcond=None)[0]
        size, scale = float(np.abs(step).sum()), 1.0 + float(np.abs(theta).sum())
        if size <= 1e-10 * scale:  # the error left is size^2: the rounding of the sums
            done: np.ndarray = theta + step
            return done
        lam = 1.0
        while True:
            cand = theta + lam * step
            c_loss, c_g, c_h = yield from at(cand)
            if c_loss <= loss or size <= 1e-4 * scale:  # quadratic region: full steps
                break
            lam *= 0.5
            if lam < 1e-12:  # no descent left: optimal to rounding
                return theta
        theta, loss, g, h = cand, c_loss, c_g, c_h
    # A warning, not a log record: the core imports no logging set-up (only
    # the core and the errors), and a caller sees it where the fit ran.
    warnings.warn(f"{name}: no convergence in {max_iter} Newton passes (scores that "
                  "separate the classes have no finite optimum); the last step's "
                  "parameters are used", RuntimeWarning, stacklevel=2)
    return theta
