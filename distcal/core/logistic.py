"""Weighted logistic regression on a few features of a score, by Newton passes.

Platt's sigmoid (:mod:`distcal.core.sigmoid`) and beta calibration
(:mod:`distcal.core.beta`) both minimise

    L(theta) = sum_s  W(s) softplus(z_s) - Y(s) z_s,   z_s = theta . (x(s), 1),

over a distinct-score table: W(s) a distinct score's weight, Y(s) its
target mass (its positives, or Platt's smoothed targets times W) and x(s)
one or two features of s. L, its gradient sum (W expit(z) - Y) (x, 1) and
its Hessian sum W expit(z) (1 - expit(z)) (x, 1)(x, 1)^T are sums over the
score ranges, so each Newton iterate is one pass over the ranges plus a
small solve on the driver, and the fit is exact on any engine. Per row they
are computed as (W - Y) softplus(z) + Y softplus(-z), (W - Y) p - Y q and
W p q (p = expit(z), q = expit(-z)): with 0 <= Y <= W no term cancels
another, so L stays accurate where scores that separate the classes drive
|z| up, and backtracking compares true losses there, not rounding noise.
A pass sums many keys' problems at once (:class:`Terms`, :class:`_SumsBatch`).

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
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import sums_overflow
from .distinct import DistinctTable

__all__ = ["Terms", "newton_plan"]


@dataclass(frozen=True)
class Terms:
    """One problem's features and target masses, as numbers (many keys' passes run at once).

    Feature j of a distinct score s is ``(f_j(s) * s_scale - shift_j) /
    spread_j`` (``f_j`` a module-level function of the scores, so that the
    terms travel to the workers); its target mass is ``pos_mass P(s) +
    neg_mass (W(s) - P(s))``, P(s) its positives. Weights and target masses
    are multiplied by ``w_scale`` (a power of two: exact; the minimiser does
    not change).
    """

    features: tuple[Callable[[np.ndarray], np.ndarray], ...]
    shift: tuple[float, ...]
    spread: tuple[float, ...]
    s_scale: float = 1.0
    pos_mass: float = 1.0
    neg_mass: float = 0.0
    w_scale: float = 1.0


def _per_row(values: np.ndarray, sizes: np.ndarray) -> float | np.ndarray:
    """One number per problem as one per row (a scalar when all problems share it)."""
    if values.shape[0] and np.all(values == values[0]):
        return float(values[0])
    return np.repeat(values, sizes)


class _Sums:
    """L, its gradient and its Hessian at ``theta`` over one range's table (one pass).

    Requests with the same feature functions (``batch_id``) travel and run
    together (:meth:`pack`: a :class:`_SumsBatch`), so thousands of keys
    cost one vectorised pass over a range, not one Python call each.
    """

    def __init__(self, theta: np.ndarray, terms: Terms):
        self.theta, self.terms = theta, terms
        self.batch_id = terms.features

    def __call__(self, t: DistinctTable) -> np.ndarray:
        out: np.ndarray = _Sums.pack([self]).run(np.zeros(1, np.intp), [t])[0]
        return out

    @staticmethod
    def pack(requests: list[_Sums]) -> _SumsBatch:
        """Requests of one ``batch_id`` as arrays, one row per request."""
        terms = [r.terms for r in requests]
        numbers = np.array([[x.w_scale, x.pos_mass, x.neg_mass, x.s_scale, *x.shift,
                             *x.spread] for x in terms], dtype=np.float64)
        theta = np.array([r.theta for r in requests], dtype=np.float64)
        return _SumsBatch(terms[0].features, theta, numbers)


class _SumsBatch:
    """Many problems' :class:`_Sums` requests as arrays (what one pass ships for them)."""

    def __init__(self, features: tuple[Callable[[np.ndarray], np.ndarray], ...],
                 theta: np.ndarray, numbers: np.ndarray):
        self.features, self.theta, self.numbers = features, theta, numbers

    def run(self, which: np.ndarray, tables: list[DistinctTable]) -> np.ndarray:
        """Row k: the sums of problem ``which[k]`` over ``tables[k]`` (no table empty):
        one pass of numpy over all their rows, then each problem's sums by
        ``np.add.reduceat`` (which sums pairwise, as ``np.sum`` does)."""
        sizes = np.array([len(t) for t in tables], dtype=np.intp)
        assert sizes.all(), "every problem of a range has rows in it"

        def cat(field: str) -> np.ndarray:
            arrays = [getattr(t, field) for t in tables]
            return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)

        numbers, theta = self.numbers[which], self.theta[which]

        def rows(values: np.ndarray) -> float | np.ndarray:
            return _per_row(values, sizes)

        m = len(self.features)
        score, weight, positives = cat("score"), cat("weight"), cat("positives")
        w_scale = rows(numbers[:, 0])
        w = weight * w_scale
        y = (positives * rows(numbers[:, 1]) + (weight - positives) * rows(numbers[:, 2])
             ) * w_scale
        s_scale = rows(numbers[:, 3])
        cols = [(f(score) * s_scale - rows(numbers[:, 4 + j])) / rows(numbers[:, 4 + m + j])
                for j, f in enumerate(self.features)]
        z = rows(theta[:, 0]) * cols[0]
        for j in range(1, m):
            z = z + rows(theta[:, j]) * cols[j]
        z = rows(theta[:, -1]) + z
        # p = expit(z), q = 1 - p = expit(-z) and softplus(+-z) from e = exp(-|z|) (two
        # transcendental functions a row). With 0 <= y <= w every term below is a sum
        # of terms of one sign: no cancellation, however far z is from 0 (scores that
        # separate the classes drive it there).
        e = np.exp(-np.abs(z))
        log1p_e = np.log1p(e)
        pos = z >= 0.0
        p, q = np.where(pos, 1.0, e) / (1.0 + e), np.where(pos, e, 1.0) / (1.0 + e)
        r = (w - y) * p - y * q
        h = w * p * q
        xs = [*cols, None]  # None: the intercept's feature, 1
        m = len(xs)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))

        def sums(v: np.ndarray) -> np.ndarray:
            return np.add.reduceat(v, offsets)

        out = np.empty((len(tables), 1 + m + m * m))
        out[:, 0] = sums((w - y) * (np.maximum(z, 0.0) + log1p_e)
                         + y * (np.maximum(-z, 0.0) + log1p_e))
        for i, xi in enumerate(xs):
            out[:, 1 + i] = sums(r if xi is None else r * xi)
        hess = out[:, 1 + m:].reshape(-1, m, m)
        for i, xi in enumerate(xs):
            hx = h if xi is None else h * xi
            for j in range(i, m):
                xj = xs[j]
                hess[:, i, j] = hess[:, j, i] = sums(hx if xj is None else hx * xj)
        return out


def newton_plan(terms: Terms, start: list[float], *, max_iter: int = 100,
                name: str = "logistic regression") -> Generator[Any, list[Any], np.ndarray]:
    """The minimiser theta of L (module docstring) from ``start``, by Newton passes.

    A plan (:mod:`distcal.core.plans`): one pass per iterate. ``theta``'s
    last element is the intercept. After ``max_iter`` passes without
    convergence (scores that separate the classes have no finite optimum)
    it warns, naming ``name``, and returns the last iterate.
    """
    m = len(start)

    def at(theta: np.ndarray) -> Generator[Any, list[Any], tuple[float, np.ndarray, np.ndarray]]:
        sums: np.ndarray = np.sum((yield _Sums(theta, terms)), axis=0)
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
