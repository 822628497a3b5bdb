"""Per-segment evaluation sums: every segment's metrics of one range at once.

``distcal.evaluate(..., by=cols)`` range-partitions the valid rows on the
probability, as an unsegmented evaluation does, and pools each range by
(segment, probability) (:mod:`distcal.core.keyed`). Restricted to one
segment, the global ranges are that segment's own ordered ranges
(docs/segments.md), so the sums of :mod:`distcal.core.metrics` hold per
segment: with W, Y, N = W - Y a segment's weight, positives and negatives
and p its distinct probabilities,

* Brier score  (1/W) [ sum_p (W_p p^2 - 2 p Y_p) + sum_i w_i y_i^2 ]
* log loss     -(1/W) sum_p [ Y_p log p + (W_p - Y_p) log(1 - p) ], p clipped to
  [eps, 1 - eps] (scikit-learn)
* ECE = sum_b (W_b / W) |Y_b / W_b - (sum w p)_b / W_b| over the report's bins,
  MCE the largest such gap
* AUC = (sum_r pairs_r + Y_r N_{<r}) / (Y N), where pairs_r counts the
  segment's (positive, negative) pairs inside range r (ties one half) and
  N_{<r} its negative weight in the ranges below r (Mann-Whitney).

:func:`segment_partials` computes these sums for every segment of a range
in array operations (the pairs alone loop over segments, one cumsum each,
so that no segment's count is the difference of two large prefix sums);
:func:`combine_segment_partials` adds the ranges' sums per segment key in
score order on the driver. What reaches the driver is O(segments x bins)
per range, whatever the number of rows or distinct probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .bins import bin_ids
from .keyed import KeyedTable
from .metrics import EPS, wilson_interval

__all__ = ["SegmentEvalPartials", "segment_partials", "SegmentEvaluation",
           "combine_segment_partials", "SEGMENT_METRICS"]

#: The metric columns of the per-segment table, after the key columns.
SEGMENT_METRICS = ("n_rows", "weight", "base_rate", "mean_prob", "log_loss", "brier", "ece",
                   "mce", "auc")


@dataclass(frozen=True)
class SegmentEvalPartials:
    """One range's sums per segment (rows of every array: the segments of ``keys``).

    ``bins`` is (segments, 3, n_bins): weight, sum w p, positives per bin.
    """

    keys: list[tuple[Any, ...]]
    n_rows: np.ndarray
    w: np.ndarray
    y: np.ndarray
    wp: np.ndarray
    wyy: np.ndarray
    brier: np.ndarray
    log: np.ndarray
    pairs: np.ndarray
    bins: np.ndarray


def segment_partials(segs: KeyedTable, edges: np.ndarray) -> SegmentEvalPartials:
    """The evaluation sums of every segment of one range (module docstring).

    ``edges``: the report's bin edges (the same for every segment).
    """
    t = segs.table
    m = len(segs)
    nb = edges.shape[0] - 1
    if m == 0 or len(t) == 0:
        z = np.zeros(0)
        return SegmentEvalPartials([], np.zeros(0, np.int64), z, z, z, z, z, z, z,
                                   np.zeros((0, 3, nb)))
    p, w, y = t.score, t.weight, t.positives
    n = w - y
    first = segs.starts[:-1]
    seg = np.repeat(np.arange(m), np.diff(segs.starts))

    def per(v: np.ndarray) -> np.ndarray:
        return np.add.reduceat(v, first)

    pc = np.clip(p, EPS, 1.0 - EPS)
    # sum w y^2: y for 0/1 labels (binary segments), else what the range pooled
    wyy = per(segs.wyy) if segs.wyy is not None else per(y)
    if segs.wyy is None and not bool(np.all(segs.binary)):
        wyy = np.where(segs.binary, wyy, np.nan)
    cell = seg * nb + bin_ids(edges, p)
    bins = np.stack([np.bincount(cell, weights=v, minlength=m * nb).reshape(m, nb)
                     for v in (w, w * p, y)], axis=1)
    pairs = np.empty(m)
    starts = segs.starts.tolist()
    for i in range(m):  # Mann-Whitney pairs inside the range, ties counting one half
        a, b = starts[i], starts[i + 1]
        ni = n[a:b]
        pairs[i] = float(np.sum(y[a:b] * (np.cumsum(ni) - ni + 0.5 * ni)))
    return SegmentEvalPartials(list(segs.keys), per(t.count).astype(np.int64), per(w), per(y),
                               per(w * p), wyy, per(w * p * p - 2.0 * p * y),
                               per(y * np.log(pc) + n * np.log1p(-pc)), pairs, bins)


@dataclass
class SegmentEvaluation:
    """Per-segment metrics (``table``) and each segment's calibration-curve sums."""

    by: list[str]
    table: pd.DataFrame
    keys: list[tuple[Any, ...]]
    bins: np.ndarray  # (segments, 3, n_bins) in the order of ``keys``

    def curve(self, key: tuple[Any, ...], confidence: float = 0.95) -> pd.DataFrame:
        """The calibration curve of one segment, as ``EvaluationReport.calibration_curve``."""
        try:
            i = self.keys.index(key)
        except ValueError:
            raise KeyError(f"no segment {key!r}") from None
        bw, bwp, bwy = self.bins[i]
        full = bw > 0
        pred, true = bwp[full] / bw[full], bwy[full] / bw[full]
        ci = np.array([wilson_interval(r * k, k, confidence)
                       for r, k in zip(true, bw[full])]).reshape(-1, 2)
        return pd.DataFrame({"prob_pred": pred, "prob_true": true, "weight": bw[full],
                             "ci_low": ci[:, 0], "ci_high": ci[:, 1]})


def combine_segment_partials(parts: list[SegmentEvalPartials], by: list[str]
                             ) -> SegmentEvaluation:
    """Every segment's metrics from the ranges' sums, the ranges in ascending order.

    The table has the ``by`` columns and :data:`SEGMENT_METRICS`, one row per
    segment, sorted by ECE descending (the worst calibrated first; ties in
    key order). AUC is NaN for a segment with a single class.
    """
    ids: dict[tuple[Any, ...], int] = {}
    locals_ = [np.fromiter((ids.setdefault(k, len(ids)) for k in q.keys), dtype=np.int64,
                           count=len(q.keys)) for q in parts]
    keys = list(ids)
    m = len(keys)
    nb = parts[0].bins.shape[2] if parts else 0
    tot = {k: np.zeros(m) for k in ("w", "y", "wp", "wyy", "brier", "log", "pairs", "neg")}
    n_rows = np.zeros(m, np.int64)
    bins = np.zeros((m, 3, nb))
    for q, loc in zip(parts, locals_):  # ascending ranges: a segment's own order
        n_rows[loc] += q.n_rows
        for k in ("w", "y", "wp", "wyy", "brier", "log"):
            tot[k][loc] += getattr(q, k)
        # a positive of this range lies above every negative of the ranges below
        tot["pairs"][loc] += q.pairs + q.y * tot["neg"][loc]
        tot["neg"][loc] += q.w - q.y
        bins[loc] += q.bins
    w, y = tot["w"], tot["y"]
    neg = tot["neg"]
    bw, bwp, bwy = bins[:, 0], bins[:, 1], bins[:, 2]
    full = bw > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.where(full, np.abs(bwy / np.where(full, bw, 1.0)
                                    - bwp / np.where(full, bw, 1.0)), 0.0)
        ece = np.sum((bw / w[:, None]) * gap, axis=1)
        auc = np.where((y > 0) & (neg > 0), tot["pairs"] / (y * neg), math.nan)
    table = pd.DataFrame([k for k in keys], columns=by) if m else pd.DataFrame(columns=by)
    table = table.assign(n_rows=n_rows, weight=w, base_rate=y / w, mean_prob=tot["wp"] / w,
                         log_loss=-tot["log"] / w, brier=(tot["brier"] + tot["wyy"]) / w,
                         ece=ece, mce=np.max(gap, axis=1, initial=0.0), auc=auc)
    try:
        order = sorted(range(m), key=lambda i: keys[i])
    except TypeError:  # keys of mixed types: the order of first appearance
        order = list(range(m))
    table = table.iloc[order]
    table = table.sort_values("ece", ascending=False, kind="stable").reset_index(drop=True)
    return SegmentEvaluation(list(by), table, keys, bins)
