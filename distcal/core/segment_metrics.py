"""Evaluation sums per key: the global key's and every segment's metrics of one range at once.

``distcal.evaluate`` range-partitions the valid rows on the probability and
pools each range by (key, probability) (:mod:`distcal.core.keyed`): the
global key of all rows and, with ``by=cols``, one key per segment.
Restricted to one key, the global ranges are that key's own ordered ranges
(docs/segments.md), so the sums of :mod:`distcal.core.metrics` hold per
key: with W, Y, N = W - Y a key's weight, positives and negatives and p its
distinct probabilities,

* Brier score  (1/W) [ sum_p (W_p p^2 - 2 p Y_p) + sum_i w_i y_i^2 ]
* log loss     -(1/W) sum_p [ Y_p log p + (W_p - Y_p) log(1 - p) ], p clipped to
  [eps, 1 - eps], eps float64's machine epsilon whatever the input's type
  (scikit-learn's for float64 input; it clips float32 input at float32's)
* ECE = sum_b (W_b / W) |Y_b / W_b - (sum w p)_b / W_b| over the report's bins,
  MCE the largest such gap
* AUC = (sum_r pairs_r + Y_r N_{<r}) / (Y N), where pairs_r counts the
  key's (positive, negative) pairs inside range r (ties one half) and
  N_{<r} its negative weight in the ranges below r (Mann-Whitney).

:func:`segment_partials` computes these sums for every key of a range
in array operations (the pairs alone loop over keys, one cumsum each,
so that no key's count is the difference of two large prefix sums);
:func:`combine_segment_partials` adds the ranges' sums per key in
score order on the driver. What reaches the driver is O(keys x bins)
per range, whatever the number of rows or distinct probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import sums_overflow, sums_underflow
from .bins import bin_ids
from .keyed import GLOBAL, KeyedTable, in_key_order
from .metrics import EPS, wilson_interval

__all__ = ["SegmentEvalPartials", "segment_partials", "SegmentEvaluation",
           "combine_segment_partials", "curve_frame", "SEGMENT_METRICS"]

#: The metric columns of the per-segment table, after the key columns.
SEGMENT_METRICS = ("n_rows", "weight", "base_rate", "mean_prob", "log_loss", "brier", "ece",
                   "mce", "auc")


@dataclass(frozen=True)
class SegmentEvalPartials:
    """One range's sums per key (rows of every array: the keys of ``keys``).

    ``keys``: the segment part of each key (:data:`~distcal.core.keyed.GLOBAL`
    for the global key); ``bins`` is (keys, 3, n_bins): weight, sum w p,
    positives per bin.
    """

    keys: list[Any]
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
    """The evaluation sums of every key of one range (module docstring).

    ``edges``: the report's bin edges (the same for every key).
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
    # sum w y^2: y for 0/1 labels (binary keys), else what the range pooled
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
        with np.errstate(over="ignore"):  # inf (weights from ~1e154): evaluate refuses it
            pairs[i] = float(np.sum(y[a:b] * (np.cumsum(ni) - ni + 0.5 * ni)))
    return SegmentEvalPartials([k[0] for k in segs.keys], per(t.count).astype(np.int64), per(w),
                               per(y), per(w * p), wyy, per(w * p * p - 2.0 * p * y),
                               per(y * np.log(pc) + n * np.log1p(-pc)), pairs, bins)


def curve_frame(bins: np.ndarray, confidence: float | None = 0.95) -> pd.DataFrame:
    """The calibration curve of one key's bin sums (3, n_bins): weight, sum w p, positives.

    One row per non-empty bin: ``prob_pred``, ``prob_true``, ``weight`` and,
    unless ``confidence`` is None, the Wilson interval of the observed rate
    (``ci_low``, ``ci_high``; the weight as the count).
    """
    bw, bwp, bwy = bins
    full = bw > 0
    out = {"prob_pred": bwp[full] / bw[full], "prob_true": bwy[full] / bw[full],
           "weight": bw[full]}
    if confidence is not None:
        ci = np.array([wilson_interval(r * k, k, confidence)
                       for r, k in zip(out["prob_true"], out["weight"])]).reshape(-1, 2)
        out.update(ci_low=ci[:, 0], ci_high=ci[:, 1])
    return pd.DataFrame(out)


@dataclass
class SegmentEvaluation:
    """Every key's sums added over the ranges and its metrics (arrays in ``keys`` order).

    ``neg`` the negative weight, ``bins`` (keys, 3, n_bins) as in
    :class:`SegmentEvalPartials`; ``metrics`` holds :data:`SEGMENT_METRICS`.
    """

    keys: list[Any]
    y: np.ndarray
    neg: np.ndarray
    wyy: np.ndarray
    bins: np.ndarray
    metrics: dict[str, np.ndarray]

    def index(self, key: Any) -> int:
        """The position of ``key`` (a ``KeyError`` if no row has it)."""
        try:
            return self.keys.index(key)
        except ValueError:
            raise KeyError(f"no segment {key!r}") from None

    def curve(self, key: Any, confidence: float = 0.95) -> pd.DataFrame:
        """The calibration curve of one key, as ``EvaluationReport.calibration_curve``."""
        return curve_frame(self.bins[self.index(key)], confidence)

    def table(self, by: list[str]) -> pd.DataFrame:
        """The ``by`` columns and :data:`SEGMENT_METRICS`, one row per segment (not the
        global key), sorted by ECE descending (the worst calibrated first; ties in key
        order)."""
        rows = in_key_order((i for i, k in enumerate(self.keys) if k is not GLOBAL),
                            key=lambda i: self.keys[i])
        table = pd.DataFrame([self.keys[i] for i in rows], columns=by) if rows \
            else pd.DataFrame(columns=by)
        table = table.assign(**{c: self.metrics[c][rows] for c in SEGMENT_METRICS})
        # ECEs equal in exact arithmetic differ in their last bits by the order of the sums
        # (per engine): compared to 12 decimals, so such ties keep the key order everywhere.
        return table.sort_values("ece", ascending=False, kind="stable",
                                 key=lambda ece: ece.round(12)).reset_index(drop=True)


def combine_segment_partials(parts: list[SegmentEvalPartials],
                             weight_col: str | None = None) -> SegmentEvaluation:
    """Every key's sums and metrics from the ranges' sums, the ranges in ascending order.

    AUC is NaN for a key with a single class. ``weight_col``: named in the
    :class:`~distcal.DataError` of sums that overflow.
    """
    ids: dict[Any, int] = {}
    locals_ = [np.fromiter((ids.setdefault(k, len(ids)) for k in q.keys), dtype=np.int64,
                           count=len(q.keys)) for q in parts]
    keys = list(ids)
    m = len(keys)
    nb = parts[0].bins.shape[2] if parts else 0
    tot = {k: np.zeros(m) for k in ("w", "y", "wp", "wyy", "brier", "log", "pairs", "neg")}
    n_rows = np.zeros(m, np.int64)
    bins = np.zeros((m, 3, nb))
    # weights near 1e308 overflow to inf here; the caller refuses them
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for q, loc in zip(parts, locals_):  # ascending ranges: a key's own order
            n_rows[loc] += q.n_rows
            for k in ("w", "y", "wp", "wyy", "brier", "log"):
                tot[k][loc] += getattr(q, k)
            # a positive of this range lies above every negative of the ranges below
            tot["pairs"][loc] += q.pairs + q.y * tot["neg"][loc]
            tot["neg"][loc] += q.w - q.y
            bins[loc] += q.bins
        w, y, neg = tot["w"], tot["y"], tot["neg"]
        bw, bwp, bwy = bins[:, 0], bins[:, 1], bins[:, 2]
        full = bw > 0
        safe = np.where(full, bw, 1.0)
        gap = np.where(full, np.abs(bwy / safe - bwp / safe), 0.0)
        ece = np.sum((bw / w[:, None]) * gap, axis=1)
        if np.isinf(tot["pairs"]).any():  # products of two weights, from ~1e154 on
            raise sums_overflow("weights (their products)", weight_col)
        # ... or below 2^-1022, where they lose their digits: a mean weight below 2^-500
        if np.any((w > 0) & (w < n_rows * 2.0 ** -500)):
            raise sums_underflow()
        with np.errstate(invalid="ignore", divide="ignore"):  # (y * neg overflows sooner)
            auc = np.where((y > 0) & (neg > 0), tot["pairs"] / y / neg, math.nan)
        metrics = {"n_rows": n_rows, "weight": w, "base_rate": y / w, "mean_prob": tot["wp"] / w,
                   "log_loss": -tot["log"] / w, "brier": (tot["brier"] + tot["wyy"]) / w,
                   "ece": ece, "mce": np.max(gap, axis=1, initial=0.0), "auc": auc}
    return SegmentEvaluation(keys, y, neg, tot["wyy"], bins, metrics)
