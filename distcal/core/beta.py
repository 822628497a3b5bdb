"""Beta calibration (Kull, Silva Filho & Flach, 2017) from a distinct-score table.

Model, for a score s in [0, 1] clipped to [1e-12, 1 - 1e-12]:

    p(s) = 1 / (1 + 1 / (exp(c) s^a / (1 - s)^b)) = expit(a ln s - b ln(1 - s) + c)

the three-parameter ("abm") family of Kull et al. (2017), section 3.
(a, b, c) minimise the weighted log loss

    L = sum_s  Y(s) softplus(-z_s) + (W(s) - Y(s)) softplus(z_s),
    z_s = a x1(s) + b x2(s) + c,   x1 = ln s,  x2 = -ln(1 - s),

an unpenalised logistic regression on the two log features. L depends on
each distinct score's weight W and weighted label sum Y only, so it is a
function of the :class:`~distcal.core.distinct.DistinctTable`; its
gradient and Hessian are sums over the score ranges, and every Newton step
is one pass over the ranges plus a 3 x 3 solve on the driver (the same
shape as Platt's sigmoid, :mod:`distcal.core.sigmoid`), which makes the fit
exact on any engine.

The refit rule of the authors' ``betacal`` package (parameters="abm"): if
the optimum has a < 0, refit with a = 0 (the map is then monotone
increasing in s only through b); otherwise, if b < 0, refit with b = 0.
As in ``betacal``, the refitted parameter is not checked again.

L is convex. Newton's method with a backtracking line search (each pass
gives L with the derivatives, so a step is checked by the pass that
computes the next) stops after a Newton step below 1e-10 relative (the
error left is its square), a rule on the step and not on the loss, so that
every engine stops at the same point to rounding. A singular Hessian
(fewer than three distinct scores: the optimum is then a line or a plane
of parameters, all giving the same predictions at the fitted scores)
takes the least-squares (minimum-norm) Newton step.

Scores outside [0, 1] are clipped like the others, with a warning (they
are likely not probabilities). Rows whose labels are all 0 (or all 1) have
no minimiser (the loss falls towards 0 as c -> -inf), and neither do
scores that separate the classes; the first ends the plan with
:class:`NoMinimum` (the fit refuses it, or a segment falls back to the
global map), the second stops after ``max_iter`` passes with a warning.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit

from ..errors import sums_overflow
from .distinct import DistinctTable

__all__ = ["beta_plan", "beta_predict", "beta_features", "CLIP", "NoMinimum"]

CLIP = 1e-12  # scores are clipped to [CLIP, 1 - CLIP] (the contract's, not betacal's eps)


def beta_features(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ln s, -ln(1 - s)) of the clipped scores (NaN stays NaN).

    ``ln(1 - s)``, not ``log1p(-s)``: the contract's formula (1 - s)^b, and
    what the SQL and ONNX exports compute, operand for operand.
    """
    s = np.clip(np.asarray(scores, dtype=np.float64), CLIP, 1.0 - CLIP)
    return np.log(s), -np.log(1.0 - s)


def beta_predict(a: float, b: float, c: float, scores: Any) -> np.ndarray:
    """p = expit(a ln s - b ln(1 - s) + c) with s clipped to [1e-12, 1 - 1e-12]; NaN stays NaN."""
    x1, x2 = beta_features(scores)
    p: np.ndarray = expit(a * x1 + b * x2 + c)
    return p


class _Totals:
    """Weight, positives, rows with scores outside [0, 1] and distinct scores of a range."""

    def __call__(self, t: DistinctTable) -> np.ndarray:
        outside = (t.score < 0.0) | (t.score > 1.0)
        return np.array([t.weight.sum(), t.positives.sum(), float(t.count[outside].sum()),
                         float(len(t))])


class _Sums:
    """L, its gradient and its Hessian at ``coef`` over one range's table (one pass).

    ``active``: which of (a, b) are free (the intercept c always is);
    weights are multiplied by ``w_scale`` (a power of two: exact). L per
    score is W softplus(z) - Y z (= Y softplus(-z) + (W - Y) softplus(z)).
    """

    def __init__(self, coef: tuple[float, float, float], active: tuple[bool, bool],
                 w_scale: float):
        self.coef, self.active, self.w_scale = coef, active, w_scale

    def __call__(self, t: DistinctTable) -> np.ndarray:
        a, b, c = self.coef
        x1, x2 = beta_features(t.score)
        z = a * x1 + b * x2 + c
        w, y = t.weight * self.w_scale, t.positives * self.w_scale
        loss = np.dot(w, np.logaddexp(0.0, z)) - np.dot(y, z)
        p = expit(z)
        r = w * p - y
        h = w * p * (1.0 - p)
        cols = [x for x, on in zip((x1, x2), self.active) if on]
        hx = [h * x for x in cols]
        m = len(cols) + 1
        out = np.empty(1 + m + m * m)
        out[0] = loss
        out[1:1 + m] = [*(np.dot(r, x) for x in cols), r.sum()]
        hess = out[1 + m:].reshape(m, m)
        for i in range(m - 1):
            for j in range(i, m - 1):
                hess[i, j] = hess[j, i] = np.dot(hx[i], cols[j])
            hess[i, m - 1] = hess[m - 1, i] = hx[i].sum()
        hess[m - 1, m - 1] = h.sum()
        return out


def _add(parts: list[Any]) -> np.ndarray:
    total: np.ndarray = np.sum(parts, axis=0)
    return total


def _newton(active: tuple[bool, bool], w_scale: float, max_iter: int
            ) -> Generator[Any, list[Any], tuple[float, float, float]]:
    """The minimiser of L with the free parameters ``active`` (+ c), by Newton passes.

    Each pass gives L, the gradient and the Hessian at one point, so a step
    is checked by the pass that computes the next one: a step that does not
    lower L is halved (backtracking), except in the quadratic region, where
    L cannot tell steps apart from rounding any more.
    """
    m = sum(active) + 1

    def full(theta: np.ndarray) -> tuple[float, float, float]:
        it = iter(theta[:-1].tolist())
        return (next(it) if active[0] else 0.0, next(it) if active[1] else 0.0,
                float(theta[-1]))

    def at(theta: np.ndarray) -> Generator[Any, list[Any], tuple[float, np.ndarray, np.ndarray]]:
        sums = _add((yield _Sums(full(theta), active, w_scale)))
        if not np.all(np.isfinite(sums)):
            raise sums_overflow()
        return float(sums[0]), sums[1:1 + m], sums[1 + m:].reshape(m, m)

    theta = np.array([1.0] * (m - 1) + [0.0])  # a = b = 1, c = 0: the identity map
    loss, g, h = yield from at(theta)
    for _ in range(max_iter):
        step = -np.linalg.lstsq(h, g, rcond=None)[0]
        size, scale = float(np.abs(step).sum()), 1.0 + float(np.abs(theta).sum())
        # Stop on the step, not on the loss (module docstring): after a Newton
        # step this small the error left is its square, the rounding of the sums.
        if size <= 1e-10 * scale:
            theta = theta + step
            break
        lam = 1.0
        while True:
            cand = theta + lam * step
            c_loss, c_g, c_h = yield from at(cand)
            if c_loss <= loss or size <= 1e-4 * scale:  # quadratic region: full steps
                break
            lam *= 0.5
            if lam < 1e-12:  # no descent left: optimal to rounding
                return full(theta)
        theta, loss, g, h = cand, c_loss, c_g, c_h
    else:
        # A warning, not a log record: the core imports no logging set-up (only
        # the core and the errors), and a caller sees it where the fit ran.
        warnings.warn(f"beta calibration: no convergence in {max_iter} Newton passes (scores "
                      "that separate the classes have no finite optimum); the last step's "
                      "parameters are used", RuntimeWarning, stacklevel=2)
    return full(theta)


@dataclass(frozen=True)
class NoMinimum:
    """Every label of a key is ``label`` ("0" or "1"): the log loss has no minimum."""

    label: str
    weight: float

    def message(self) -> str:
        return (f"every label is {self.label} (weight {self.weight:g}): beta calibration's "
                "log loss has no minimum without rows of both classes")


def beta_plan(score_col: str | None = None, max_iter: int = 100
              ) -> Generator[Any, list[Any], tuple[float, float, float] | NoMinimum]:
    """Beta calibration's (a, b, c) as a plan (:mod:`distcal.core.plans`).

    One pass of totals, then Newton passes (module docstring); the refit
    rule adds the passes of a two-parameter fit when a or b is negative.
    Rows of one class only give :class:`NoMinimum` (no pass more).
    ``score_col`` names the column in the messages.
    """
    totals = _add((yield _Totals()))
    wsum, pos, outside = float(totals[0]), float(totals[1]), int(totals[2])
    where = f"column '{score_col}' (score): " if score_col else ""
    if outside:
        # The contract clips; such scores are suspect (logits?), so say so.
        warnings.warn(f"{where}{outside} row{'s are' if outside > 1 else ' is'} outside "
                      "[0, 1]; beta calibration maps probabilities and clips them to "
                      "[1e-12, 1 - 1e-12] (sigmoid or isotonic take any scores)",
                      UserWarning, stacklevel=2)
    if not (math.isfinite(wsum) and math.isfinite(pos)):
        raise sums_overflow()
    if pos <= 0.0 or pos >= wsum:  # the caller refuses it, or falls back (a segment)
        return NoMinimum("0" if pos <= 0.0 else "1", wsum)
    # Weights near the largest double: sums of them would overflow. The
    # minimiser does not change when all weights are scaled (by a power of two: exact).
    w_scale = math.ldexp(1.0, -math.frexp(wsum)[1]) if wsum > 2.0 ** 500 else 1.0
    a, b, c = yield from _newton((True, True), w_scale, max_iter)
    if a < 0.0:
        a, b, c = yield from _newton((False, True), w_scale, max_iter)
    elif b < 0.0:
        a, b, c = yield from _newton((True, False), w_scale, max_iter)
    return a, b, c
