"""Per-segment evaluation and thresholds: ``evaluate`` and ``optimal_threshold`` with ``by=``.

Both open the keyed rows of the input (:meth:`~distcal.engines.base.Engine.open_keyed`,
one key per segment plus the global key: :mod:`distcal.core.keyed`), so one
range shuffle on the probability (score) serves the global result and every
segment, however many segments there are (docs/segments.md). Restricted to
one key, the ranges are that key's own ordered ranges.

* Evaluation: the global :class:`~distcal.evaluation.EvaluationReport` is
  computed exactly as without ``by`` over the global key's tables
  (:class:`GlobalRanges`); the per-segment sums
  (:mod:`distcal.core.segment_metrics`) ride along with its first pass over
  the ranges, so the segments cost no pass of their own.
* Thresholds: each range sends the threshold summary of every key's table
  (:mod:`distcal.core.threshold`); the driver merges each key's summaries in
  score order.

Rows with a null in a ``by`` column belong to no segment; they count in the
global results only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .core.bins import bin_edges
from .core.calibration_tests import calibration_test_partials
from .core.distinct import DistinctTable
from .core.keyed import GLOBAL, KeyedTable, KeySpec, global_ww, split_global
from .core.segment_metrics import SegmentEvalPartials, combine_segment_partials, segment_partials
from .core.threshold import EMPTY, SegmentSummary, merge_segments
from .logs import log, phase

__all__ = ["evaluate_by", "threshold_by", "check_segment_by", "GlobalRanges"]


def check_segment_by(by: Any, columns: dict[str, str | None]) -> list[str]:
    """The ``by`` columns as a list, checked before any read (as ``fit``'s)."""
    from .keyed_fit import check_by

    return check_by(by, columns, 0.0)


class _OnGlobal:
    """``fn`` of a range's global table, its sum of w y^2, and ``segment_fn`` of its segments."""

    def __init__(self, fn: Callable[[DistinctTable], Any],
                 segment_fn: Callable[[KeyedTable], Any] | None):
        self.fn, self.segment_fn = fn, segment_fn

    def __call__(self, part: KeyedTable) -> tuple[Any, float, Any, Any]:
        table, wyy, segments = split_global(part)
        return (self.fn(table), wyy,
                None if self.segment_fn is None else self.segment_fn(segments),
                calibration_test_partials(table, global_ww(part)))


class GlobalRanges:
    """The keyed ranges of a binary score with segments, as the plain ``Ranges`` of all rows.

    ``map(fn)`` maps ``fn`` over each range's global table; the first map
    also runs ``segment_fn`` on the range's segments (kept in
    ``segment_parts``) and adds up ``sum_wyy`` (the Brier score's label term)
    and ``test_sums`` (Spiegelhalter's and CITL's sums,
    :mod:`distcal.core.calibration_tests`).
    """

    def __init__(self, keyed: Any, segment_fn: Callable[[KeyedTable], Any] | None = None):
        self._keyed = keyed
        self._segment_fn = segment_fn
        self.segment_parts: list[Any] | None = None
        self.sum_wyy = float("nan")
        self.test_sums = np.full(4, np.nan)

    @property
    def n_rows(self) -> int:
        return int(self._keyed.n_rows)

    @property
    def weight_total(self) -> float:
        return float(self._keyed.weight_total)

    @property
    def dropped_rows(self) -> int:
        return int(self._keyed.dropped_rows)

    def map(self, fn: Callable[[DistinctTable], Any]) -> list[Any]:
        first = self.segment_parts is None
        got = self._keyed.map(_OnGlobal(fn, self._segment_fn if first else None))
        if first:
            self.segment_parts = [g[2] for g in got]
            self.sum_wyy = float(sum(g[1] for g in got))
            self.test_sums = np.sum([g[3] for g in got], axis=0) if got else np.zeros(4)
        return [g[0] for g in got]


def evaluate_by(impl: Any, data: Any, columns: dict[str, str | None], by: list[str], *,
                report_from_ranges: Callable[..., Any], prob_col: str, n_bins: int,
                strategy: str, bins: Any, threshold: float, confidence: float,
                roc_points: int | None, on_invalid: str, engine_opts: dict[str, Any],
                interval_cols: tuple[str, str] | None = None) -> Any:
    """The global report with ``segments`` (one row per segment) and the segments' curves.

    ``report_from_ranges``: what :func:`distcal.evaluate` runs over an
    unsegmented input's ranges (passed in: this module sits below it), and
    with ``interval_cols`` the widths of the global report's rows.
    """
    spec = KeySpec(score_col=prob_col, label_col=str(columns["label"]),
                   weight_col=columns.get("weight"), by=tuple(by), probabilities=True,
                   interval_cols=interval_cols)
    with impl.open_keyed(data, spec, on_invalid=on_invalid, passes=4,
                         **engine_opts) as keyed:
        with phase("evaluate by %s", by):
            # The bins first (the same pass report_from_ranges would make), so
            # that the segments' sums can ride along with the metrics' pass.
            ranges = GlobalRanges(keyed)
            edges = (np.asarray(bins, dtype=np.float64) if bins is not None
                     else bin_edges(ranges.map, n_bins, strategy, rows_for_bins=n_bins > 10))

            def seg_fn(segs: KeyedTable) -> SegmentEvalPartials:
                return segment_partials(segs, edges)

            ranges = GlobalRanges(keyed, seg_fn)
            report = report_from_ranges(ranges, prob_col=prob_col, n_bins=n_bins,
                                        strategy=strategy, bins=edges, threshold=threshold,
                                        confidence=confidence, roc_points=roc_points)
            seg_eval = combine_segment_partials(ranges.segment_parts or [], by)
            if interval_cols is not None:
                from .core.interval_widths import width_summary

                report.interval_widths = width_summary(keyed.interval_widths, interval_cols)
    log.info("evaluate by %s: %d segments", by, len(seg_eval.table))
    report.attach_segments(seg_eval)
    return report


class _Summaries:
    """Every key's ``summary`` in one range, with its rows and weight."""

    def __init__(self, summary: Callable[[DistinctTable], SegmentSummary]):
        self.summary = summary

    def __call__(self, part: KeyedTable) -> list[tuple[Any, int, float, SegmentSummary]]:
        n_rows, weight = part.key_totals()
        return [(key[0], int(n), float(w), self.summary(part.key_table(i)))
                for i, (key, n, w) in enumerate(zip(part.keys, n_rows.tolist(),
                                                    weight.tolist()))]


def threshold_by(impl: Any, data: Any, columns: dict[str, str | None], by: list[str], *,
                 summary: Callable[[DistinctTable], SegmentSummary],
                 result: Callable[[SegmentSummary, int, int], Any], on_invalid: str,
                 engine_opts: dict[str, Any], score_index: int | None = None) -> Any:
    """The global threshold result and the table of segments (``by``; may be empty):
    one pass for every segment.

    ``summary`` turns a distinct-score table into its threshold summary and
    ``result(summary, n_rows, dropped_rows)`` a merged summary into a
    :class:`~distcal.threshold.ThresholdResult`, as without ``by``.
    """
    loss = columns.get("loss")
    spec = KeySpec(score_col=str(columns["score"]),
                   label_col=str(loss if loss is not None else columns["label"]),
                   weight_col=columns.get("weight"), by=tuple(by),
                   target="loss" if loss is not None else "label", score_index=score_index)
    with impl.open_keyed(data, spec, on_invalid=on_invalid, passes=1,
                         **engine_opts) as keyed:
        with phase("threshold by %s", by):
            ranges = keyed.map(_Summaries(summary))
        n_rows, dropped = keyed.n_rows, keyed.dropped_rows
    merged: dict[Any, list[Any]] = {}
    for part in ranges:  # ascending ranges: each key's own order
        for segment, n, w, s in part:
            entry = merged.setdefault(segment, [0, 0.0, EMPTY])
            entry[0] += n
            entry[1] += w
            entry[2] = merge_segments(entry[2], s)
    glob = result(merged.pop(GLOBAL, [0, 0.0, EMPTY])[2], n_rows, dropped)
    keys = list(merged)
    try:
        keys.sort()
    except TypeError:  # keys of mixed types: keep the order of first appearance
        pass
    rows = []
    for key in keys:
        n, w, s = merged[key]
        r = result(s, n, 0)
        rows.append((*key, n, w, r.threshold, r.cost, r.fp, r.fn, r.tp, r.tn, r.predict_none))
    log.info("threshold by %s: %d segments", by, len(keys))
    return glob, pd.DataFrame(rows, columns=[*by, "n_rows", "weight", "threshold", "cost",
                                             "fp", "fn", "tp", "tn", "predict_none"])
