"""Spiegelhalter's test and calibration-in-the-large: sums over distinct probabilities.

For rows with predicted probability p_i, label y_i in [0, 1] and weight w_i:

* Spiegelhalter's z (Spiegelhalter, "Probabilistic prediction in patient
  management and clinical trials", Statistics in Medicine 5, 1986; the
  weighted form of the statistic)

      Z = sum_i w_i (y_i - p_i)(1 - 2 p_i) / sqrt(sum_i w_i^2 (1 - 2 p_i)^2 p_i (1 - p_i))

  is standard normal under the hypothesis that every y_i has mean p_i;
  its two-sided p-value is 2 (1 - Phi(|Z|)). Unweighted rows have w = 1.
* Calibration-in-the-large: CITL = sum w p / W - sum w y / W (mean
  prediction minus observed rate; positive means over-prediction). Its 95%
  normal interval is CITL -+ z_0.975 * SE with
  SE^2 = sum_i w_i^2 p_i (1 - p_i) / W^2, the variance of the weighted
  label mean when each y_i is Bernoulli(p_i) (the model's own variance, the
  same hypothesis as Spiegelhalter's; it needs only the sums of w^2).

Pooled by distinct p, with W_p = sum w, Y_p = sum w y and Q_p = sum w^2,
every sum above is a sum over the table: sum (Y_p - W_p p)(1 - 2p),
sum Q_p (1 - 2p)^2 p (1 - p), sum W_p p and sum Q_p p (1 - p). So, like the
other metrics, they are range partials added up in any order.
"""

from __future__ import annotations

import math

import numpy as np

from .distinct import DistinctTable

__all__ = ["calibration_test_partials", "calibration_tests"]


def calibration_test_partials(t: DistinctTable, ww: np.ndarray | None) -> np.ndarray:
    """The four sums of one range of distinct probabilities (module docstring).

    ``ww``: the sums of w^2 per distinct probability (None: not pooled; the
    sums that need them are then NaN).
    """
    p, w, y = t.score, t.weight, t.positives
    q = np.full(p.shape[0], np.nan) if ww is None else ww
    v = p * (1.0 - p)
    return np.array([float(np.sum((y - w * p) * (1.0 - 2.0 * p))),
                     float(np.sum(q * (1.0 - 2.0 * p) ** 2 * v)),
                     float(np.sum(w * p)),
                     float(np.sum(q * v))])


def calibration_tests(sums: np.ndarray, weight: float, positives: float,
                      confidence: float = 0.95) -> dict[str, float]:
    """Spiegelhalter's z and p-value, CITL and its normal interval from the added partials.

    A zero variance (every p in {0, 1/2, 1}) with a non-zero numerator (a row the
    model calls impossible: y = 1 at p = 0, or y = 0 at p = 1) is |z| = inf and p = 0;
    with a zero numerator too (0/0), z and p are NaN.
    """
    # (here, not at the top: scipy.special is a quarter of `import distcal`)
    from scipy.special import ndtr, ndtri

    num, den, wp, var = (float(x) for x in sums)
    if den > 0:
        z = num / math.sqrt(den)
    else:
        z = math.copysign(math.inf, num) if den == 0 and num != 0 else math.nan
    p_value = float(2.0 * ndtr(-abs(z))) if not math.isnan(z) else math.nan
    citl = (wp - positives) / weight if weight > 0 else math.nan
    half = float(ndtri(0.5 + confidence / 2.0)) * math.sqrt(var) / weight \
        if weight > 0 and var >= 0 else math.nan
    return {"spiegelhalter_z": z, "spiegelhalter_p": p_value, "citl": citl,
            "citl_low": citl - half, "citl_high": citl + half}
