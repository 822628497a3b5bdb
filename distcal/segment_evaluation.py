"""Per-segment thresholds: ``optimal_threshold`` with ``by=`` (and without: no segment).

It opens the keyed rows of the input (:meth:`~distcal.engines.base.Engine.open_keyed`,
one key per segment plus the global key: :mod:`distcal.core.keyed`), so one
range shuffle on the score serves the global result and every segment,
however many segments there are (docs/segments.md). Restricted to one key,
the ranges are that key's own ordered ranges: each range sends the
threshold summary of every key's table (:mod:`distcal.core.threshold`); the
driver merges each key's summaries in score order. (``evaluate`` with
``by=`` works the same way: :func:`distcal.evaluation.report_from_ranges`.)

Rows with a null in a ``by`` column belong to no segment; they count in the
global results only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from .core.distinct import DistinctTable
from .core.keyed import GLOBAL, KeyedTable, KeySpec
from .core.threshold import EMPTY, SegmentSummary, merge_segments
from .logs import log, phase

__all__ = ["threshold_by", "check_segment_by"]


def check_segment_by(by: Any, columns: dict[str, str | None]) -> list[str]:
    """The ``by`` columns as a list, checked before any read (as ``fit``'s)."""
    from .keyed_fit import check_by

    return check_by(by, columns, 0.0)


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
