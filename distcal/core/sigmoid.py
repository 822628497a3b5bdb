"""Platt scaling (sigmoid calibration) from a distinct-score table.

Model: p(s) = 1 / (1 + exp(a s + b))  (Platt, 1999). Fitted by maximum
likelihood on Platt's smoothed targets: with N+ = sum w y and
N- = sum w (1 - y), positives get the target t+ = (N+ + 1) / (N+ + 2) and
negatives t- = 1 / (N- + 2) (Platt, section 2.2), as scikit-learn's sigmoid
calibration does. The negative log-likelihood

    L(a, b) = sum_s  W+(s) l(t+, z_s) + W-(s) l(t-, z_s),   z_s = a s + b,
    l(t, z) = t softplus(z) + (1 - t) softplus(-z)

only depends on each distinct score's positive and negative weights, so it
is a function of the :class:`~distcal.core.distinct.DistinctTable` and the
fit is exact on any engine: a logistic regression on the standardised
score, fitted by Newton passes over the score ranges to full double
precision (:mod:`distcal.core.logistic`; scikit-learn stops L-BFGS at a
gradient of 1e-6).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from ..errors import DataError, sums_overflow
from .distinct import DistinctTable
from .logistic import Terms, newton_plan, power_of_two_scale
from .plans import KeySums, run_plan
from .ranges import MapRanges, as_map_ranges

__all__ = ["fit_sigmoid", "sigmoid_plan", "sigmoid_predict"]


def fit_sigmoid(data: DistinctTable | MapRanges, max_iter: int = 100) -> tuple[float, float]:
    """Return Platt's (a, b) for the rows summarised in ``data``.

    ``data`` is one distinct-score table, or a map over score ranges
    (:data:`~distcal.core.ranges.MapRanges`): every quantity Newton's method
    needs is a sum over ranges, so a table larger than memory (or spread
    over a cluster) is read range by range (:func:`sigmoid_plan`).
    """
    return run_plan(sigmoid_plan(max_iter), as_map_ranges(data))


def _sum(request: KeySums) -> Generator[Any, list[Any], np.ndarray]:
    """One pass: ``request``'s sums over every range, added up (its ``maxima`` columns:
    their largest; two ranges' bounds of 1e308 added were inf)."""
    parts = yield request
    if not parts:
        raise ValueError("fit_sigmoid needs at least one row")
    total: np.ndarray = np.sum(parts, axis=0)
    for j in request.maxima:
        total[j] = np.max([p[j] for p in parts])
    return total


class _Totals(KeySums):
    """Weight, positives, weight x score, distinct scores, non-finite scores and the
    largest finite |score| (the largest over the ranges), of scores and weights
    scaled by ``s_scale`` and ``w_scale`` (powers of two: exact)."""

    maxima = (5,)

    def __init__(self, s_scale: float = 1.0, w_scale: float = 1.0):
        self.s_scale, self.w_scale = s_scale, w_scale

    def numbers(self) -> tuple[float, ...]:
        return self.s_scale, self.w_scale

    def columns(self, t: DistinctTable, number: Callable[[int], float | np.ndarray]
                ) -> list[np.ndarray]:
        s, w = t.score * number(0), t.weight * number(1)
        finite = np.isfinite(s)
        with np.errstate(over="ignore", invalid="ignore"):
            return [w, t.positives * number(1), w * s, np.ones(len(s)),
                    (~finite).astype(np.float64), np.where(finite, np.abs(s), 0.0)]


class _Spread(KeySums):
    """Sum of w (s - mu)^2, of scores and weights scaled as in :class:`_Totals`."""

    def __init__(self, mu: float, s_scale: float, w_scale: float):
        self.mu, self.s_scale, self.w_scale = mu, s_scale, w_scale

    def numbers(self) -> tuple[float, ...]:
        return self.mu, self.s_scale, self.w_scale

    def columns(self, t: DistinctTable, number: Callable[[int], float | np.ndarray]
                ) -> list[np.ndarray]:
        with np.errstate(over="ignore", invalid="ignore"):
            return [t.weight * number(2) * (t.score * number(1) - number(0)) ** 2]


class _Targets(KeySums):
    """Platt's target mass of q = 1 - p = sigmoid(z) (weights scaled by ``w_scale``)."""

    def __init__(self, hi: float, lo: float, w_scale: float):
        self.hi, self.lo, self.w_scale = hi, lo, w_scale

    def numbers(self) -> tuple[float, ...]:
        return self.hi, self.lo, self.w_scale

    def columns(self, t: DistinctTable, number: Callable[[int], float | np.ndarray]
                ) -> list[np.ndarray]:
        w, pos = t.weight * number(2), t.positives * number(2)  # scaled first, as in Terms
        return [pos * (1.0 - number(0)) + (w - pos) * (1.0 - number(1))]


def sigmoid_plan(max_iter: int = 100) -> Generator[Any, list[Any], tuple[float, float]]:
    """Platt's (a, b) as a plan (:mod:`distcal.core.plans`): a few passes of sums."""
    sums = yield from _sum(_Totals())
    if sums[3] == 0:
        raise ValueError("fit_sigmoid needs at least one row")
    if sums[4]:
        raise ValueError("fit_sigmoid needs finite scores")
    wsum, n_pos = float(sums[0]), float(sums[1])
    if not (math.isfinite(wsum) and math.isfinite(n_pos)):
        raise sums_overflow()
    n_neg = wsum - n_pos
    hi = (n_pos + 1.0) / (n_pos + 2.0)
    lo = 1.0 / (n_neg + 2.0)
    # Scores or weights near the largest double, or the smallest: squares and
    # weighted sums would overflow, or underflow to 0. The targets above depend
    # on the weights' totals only; given them, the loss scales with the
    # weights (same minimiser), and a s = (a 2^k) (s 2^-k). So fit on scores
    # and weights scaled by powers of two (exact) and scale a back.
    s_scale = power_of_two_scale(float(sums[5]))
    w_scale = power_of_two_scale(wsum)
    if s_scale != 1.0 or w_scale != 1.0:
        sums = yield from _sum(_Totals(s_scale, w_scale))
        wsum = float(sums[0])
    if not math.isfinite(sums[2]):
        raise sums_overflow("weights times scores")
    mu = float(sums[2]) / wsum
    spread = yield from _sum(_Spread(mu, s_scale, w_scale))
    if not math.isfinite(spread[0]):
        raise sums_overflow("weights times scores")
    sd = float(np.sqrt(spread[0] / wsum))
    if sd == 0.0 or sums[3] == 1:
        # One distinct score: only b is identified; p equals the mean target. (Its
        # spread can be a rounding error's, not 0: the mean of one score is not it.)
        tbar = float((yield from _sum(_Targets(hi, lo, w_scale)))[0]) / wsum
        return 0.0, float(np.log(tbar / (1.0 - tbar)))

    # The standardised score (s - mu) / sd, and Platt's targets as above.
    terms = Terms((_score,), (mu,), (sd,), s_scale, 1.0 - hi, 1.0 - lo, w_scale)
    alpha, beta = yield from newton_plan(
        terms, [0.0, float(np.log((n_neg + 1.0) / (n_pos + 1.0)))], max_iter=max_iter,
        name="sigmoid calibration")
    with np.errstate(over="ignore", invalid="ignore"):
        a, b = float(alpha / sd * s_scale), float(beta - alpha * mu / sd)
    if not (math.isfinite(a) and math.isfinite(b)):  # a slope of ~1/sd beyond the doubles
        raise DataError("the scores spread too little for a sigmoid a s + b in doubles "
                        "(its slope overflows): multiply them by a constant before fitting")
    return a, b


def _score(s: np.ndarray) -> np.ndarray:
    """The score itself: the one feature of Platt's model (before standardising)."""
    return s


def sigmoid_predict(a: float, b: float, scores: np.ndarray) -> np.ndarray:
    """p = 1 / (1 + exp(a s + b)), computed without overflow; NaN stays NaN.

    With a = 0 (one distinct score fitted) the map is the constant 1 / (1 + e^b),
    at s = +-inf too (where a s would be NaN).
    """
    # (here, not at the top: scipy.special is a quarter of `import distcal`)
    from scipy.special import expit

    s = np.asarray(scores, dtype=np.float64)
    z = a * s if a != 0.0 else np.where(np.isnan(s), np.nan, 0.0)
    p: np.ndarray = expit(-(z + b))
    return p
