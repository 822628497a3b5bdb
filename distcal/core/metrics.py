"""Evaluation metrics as functions of a distinct-probability table.

Pooling rows by distinct predicted probability p keeps, per p, the weight
W_p and weighted positives Y_p. Every metric below is a sum over that table
(plus, for the Brier score with fractional labels, the scalar sum w y^2):

* Brier score  (1/W) sum_i w_i (p_i - y_i)^2
             = (1/W) [ sum_p (W_p p^2 - 2 p Y_p) + sum_i w_i y_i^2 ]
* log loss     -(1/W) sum_p [ Y_p log p + (W_p - Y_p) log(1 - p) ], p clipped
  to [eps, 1 - eps] with eps the float64 machine epsilon (scikit-learn).
* calibration curve over scikit-learn's bins; ECE = sum_b (W_b / W)
  |true_b - pred_b|, MCE = max_b |true_b - pred_b|; Murphy's (1973)
  decomposition  reliability = sum_b (W_b/W) (pred_b - true_b)^2,
  resolution = sum_b (W_b/W) (true_b - ybar)^2, uncertainty = ybar (1 - ybar).
* exact AUC = sum_p P_p (N_{<p} + N_p / 2) / (P N), ties counting one half
  (Mann-Whitney), with P_p = Y_p and N_p = W_p - Y_p;
* the ROC curve, one point per distinct p, and its convex hull.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .bins import bin_ids
from .distinct import DistinctTable

__all__ = ["range_partials", "combine_partials", "roc_points", "roc_hull", "wilson_interval"]

EPS = float(np.finfo(np.float64).eps)


def range_partials(t: DistinctTable, edges: np.ndarray, threshold: float) -> dict[str, Any]:
    """Every sum the metrics need, for one range of distinct probabilities."""
    p, w, y = t.score, t.weight, t.positives
    n = w - y
    nb = edges.shape[0] - 1
    ids = bin_ids(edges, p)
    pc = np.clip(p, EPS, 1.0 - EPS)
    above = p >= threshold
    return {
        "w": float(w.sum()), "y": float(y.sum()), "n": float(n.sum()),
        "brier": float(np.sum(w * p * p - 2.0 * p * y)),
        "log": float(np.sum(y * np.log(pc) + n * np.log1p(-pc))),
        "bins": np.stack([np.bincount(ids, weights=w, minlength=nb)[:nb],
                          np.bincount(ids, weights=w * p, minlength=nb)[:nb],
                          np.bincount(ids, weights=y, minlength=nb)[:nb]]),
        # Mann-Whitney pairs inside the range, ties counting one half
        "pairs": float(np.sum(y * (np.cumsum(n) - n + 0.5 * n))),
        "above": (float(y[above].sum()), float(n[above].sum())),
        "roc": (p, y, n),
    }


def combine_partials(parts: list[dict[str, Any]], sum_wyy: float) -> dict[str, Any]:
    """Metrics from the ordered ranges' partials (see the module docstring)."""
    w = sum(q["w"] for q in parts)
    pos = sum(q["y"] for q in parts)
    neg = sum(q["n"] for q in parts)
    pairs, neg_below = 0.0, 0.0
    for q in parts:  # a positive of a range lies above every negative below the range
        pairs += q["pairs"] + q["y"] * neg_below
        neg_below += q["n"]
    bins = sum(q["bins"] for q in parts)
    tp = sum(q["above"][0] for q in parts)
    fp = sum(q["above"][1] for q in parts)
    score = np.concatenate([q["roc"][0] for q in parts])
    ys = np.concatenate([q["roc"][1] for q in parts])
    ns = np.concatenate([q["roc"][2] for q in parts])
    return {
        "weight": w, "positives": pos, "brier": (sum(q["brier"] for q in parts) + sum_wyy) / w,
        "log_loss": -sum(q["log"] for q in parts) / w,
        "auc": pairs / (pos * neg) if pos > 0 and neg > 0 else math.nan,
        "bins": bins, "roc": roc_points(score, ys, ns), "roc_pos": ys, "roc_neg": ns,
        "confusion": {"tp": tp, "fp": fp, "tn": neg - fp, "fn": pos - tp},
    }


def roc_points(score: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> dict[str, np.ndarray]:
    """(fpr, tpr, threshold) from (0, 0) at +inf, one point per distinct p, descending.

    ``score`` ascending distinct probabilities with their positive and
    negative weights.
    """
    tps = np.concatenate(([0.0], np.cumsum(pos[::-1])))
    fps = np.concatenate(([0.0], np.cumsum(neg[::-1])))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = tps / tps[-1] if tps[-1] > 0 else np.full_like(tps, np.nan)
        fpr = fps / fps[-1] if fps[-1] > 0 else np.full_like(fps, np.nan)
    return {"fpr": fpr, "tpr": tpr, "threshold": np.concatenate(([np.inf], score[::-1]))}


def roc_hull(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the ROC convex hull, from (0, 0) to (1, 1).

    ``pos``, ``neg``: positive and negative weight per distinct probability,
    ascending. The upper hull's segments are exactly the blocks of the
    isotonic regression of the label on the probability (Fawcett &
    Niculescu-Mizil, "PAV and the ROC convex hull", 2007): a block's slope
    is its positive rate, and PAV makes rates decrease from the top score
    down, which is convexity. So the hull is one O(n) PAV (scipy) and the
    cumulative sums at block boundaries, read from the highest score;
    collinear points fall inside merged blocks.
    """
    from scipy.optimize import isotonic_regression

    w = pos + neg
    p_total, n_total = float(pos.sum()), float(neg.sum())
    if p_total <= 0.0 or n_total <= 0.0 or w.shape[0] == 0:
        return np.array([0.0, 1.0]), np.array([0.0, 1.0])
    res = isotonic_regression(pos / w, weights=w, increasing=True)
    starts = np.asarray(res.blocks[:-1], dtype=np.intp)
    bp = np.add.reduceat(pos, starts)[::-1]
    bn = np.add.reduceat(neg, starts)[::-1]
    rate = (bp / (bp + bn))
    # equal rates in neighbouring blocks are one segment
    keep = np.concatenate((rate[1:] != rate[:-1], [True]))
    tp = np.concatenate(([0.0], np.cumsum(bp)[keep]))
    fp = np.concatenate(([0.0], np.cumsum(bn)[keep]))
    return fp / n_total, tp / p_total


def wilson_interval(successes: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson, 1927)."""
    from scipy.stats import norm

    if n <= 0:
        return (math.nan, math.nan)
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    z = float(norm.ppf(0.5 + confidence / 2.0))
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
