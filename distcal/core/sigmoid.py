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
fit is exact on any engine. L is convex; we run Newton's method with a
backtracking line search on standardised scores to full double precision
(scikit-learn stops L-BFGS at a gradient of 1e-6), stopping after a Newton
step below 1e-10 relative (the error left is its square): a rule on the
step, not on the loss, so that every engine, whatever the order of its
sums, stops at the same point to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from scipy.special import expit

from ..errors import sums_overflow
from .distinct import DistinctTable
from .ranges import MapRanges, as_map_ranges

__all__ = ["fit_sigmoid", "sigmoid_predict"]


def fit_sigmoid(data: DistinctTable | MapRanges, max_iter: int = 100) -> tuple[float, float]:
    """Return Platt's (a, b) for the rows summarised in ``data``.

    ``data`` is one distinct-score table, or a map over score ranges
    (:data:`~distcal.core.bins.MapRanges`): every quantity Newton's method
    needs is a sum over ranges, so a table larger than memory (or spread
    over a cluster) is read range by range, twice per iteration.
    """
    map_ranges = as_map_ranges(data)

    def reduce(fn: Callable[[DistinctTable], np.ndarray]) -> np.ndarray:
        parts = map_ranges(lambda t: np.asarray(fn(t), dtype=np.float64))
        if not parts:
            raise ValueError("fit_sigmoid needs at least one row")
        total: np.ndarray = np.sum(parts, axis=0)
        return total

    def totals(t: DistinctTable) -> np.ndarray:
        finite = np.isfinite(t.score)
        return np.array([t.weight.sum(), t.positives.sum(), np.sum(t.weight * t.score),
                         len(t), np.count_nonzero(~finite),
                         np.max(np.abs(t.score), initial=0.0, where=finite)])

    with np.errstate(over="ignore", invalid="ignore"):
        sums = reduce(totals)
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
    # Scores or weights near the largest double: squares and weighted sums
    # would overflow. The targets above depend on the weights' totals only;
    # given them, the loss scales with the weights (same minimiser), and
    # a s = (a 2^k) (s 2^-k). So fit on scores and weights scaled by powers
    # of two (exact) and scale a back.
    s_scale = math.ldexp(1.0, -math.frexp(float(sums[5]))[1]) if sums[5] > 2.0 ** 500 else 1.0
    w_scale = math.ldexp(1.0, -math.frexp(wsum)[1]) if wsum > 2.0 ** 500 else 1.0
    if s_scale != 1.0 or w_scale != 1.0:
        def scaled(t: DistinctTable) -> DistinctTable:
            return replace(t, score=t.score * s_scale, weight=t.weight * w_scale,
                           positives=t.positives * w_scale)

        map_ranges = _scaled_map(map_ranges, scaled)
        with np.errstate(over="ignore", invalid="ignore"):
            sums = reduce(totals)
        wsum = float(sums[0])
    if not math.isfinite(sums[2]):
        raise sums_overflow("weights times scores")
    mu = float(sums[2]) / wsum
    with np.errstate(over="ignore", invalid="ignore"):
        spread = reduce(lambda t: np.array([np.sum(t.weight * (t.score - mu) ** 2)]))
    if not math.isfinite(spread[0]):
        raise sums_overflow("weights times scores")
    sd = float(np.sqrt(spread[0] / wsum))

    def target(t: DistinctTable) -> np.ndarray:
        # Target of q = 1 - p = sigmoid(z) per distinct score.
        q: np.ndarray = (t.positives * (1.0 - hi) + (t.weight - t.positives) * (1.0 - lo)) \
            / t.weight
        return q

    if sd == 0.0:
        # One distinct score: only b is identified; p equals the mean target.
        tbar = float(reduce(lambda t: np.array([np.sum(t.weight * target(t))]))[0]) / wsum
        return 0.0, float(np.log(tbar / (1.0 - tbar)))

    def loss(alpha: float, beta: float) -> float:
        def part(t: DistinctTable) -> np.ndarray:
            z = alpha * (t.score - mu) / sd + beta
            q = target(t)
            return np.array([np.sum(t.weight * (q * np.logaddexp(0.0, -z)
                                                 + (1.0 - q) * np.logaddexp(0.0, z)))])
        return float(reduce(part)[0])

    def newton_sums(alpha: float, beta: float) -> np.ndarray:
        def part(t: DistinctTable) -> np.ndarray:
            x = (t.score - mu) / sd
            q = expit(alpha * x + beta)
            r = t.weight * (q - target(t))
            h = t.weight * q * (1.0 - q)
            return np.array([np.dot(r, x), r.sum(), np.dot(h, x * x), np.dot(h, x), h.sum()])
        return reduce(part)

    alpha, beta = 0.0, float(np.log((n_neg + 1.0) / (n_pos + 1.0)))
    current: float | None = None
    for _ in range(max_iter):
        g0, g1, hxx, hx1, h11 = newton_sums(alpha, beta)
        det = hxx * h11 - hx1 * hx1
        newton = bool(det > 0.0 and np.isfinite(det))
        if newton:
            step = -np.array([h11 * g0 - hx1 * g1, hxx * g1 - hx1 * g0]) / det
        else:  # flat curvature: a gradient step
            step = -np.array([g0, g1]) / max(hxx + h11, np.finfo(float).tiny)
        size, scale = abs(step[0]) + abs(step[1]), 1.0 + abs(alpha) + abs(beta)
        # Stop on the step, not on the loss: near the optimum the loss changes
        # by the square of the parameters' error, so it stops changing in
        # floating point while the parameters are still ~1e-8 off, and where
        # it stops would depend on the order of the sums (the engine).
        if newton and size <= 1e-10 * scale:
            # Quadratic convergence: after this step the error is ~ size^2,
            # i.e. the rounding of the sums (an engine-independent stop).
            alpha, beta = alpha + step[0], beta + step[1]
            break
        if newton and size <= 1e-4 * scale:
            # Quadratic convergence region: full Newton steps (the loss
            # cannot tell them apart from rounding any more).
            alpha, beta, current = alpha + step[0], beta + step[1], None
            continue
        if current is None:
            current = loss(alpha, beta)
        lam = 1.0
        while True:
            na, nb = alpha + lam * step[0], beta + lam * step[1]
            new = loss(na, nb)
            if new <= current:
                break
            lam *= 0.5
            if lam < 1e-12:  # no descent left: optimal to rounding
                na, nb, new = alpha, beta, current
                break
        moved = abs(na - alpha) + abs(nb - beta)
        alpha, beta, current = na, nb, new
        if moved <= 1e-15 * (1.0 + abs(alpha) + abs(beta)):
            break
    return float(alpha / sd * s_scale), float(beta - alpha * mu / sd)


def _scaled_map(map_ranges: MapRanges,
                scaled: Callable[[DistinctTable], DistinctTable]) -> MapRanges:
    def mapped(fn: Callable[[DistinctTable], object]) -> list[object]:
        return map_ranges(lambda t: fn(scaled(t)))
    return mapped


def sigmoid_predict(a: float, b: float, scores: np.ndarray) -> np.ndarray:
    """p = 1 / (1 + exp(a s + b)), computed without overflow; NaN stays NaN."""
    p: np.ndarray = expit(-(a * np.asarray(scores, dtype=np.float64) + b))
    return p
