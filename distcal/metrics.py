"""Small exact helpers for model evaluation (see also :func:`distcal.evaluate`).

Worked examples (from course material on model evaluation):

>>> lo, hi = wilson_interval(40, 50)            # accuracy 0.8 over 50 cases
>>> round(lo, 3), round(hi, 3)
(0.67, 0.888)
>>> classification_cost({"tp": 150, "fn": 40, "fp": 60, "tn": 250},
...                     {"tp": -1, "fn": 100, "fp": 1, "tn": 0})
3910.0
"""

from __future__ import annotations

import math

from .core.metrics import wilson_interval

__all__ = ["wilson_interval", "compare_error_rates", "classification_cost"]


def compare_error_rates(e1: float, n1: float, e2: float, n2: float,
                        confidence: float = 0.95) -> tuple[float, float, float]:
    """d = |e1 - e2| and its normal-approximation interval.

    For error rates measured on independent test sets of sizes n1 and n2,
    var(d) ~ e1 (1 - e1) / n1 + e2 (1 - e2) / n2, and the interval is
    d -/+ z sigma (Mitchell, Machine Learning, 1997, section 5.5). The
    difference is significant at that confidence when the interval
    excludes 0.
    """
    from scipy.special import ndtri

    if n1 <= 0 or n2 <= 0:
        raise ValueError("n1 and n2 must be positive")
    z = float(ndtri(0.5 + confidence / 2.0))
    d = abs(e1 - e2)
    sigma = math.sqrt(e1 * (1.0 - e1) / n1 + e2 * (1.0 - e2) / n2)
    return (d, d - z * sigma, d + z * sigma)


def classification_cost(confusion: dict[str, float], costs: dict[str, float]) -> float:
    """Total cost: sum over tp, fp, tn, fn of count times cost per instance."""
    missing = {"tp", "fp", "tn", "fn"} - set(confusion)
    if missing:
        raise ValueError(f"confusion lacks {sorted(missing)}")
    return float(sum(float(confusion[k]) * float(costs.get(k, 0.0))
                     for k in ("tp", "fp", "tn", "fn")))
