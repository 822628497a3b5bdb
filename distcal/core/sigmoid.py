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
(scikit-learn stops L-BFGS at a gradient of 1e-6).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from .distinct import DistinctTable

__all__ = ["fit_sigmoid", "sigmoid_predict"]


def _loss(alpha: float, beta: float, x: np.ndarray, w: np.ndarray, t: np.ndarray) -> float:
    z = alpha * x + beta
    return float(np.sum(w * (t * np.logaddexp(0.0, z) + (1.0 - t) * np.logaddexp(0.0, -z))))


def fit_sigmoid(table: DistinctTable, max_iter: int = 100) -> tuple[float, float]:
    """Return Platt's (a, b) for the rows summarised in ``table``."""
    if len(table) == 0:
        raise ValueError("fit_sigmoid needs at least one row")
    s = table.score
    if not np.all(np.isfinite(s)):
        raise ValueError("fit_sigmoid needs finite scores")
    w_pos = table.positives
    w_neg = table.weight - table.positives
    n_pos = float(w_pos.sum())
    n_neg = float(w_neg.sum())
    hi = (n_pos + 1.0) / (n_pos + 2.0)
    lo = 1.0 / (n_neg + 2.0)
    w = table.weight
    # Target of 1 - p (the sigmoid of z) per distinct score.
    t = (w_pos * (1.0 - hi) + w_neg * (1.0 - lo)) / w

    wsum = float(w.sum())
    mu = float(np.sum(w * s) / wsum)
    sd = float(np.sqrt(np.sum(w * (s - mu) ** 2) / wsum))
    if sd == 0.0 or len(table) == 1:
        # One distinct score: only b is identified; p equals the mean target.
        tbar = float(np.sum(w * t) / wsum)
        return 0.0, float(np.log(tbar / (1.0 - tbar)))
    x = (s - mu) / sd

    alpha, beta = 0.0, float(np.log((n_neg + 1.0) / (n_pos + 1.0)))
    loss = _loss(alpha, beta, x, w, t)
    for _ in range(max_iter):
        q = expit(alpha * x + beta)
        r = w * (q - t)
        g = np.array([np.dot(r, x), r.sum()])
        h = w * q * (1.0 - q)
        hxx, hx1, h11 = np.dot(h, x * x), np.dot(h, x), h.sum()
        det = hxx * h11 - hx1 * hx1
        if det <= 0.0 or not np.isfinite(det):
            step = -g / max(hxx + h11, np.finfo(float).tiny)
        else:
            step = -np.array([h11 * g[0] - hx1 * g[1], hxx * g[1] - hx1 * g[0]]) / det
        lam = 1.0
        while True:
            na, nb = alpha + lam * step[0], beta + lam * step[1]
            new_loss = _loss(na, nb, x, w, t)
            if new_loss <= loss:
                break
            lam *= 0.5
            if lam < 1e-12:  # no descent left: we are at the optimum to rounding
                return float(alpha / sd), float(beta - alpha * mu / sd)
        moved = abs(na - alpha) + abs(nb - beta)
        alpha, beta = na, nb
        converged = moved <= 1e-15 * (1.0 + abs(alpha) + abs(beta)) or new_loss == loss
        loss = new_loss
        if converged:
            break
    a = alpha / sd
    b = beta - alpha * mu / sd
    return float(a), float(b)


def sigmoid_predict(a: float, b: float, scores: np.ndarray) -> np.ndarray:
    """p = 1 / (1 + exp(a s + b)), computed without overflow; NaN stays NaN."""
    return expit(-(a * np.asarray(scores, dtype=np.float64) + b))
