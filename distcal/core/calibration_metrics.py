"""Calibration metrics as mergeable sums over ranges of distinct probabilities.

Every metric here is computed the way :mod:`distcal.core.metrics` computes
the others: a function of one range of the distinct-probability table
(``*_partials``) runs wherever the range lives, and a combine step on the
driver adds the ranges' results in score order. Any split of the table into
ordered ranges gives the same numbers up to the order of floating-point
additions (tests check 1e-12).

**Exact Murphy decomposition** (Murphy, 1973, with one bin per distinct
probability, so there is no within-bin spread of p and the identity is
exact). With W = sum w, ybar = Y / W, ybar_p = Y_p / W_p::

    reliability = (1/W) sum_p W_p (p - ybar_p)^2
    resolution  = (1/W) sum_p W_p (ybar_p - ybar)^2
    uncertainty = (1/W) sum_i w_i (y_i - ybar)^2   (= ybar (1 - ybar) for 0/1 labels)
    brier       = reliability - resolution + uncertainty

Per range: W_r, its mean ybar_r, M2_r = sum_p W_p (ybar_p - ybar_r)^2
(resolution's sum, merged with Chan et al.'s parallel variance update, so
no cancellation), the reliability sum and the Brier sum
sum_p (W_p p^2 - 2 p Y_p). The labels' sum_i w_i y_i^2 is Y for 0/1 labels,
else given (``sum_wyy``, which every engine already gathers).

**Adaptive (equal-mass) ECE** (Nguyen & O'Connor, 2015; Nixon et al., 2019,
"adaptive calibration error"). Lay the rows out in ascending probability,
row i occupying the interval [C_{i-1}, C_i) of length w_i (C the cumulative
weight), and cut [0, W) into B intervals of equal length W / B. Bin b
holds the part of each row that falls in [b W / B, (b + 1) W / B); a
distinct probability straddling a cut is split between the two bins in
proportion to the overlap, with its positive rate ybar_p on both sides
(rows of equal probability are exchangeable, so this is the expectation
over the order of ties and does not depend on it). With W_b, P_b = sum of
overlap * p and Y_b = sum of overlap * ybar_p::

    adaptive ECE = sum_b (W_b / W) |Y_b / W_b - P_b / W_b| = (1/W) sum_b |Y_b - P_b|
    adaptive MCE = max_b |Y_b - P_b| / W_b

For unit weights without ties and B dividing n this is exactly the mean
over ``np.array_split`` of the sorted rows into B equal bins. (``strategy=
"quantile"`` in :func:`distcal.evaluate` instead cuts at quantile *values*,
which keeps ties together and so gives unequal bins when there are ties.)
It needs the offset of each range: a first pass gives the ranges' weights
(:func:`extra_range_partials` carries them), a second
(:func:`adaptive_partials`) each range's share of every bin.

**Smooth ECE**: :mod:`distcal.core.smooth_ece` (relplot's smECE from grid
sums).

**Multiclass** (top-label and class-wise ECE): :mod:`distcal.core.multiclass_metrics`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import smooth_ece as sm
from .distinct import DistinctTable
from .metrics import desc_cumsums
from .ranges import MapRanges, as_map_ranges
from .threshold import TIE

__all__ = ["murphy_partials", "combine_murphy", "adaptive_cuts", "adaptive_partials",
           "adaptive_from_bins", "adaptive_ece", "extra_range_partials", "extra_metrics",
           "calibration_metrics", "table_from_report", "metrics_from_report", "cost_curve"]


# -- exact Murphy decomposition ------------------------------------------------

def murphy_partials(t: DistinctTable) -> dict[str, Any]:
    """Sums of one range for the exact decomposition (module docstring)."""
    p, w, y = t.score, t.weight, t.positives
    wr = float(w.sum())
    mean = float(y.sum()) / wr if wr > 0 else 0.0
    rate = y / w
    return {"w": wr, "y": float(y.sum()), "mean": mean,
            "m2": float(np.sum(w * (rate - mean) ** 2)),
            # sum (w p - y)^2 / w written as sum w (p - y / w)^2: (w p)^2 overflows
            # from weights near 1e154 on, w (p - rate)^2 <= w does not
            "rel": float(np.sum(w * (p - rate) ** 2)),
            "brier": float(np.sum(w * p * p - 2.0 * p * y)),
            "binary": bool(t.binary), "n_distinct": int(len(t))}


def combine_murphy(parts: list[dict[str, Any]], sum_wyy: float | None = None
                   ) -> dict[str, float]:
    """Brier score and its exact decomposition from the ranges' partials.

    ``sum_wyy`` = sum_i w_i y_i^2; None means "0/1 labels" (then it is Y)
    and gives NaN for the Brier score if some range had other labels.
    """
    w = mean = m2 = 0.0
    for q in parts:  # Chan, Golub & LeVeque: merge weighted means and sums of squares
        if q["w"] <= 0:
            continue
        tot = w + q["w"]
        delta = q["mean"] - mean
        m2 += q["m2"] + delta * delta * w * q["w"] / tot
        mean += delta * q["w"] / tot
        w = tot
    pos = sum(q["y"] for q in parts)
    binary = all(q["binary"] for q in parts)
    if w <= 0:
        nan = math.nan
        return {"brier": nan, "reliability": nan, "resolution": nan, "uncertainty": nan,
                "n_distinct": 0}
    ybar = pos / w
    if sum_wyy is None or (binary and math.isnan(sum_wyy)):
        sum_wyy = pos if binary else math.nan
    unc = ybar * (1.0 - ybar) if binary else sum_wyy / w - ybar * ybar
    return {"brier": (sum(q["brier"] for q in parts) + sum_wyy) / w,
            "reliability": sum(q["rel"] for q in parts) / w,
            "resolution": m2 / w, "uncertainty": unc,
            "n_distinct": sum(q["n_distinct"] for q in parts)}


# -- adaptive (equal-mass) ECE ---------------------------------------------------

def adaptive_cuts(total: float, n_bins: int) -> np.ndarray:
    """Cut positions b W / B, b = 0..B, along the cumulative weight."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    cuts = np.arange(n_bins + 1, dtype=np.float64) * total / n_bins
    cuts[-1] = total
    return cuts


def adaptive_partials(t: DistinctTable, offset: float, cuts: np.ndarray) -> np.ndarray:
    """(B, 3) array [weight, sum overlap*p, sum overlap*ybar_p] of one range's share.

    ``offset`` is the total weight of the ranges below this one.
    """
    p, w, y = t.score, t.weight, t.positives
    cum = np.cumsum(w)
    pre = [np.concatenate(([0.0], np.cumsum(v))) for v in (w, w * p, y)]
    local = np.clip(cuts - offset, 0.0, cum[-1])
    k = np.searchsorted(cum, local, side="right")  # rows wholly below each cut
    inside = k < len(t)
    kk = np.minimum(k, len(t) - 1)
    part = np.where(inside, local - pre[0][k], 0.0)
    f = np.stack([pre[0][k] + part, pre[1][k] + part * p[kk],
                  pre[2][k] + part * (y[kk] / w[kk])], axis=1)
    return np.diff(f, axis=0)


def adaptive_from_bins(bins: np.ndarray) -> dict[str, Any]:
    """Adaptive ECE and MCE from the summed (B, 3) bin sums."""
    wb, pb, yb = bins[:, 0], bins[:, 1], bins[:, 2]
    total = float(wb.sum())
    full = wb > 0
    gap = np.abs(yb[full] - pb[full])
    return {"adaptive_ece": float(gap.sum() / total) if total > 0 else math.nan,
            "adaptive_mce": float(np.max(gap / wb[full])) if full.any() else math.nan,
            "adaptive_curve": {"prob_pred": pb[full] / wb[full], "prob_true": yb[full] / wb[full],
                               "weight": wb[full]}}


def _range_key(t: DistinctTable) -> float:
    return float(t.score[0])


def _adaptive_pass(map_ranges: MapRanges, firsts: list[float], totals: list[float],
                   n_bins: int) -> dict[str, Any]:
    offsets = dict(zip(firsts, np.concatenate(([0.0], np.cumsum(totals)[:-1])).tolist()))
    cuts = adaptive_cuts(float(np.sum(totals)), n_bins)
    parts: list[np.ndarray] = map_ranges(
        lambda t: adaptive_partials(t, offsets[_range_key(t)], cuts))
    # Summed in order from zero, as sum(parts) does (every part is (n_bins, 3)).
    return adaptive_from_bins(sum(parts, np.zeros((n_bins, 3))))


def _range_total(t: DistinctTable) -> tuple[float, float]:
    return _range_key(t), float(np.cumsum(t.weight)[-1])


def adaptive_ece(data: DistinctTable | MapRanges, n_bins: int = 10) -> dict[str, Any]:
    """Adaptive ECE/MCE and the equal-mass curve (two passes over the ranges)."""
    map_ranges = as_map_ranges(data)
    stats = map_ranges(_range_total)
    if not stats:
        raise ValueError("adaptive ECE of no rows")
    return _adaptive_pass(map_ranges, [s[0] for s in stats], [s[1] for s in stats], n_bins)


# -- everything at once, for evaluate ---------------------------------------------

def extra_range_partials(t: DistinctTable) -> dict[str, Any]:
    """Single-pass partials of one range: Murphy sums, smECE grid, range weight.

    Meant to ride along with :func:`distcal.core.metrics.range_partials`
    (the same ``ranges.map``), then :func:`extra_metrics` on the driver.
    """
    first, total = _range_total(t)
    return {"first": first, "wcum": total, "murphy": murphy_partials(t),
            "grid": sm.grid_partials(t)}


def extra_metrics(map_ranges: MapRanges, parts: list[dict[str, Any]], *, n_bins: int = 10,
                  sum_wyy: float | None = None) -> dict[str, Any]:
    """New metrics from :func:`extra_range_partials` of the ordered ranges.

    One more map over the ranges computes the adaptive bins (their cut
    positions need the ranges' offsets); the smECE search maps again only
    if it needs a grid finer than the default (smECE < 0.01).
    """
    if not parts:
        raise ValueError("metrics of no rows")
    out: dict[str, Any] = combine_murphy([q["murphy"] for q in parts], sum_wyy)
    out.update(_adaptive_pass(map_ranges, [q["first"] for q in parts],
                              [q["wcum"] for q in parts], n_bins))
    out["adaptive_bins"] = int(n_bins)
    smooth = sm.smooth_ece(map_ranges, grids=sm.combine_grid_partials([q["grid"] for q in parts]))
    out["smece"], out["smece_sigma"] = smooth["smece"], smooth["smece_sigma"]
    out["smooth_curve"] = sm.smooth_curve(smooth["grid"], smooth["smece_sigma"])
    return out


def calibration_metrics(data: DistinctTable | MapRanges, n_bins: int = 10,
                        sum_wyy: float | None = None) -> dict[str, Any]:
    """:func:`extra_metrics` over one table or a map over ordered ranges."""
    map_ranges = as_map_ranges(data)
    return extra_metrics(map_ranges, map_ranges(extra_range_partials), n_bins=n_bins,
                         sum_wyy=sum_wyy)


# -- from an EvaluationReport -----------------------------------------------------

def table_from_report(report: Any) -> DistinctTable:
    """The distinct-probability table, read back from a report's ROC curve.

    The ROC has one point per distinct probability (thresholds descending);
    the weighted positives and negatives at each are the steps of
    tpr * P and fpr * N, with P = tp + fn and N = fp + tn from the
    confusion. Exact up to rounding (sums rounded to integers when the
    weights were units and the values are within 1e-6 of integers).
    """
    roc = report.roc
    conf = report.confusion
    pos_total = conf["tp"] + conf["fn"]
    neg_total = conf["fp"] + conf["tn"]
    thr = roc["threshold"].to_numpy()[1:][::-1]
    tpr = np.nan_to_num(roc["tpr"].to_numpy(dtype=np.float64))
    fpr = np.nan_to_num(roc["fpr"].to_numpy(dtype=np.float64))
    pos = np.diff(tpr * pos_total)[::-1]
    neg = np.diff(fpr * neg_total)[::-1]
    units = report.n_rows == report.weight_total
    if units:
        for v in (pos, neg):
            r = np.rint(v)
            if np.all(np.abs(v - r) < 1e-6):
                v[:] = r
    pos, neg = np.maximum(pos, 0.0), np.maximum(neg, 0.0)
    w = pos + neg
    keep = w > 0
    thr, w, pos = thr[keep], w[keep], pos[keep]
    count = np.rint(w).astype(np.int64) if units else np.ones(w.shape[0], dtype=np.int64)
    binary = bool(units and np.all(pos == np.rint(pos)))
    return DistinctTable(thr.astype(np.float64), w, pos, count, pos, binary)


def metrics_from_report(report: Any) -> dict[str, Any]:
    """The new metrics of an :class:`~distcal.EvaluationReport` (engine-free).

    Uses the report's own fields when evaluate has been wired to fill them
    (``adaptive_ece``, ``smece``, ...), else recomputes from the
    distinct table read back from the ROC (:func:`table_from_report`). The
    Brier score is the report's, so the decomposition's label term uses it.
    """
    n_bins = max(len(report.bin_edges) - 1, 1)
    t = table_from_report(report)
    sum_wyy: float | None = None  # 0/1 labels (combine_murphy), or no finite Brier score
    if not t.binary and math.isfinite(report.brier):
        sum_brier = float(np.sum(t.weight * t.score ** 2 - 2.0 * t.score * t.positives))
        sum_wyy = report.brier * float(t.weight.sum()) - sum_brier
    out = calibration_metrics(t, n_bins=n_bins, sum_wyy=sum_wyy)
    for k in ("adaptive_ece", "adaptive_mce", "smece", "smece_sigma"):
        v = getattr(report, k, None)
        if v is not None:
            out[k] = v
    if getattr(report, "smooth_curve", None):  # (the table read back from the ROC has one
        out["smooth_curve"] = report.smooth_curve  # row per probability, not the rows)
    if not getattr(report, "roc_complete", True):  # a sampled ROC: the report's own values
        rel, res = report.reliability_exact, report.resolution_exact
        out.update(reliability=rel, resolution=res, uncertainty=report.brier - rel + res,
                   n_distinct=report.n_distinct, smooth_curve=report.smooth_curve)
    return out


# -- cost curve ------------------------------------------------------------------

def cost_curve(report: Any, cost_fp: float = 1.0, cost_fn: float = 1.0) -> dict[str, Any]:
    """Total cost c_fp FP(t) + c_fn FN(t) at every threshold of the ROC.

    Rule: positive iff p >= t. The thresholds are +inf (nothing positive)
    and the distinct probabilities descending; FP(t) and FN(t) are the
    weighted counts read back from the ROC (:func:`table_from_report`).
    ``best_threshold`` minimises the cost, the largest among equal costs
    (as :func:`distcal.optimal_threshold`).
    """
    t = table_from_report(report)
    tp, fp = desc_cumsums(t)
    fn = tp[-1] - tp
    cost = float(cost_fp) * fp + float(cost_fn) * fn
    threshold = np.concatenate(([np.inf], t.score[::-1]))
    best = float(cost.min())
    # Ties within distcal.core.threshold's TIE of the costs' mass (not of 1: weights of
    # 1e-15 made every cost a tie with nothing predicted positive).
    mass = abs(float(cost_fp)) * fp[-1] + abs(float(cost_fn)) * tp[-1]
    k = int(np.flatnonzero(cost <= best + TIE * mass)[0])
    return {"threshold": threshold, "cost": cost, "fp": fp, "fn": fn, "tp": tp,
            "best_threshold": float(threshold[k]), "best_cost": float(cost[k]),
            "best_fp": float(fp[k]), "best_fn": float(fn[k]),
            "cost_fp": float(cost_fp), "cost_fn": float(cost_fn)}
