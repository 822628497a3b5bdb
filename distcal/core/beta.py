"""Beta calibration (Kull, Silva Filho & Flach, 2017) from a distinct-score table.

Model, for a score s in [0, 1] clipped to [1e-12, 1 - 1e-12]:

    p(s) = 1 / (1 + 1 / (exp(c) s^a / (1 - s)^b)) = expit(a ln s - b ln(1 - s) + c)

the three-parameter ("abm") family of Kull et al. (2017), section 3.
(a, b, c) minimise the weighted log loss

    L = sum_s  Y(s) softplus(-z_s) + (W(s) - Y(s)) softplus(z_s),
    z_s = a x1(s) + b x2(s) + c,   x1 = ln s,  x2 = -ln(1 - s),

an unpenalised logistic regression on the two log features, fitted by
Newton passes over the score ranges (:mod:`distcal.core.logistic`, as
Platt's sigmoid): exact on any engine.

The refit rule of the authors' ``betacal`` package (parameters="abm"): if
the optimum has a < 0, refit with a = 0 (the map is then monotone
increasing in s only through b); otherwise, if b < 0, refit with b = 0.
As in ``betacal``, the refitted parameter is not checked again.

Scores outside [0, 1] are clipped like the others, with a warning (they
are likely not probabilities). Rows whose labels are all 0 (or all 1) have
no minimiser (the loss falls towards 0 as c -> -inf), and neither do
scores that separate the classes; the first ends the plan with
:class:`NoMinimum` (the fit refuses it, or a segment falls back to the
global map), the second stops with a warning once the loss is below 2^-40
of its start (:data:`~distcal.core.logistic.SEPARATED`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import sums_overflow
from .distinct import DistinctTable
from .logistic import Terms, newton_plan, power_of_two_scale
from .plans import KeySums

__all__ = ["beta_plan", "beta_predict", "beta_features", "CLIP", "NoMinimum"]

CLIP = 1e-12  # scores are clipped to [CLIP, 1 - CLIP] (the contract's, not betacal's eps)


def beta_features(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ln s, -ln(1 - s)) of the clipped scores (NaN stays NaN).

    ``ln(1 - s)``, not ``log1p(-s)``: the contract's formula (1 - s)^b, and
    what the SQL and ONNX exports compute, operand for operand.
    """
    return _log_s(scores), _log_1ms(scores)


def _clipped(scores: Any) -> np.ndarray:
    return np.clip(np.asarray(scores, dtype=np.float64), CLIP, 1.0 - CLIP)


def _log_s(s: np.ndarray) -> np.ndarray:
    """ln s of the clipped scores (:func:`beta_features`' first feature)."""
    out: np.ndarray = np.log(_clipped(s))
    return out


def _log_1ms(s: np.ndarray) -> np.ndarray:
    """-ln(1 - s) of the clipped scores (:func:`beta_features`' second feature)."""
    out: np.ndarray = -np.log(1.0 - _clipped(s))
    return out


def beta_predict(a: float, b: float, c: float, scores: Any) -> np.ndarray:
    """p = expit(a ln s - b ln(1 - s) + c) with s clipped to [1e-12, 1 - 1e-12]; NaN stays NaN."""
    # (here, not at the top: scipy.special is a quarter of `import distcal`)
    from scipy.special import expit

    x1, x2 = beta_features(scores)
    p: np.ndarray = expit(a * x1 + b * x2 + c)
    return p


class _Totals(KeySums):
    """Weight, positives, rows with scores outside [0, 1] and distinct scores of a range."""

    def columns(self, t: DistinctTable, number: Callable[[int], float | np.ndarray]
                ) -> list[np.ndarray]:
        outside = (t.score < 0.0) | (t.score > 1.0)
        return [t.weight, t.positives, np.where(outside, t.count, 0).astype(np.float64),
                np.ones(len(t))]


def _newton(active: tuple[bool, bool], w_scale: float, max_iter: int
            ) -> Generator[Any, list[Any], tuple[float, float, float]]:
    """The minimiser of L with the free parameters ``active`` (+ c), by Newton passes
    (:func:`~distcal.core.logistic.newton_plan`) from the identity map a = b = 1, c = 0."""
    features = tuple(f for f, on in zip((_log_s, _log_1ms), active) if on)
    # The free ones of (ln s, -ln(1 - s)) as they are; the target masses the positives.
    terms = Terms(features, (0.0,) * len(features), (1.0,) * len(features), w_scale=w_scale)
    theta = yield from newton_plan(terms, [1.0] * len(features) + [0.0], max_iter=max_iter,
                                   name="beta calibration")
    it = iter(theta[:-1].tolist())
    return (next(it) if active[0] else 0.0, next(it) if active[1] else 0.0, float(theta[-1]))


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
    totals = np.sum((yield _Totals()), axis=0)
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
    # Weights near the largest double, or the smallest: sums of them would overflow, or
    # underflow. The minimiser does not change when all weights are scaled (by a power
    # of two: exact).
    w_scale = power_of_two_scale(wsum)
    a, b, c = yield from _newton((True, True), w_scale, max_iter)
    if a < 0.0:
        a, b, c = yield from _newton((False, True), w_scale, max_iter)
    elif b < 0.0:
        a, b, c = yield from _newton((True, False), w_scale, max_iter)
    return a, b, c
