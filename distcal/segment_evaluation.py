"""Per-segment evaluation and thresholds: ``evaluate`` and ``optimal_threshold`` with ``by=``.

Both open the per-segment ranges of a segmented fit (one range shuffle on
the probability or score, each range pooled by value and by (segment,
value): :mod:`distcal.core.segments`), so one job serves the global result
and every segment, however many segments there are (docs/segments.md).

* Evaluation: the global :class:`~distcal.evaluation.EvaluationReport` is
  computed exactly as without ``by`` (:func:`report_from_ranges`); the
  per-segment sums (:mod:`distcal.core.segment_metrics`) ride along with its
  first pass over the ranges, so the segments cost no pass of their own.
* Thresholds: each range sends the threshold summary of its global table
  and of every segment's table (:mod:`distcal.core.threshold`); the driver
  merges each segment's summaries in score order, which is exact because a
  segment's rows of the ordered ranges are that segment's ordered ranges.

Rows with a null in a ``by`` column belong to no segment; they count in the
global results only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .core.bins import bin_edges
from .core.distinct import DistinctTable
from .core.segment_metrics import SegmentEvalPartials, combine_segment_partials, segment_partials
from .core.segments import SegmentTables, gather_segments, summarise_range
from .core.threshold import EMPTY, SegmentSummary, merge_segments
from .logs import log, phase

__all__ = ["evaluate_by", "threshold_by", "check_segment_by"]


def check_segment_by(by: Any, columns: dict[str, str | None]) -> list[str]:
    """The ``by`` columns as a list, checked before any read (as ``fit``'s)."""
    from .keyed_fit import check_by

    return check_by(by, columns, 0.0)


class _FirstPassWithSegments:
    """The segment ranges as plain ``Ranges``, whose first ``map`` also sums every segment.

    :func:`~distcal.evaluation.report_from_ranges` maps over the ranges a few
    times; its first map (the metrics' partials) runs as one ``map_segments``
    that returns both the global partials and the segments' sums.
    """

    def __init__(self, ranges: Any, segment_fn: Callable[[SegmentTables], Any]):
        self._ranges = ranges
        self._segment_fn = segment_fn
        self.segment_parts: list[Any] | None = None

    def __getattr__(self, name: str) -> Any:  # n_rows, dropped_rows, sum_wyy, ...
        return getattr(self._ranges, name)

    def map(self, fn: Callable[[DistinctTable], Any]) -> list[Any]:
        if self.segment_parts is not None:
            return list(self._ranges.map(fn))
        seg_fn = self._segment_fn
        both = self._ranges.map_segments(lambda t, segs: (fn(t), seg_fn(segs)))
        self.segment_parts = [b[1] for b in both]
        return [b[0] for b in both]


def evaluate_by(impl: Any, data: Any, columns: dict[str, str | None], by: list[str], *,
                report_from_ranges: Callable[..., Any], prob_col: str, n_bins: int,
                strategy: str, bins: Any, threshold: float, confidence: float,
                roc_points: int | None, on_invalid: str, engine_opts: dict[str, Any]) -> Any:
    """The global report with ``segments`` (one row per segment) and the segments' curves.

    ``report_from_ranges``: what :func:`distcal.evaluate` runs over an
    unsegmented input's ranges (passed in: this module sits below it).
    """
    with impl.open_segment_ranges(data, columns, by, on_invalid=on_invalid,
                                  passes=4, **engine_opts) as ranges:
        with phase("evaluate by %s", by):
            # The bins first (the same pass report_from_ranges would make), so
            # that the segments' sums can ride along with the metrics' pass.
            edges = (np.asarray(bins, dtype=np.float64) if bins is not None
                     else bin_edges(ranges.map, n_bins, strategy, rows_for_bins=n_bins > 10))

            def seg_fn(segs: SegmentTables) -> SegmentEvalPartials:
                return segment_partials(segs, edges)

            first = _FirstPassWithSegments(ranges, seg_fn)
            report = report_from_ranges(first, prob_col=prob_col, n_bins=n_bins,
                                        strategy=strategy, bins=edges, threshold=threshold,
                                        confidence=confidence, roc_points=roc_points)
            seg_eval = combine_segment_partials(first.segment_parts or [], by)
    log.info("evaluate by %s: %d segments", by, len(seg_eval.table))
    report.attach_segments(seg_eval)
    return report


def _threshold_table(by: list[str], segs: list[Any], results: list[Any]) -> pd.DataFrame:
    rows = [(*s.key, s.n_rows, s.weight, r.threshold, r.cost, r.fp, r.fn, r.tp, r.tn,
             r.predict_none) for s, r in zip(segs, results)]
    return pd.DataFrame(rows, columns=[*by, "n_rows", "weight", "threshold", "cost", "fp",
                                       "fn", "tp", "tn", "predict_none"])


def threshold_by(impl: Any, data: Any, columns: dict[str, str | None], by: list[str], *,
                 summary: Callable[[DistinctTable], SegmentSummary],
                 result: Callable[[SegmentSummary, int, int], Any], on_invalid: str,
                 engine_opts: dict[str, Any]) -> Any:
    """The global threshold result with ``segments``: one pass for every segment.

    ``summary`` turns a distinct-score table into its threshold summary and
    ``result(summary, n_rows, dropped_rows)`` a merged summary into a
    :class:`~distcal.threshold.ThresholdResult`, as without ``by``.
    """
    with impl.open_segment_ranges(data, columns, by, on_invalid=on_invalid, passes=1,
                                  **engine_opts) as ranges:
        with phase("threshold by %s", by):
            summaries = ranges.map_segments(
                lambda t, segs: summarise_range(t, segs, summary, summary))
    global_parts, segs = gather_segments(summaries)
    total = EMPTY
    for part in global_parts:
        total = merge_segments(total, part)
    glob = result(total, ranges.n_rows, ranges.dropped_rows)
    results = []
    for s in segs:
        merged = EMPTY
        for part in s.parts:  # the segment's own ranges, ascending
            merged = merge_segments(merged, part)
        results.append(result(merged, s.n_rows, 0))
    log.info("threshold by %s: %d segments", by, len(segs))
    return glob, _threshold_table(by, segs, results)
