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

import numpy as np

from .bins import bin_edges, bin_ids
from .distinct import DistinctTable

__all__ = ["brier", "log_loss", "calibration_bins", "auc", "roc_points", "roc_hull",
           "confusion_at", "wilson_interval"]

EPS = float(np.finfo(np.float64).eps)


def brier(table: DistinctTable, sum_wyy: float) -> float:
    p = table.score
    return float((np.sum(table.weight * p * p - 2.0 * p * table.positives) + sum_wyy)
                 / table.weight.sum())


def log_loss(table: DistinctTable) -> float:
    p = np.clip(table.score, EPS, 1.0 - EPS)
    ll = table.positives * np.log(p) + (table.weight - table.positives) * np.log1p(-p)
    return float(-np.sum(ll) / table.weight.sum())


def calibration_bins(table: DistinctTable, n_bins: int = 10, strategy: str = "uniform",
                     edges: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per non-empty bin: prob_pred, prob_true, weight; plus the edges used."""
    if edges is None:
        edges = bin_edges(table, n_bins, strategy)
    edges = np.asarray(edges, dtype=np.float64)
    ids = bin_ids(edges, table.score)
    nb = edges.shape[0] - 1
    w = np.bincount(ids, weights=table.weight, minlength=nb)[:nb]
    wp = np.bincount(ids, weights=table.weight * table.score, minlength=nb)[:nb]
    wy = np.bincount(ids, weights=table.positives, minlength=nb)[:nb]
    cnt = np.bincount(ids, weights=table.count.astype(np.float64), minlength=nb)[:nb]
    full = w > 0
    return {"edges": edges, "bin": np.flatnonzero(full), "prob_pred": wp[full] / w[full],
            "prob_true": wy[full] / w[full], "weight": w[full], "count": cnt[full]}


def auc(table: DistinctTable) -> float:
    pos = table.positives
    neg = table.weight - table.positives
    p_total, n_total = float(pos.sum()), float(neg.sum())
    if p_total <= 0.0 or n_total <= 0.0:
        return math.nan
    neg_below = np.cumsum(neg) - neg
    return float(np.sum(pos * (neg_below + 0.5 * neg)) / (p_total * n_total))


def roc_points(table: DistinctTable) -> dict[str, np.ndarray]:
    """(fpr, tpr, threshold) from (0, 0) at +inf, one point per distinct p, descending."""
    pos = table.positives[::-1]
    neg = (table.weight - table.positives)[::-1]
    tps = np.concatenate(([0.0], np.cumsum(pos)))
    fps = np.concatenate(([0.0], np.cumsum(neg)))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = tps / tps[-1] if tps[-1] > 0 else np.full_like(tps, np.nan)
        fpr = fps / fps[-1] if fps[-1] > 0 else np.full_like(fps, np.nan)
    return {"fpr": fpr, "tpr": tpr, "threshold": np.concatenate(([np.inf], table.score[::-1]))}


def roc_hull(fpr: np.ndarray, tpr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the ROC convex hull from (0, 0) to (1, 1) (upper hull, monotone chain)."""
    pts = np.unique(np.column_stack([np.concatenate(([0.0], fpr, [1.0])),
                                     np.concatenate(([0.0], tpr, [1.0]))]), axis=0)
    pts = pts[~np.isnan(pts).any(axis=1)]
    hull: list[tuple[float, float]] = []
    for x, y in pts:  # ascending x, then y
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            # drop the middle point unless it is a strict left turn (above the chord)
            if (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append((float(x), float(y)))
    h = np.array(hull)
    return h[:, 0], h[:, 1]


def confusion_at(table: DistinctTable, threshold: float) -> dict[str, float]:
    """Weighted confusion of the rule "positive iff p >= threshold"."""
    above = table.score >= threshold
    tp = float(table.positives[above].sum())
    fp = float((table.weight[above] - table.positives[above]).sum())
    fn = float(table.positives[~above].sum())
    tn = float((table.weight[~above] - table.positives[~above]).sum())
    return {"tp": tp, "fp": fp, "tn": tn, "fn": fn}


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
