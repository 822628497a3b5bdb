"""Per-segment summaries of one score range, for evaluation and thresholds by segment.

``distcal.evaluate(..., by=cols)`` and ``distcal.optimal_threshold(..., by=cols)``
range-partition the rows on the probability (score) alone; within a range
the rows are pooled by score (the global table) and by (segment, score)
(:func:`pool_range`, the keyed pooling of :mod:`distcal.core.keyed` with
segment tuples as keys). Restricted to one segment, the ranges are that
segment's ordered ranges, so every per-range summary merges per segment on
the driver (:func:`gather_segments`). Fits go through the keyed pass
(:mod:`distcal.keyed_fit`).

Null in any ``by`` column: the row forms no segment but counts in the
global table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .distinct import DistinctTable, pool_ties
from .keyed import KeyedTable, factorize_keys, pool_keyed
from .validate import RowChecker

__all__ = ["SegmentTables", "RangeSummary", "summarise_range", "gather_segments",
           "check_rows", "pool_range", "SegmentParts", "value_roles"]

# A range's segments: a keyed table whose keys are the segment tuples.
SegmentTables = KeyedTable


@dataclass(frozen=True)
class RangeSummary:
    """What one range sends to the driver: the global result and one per segment.

    ``n_rows`` and ``weight`` are per segment (in the order of ``keys``),
    as is ``results``.
    """

    global_result: Any
    keys: list[tuple[Any, ...]]
    n_rows: np.ndarray
    weight: np.ndarray
    results: list[Any]


def summarise_range(table: DistinctTable, segments: SegmentTables,
                    global_fn: Callable[[DistinctTable], Any] | None,
                    segment_fn: Callable[[DistinctTable], Any]) -> RangeSummary:
    """Apply ``global_fn`` to the range's table and ``segment_fn`` to each segment's."""
    t = segments.table
    starts = segments.starts
    if len(segments):
        n_rows = np.add.reduceat(t.count, starts[:-1]) if len(t) else np.zeros(0, np.int64)
        weight = np.add.reduceat(t.weight, starts[:-1]) if len(t) else np.zeros(0)
    else:
        n_rows, weight = np.zeros(0, np.int64), np.zeros(0)
    results = [segment_fn(segments.key_table(i)) for i in range(len(segments))]
    return RangeSummary(global_fn(table) if global_fn is not None and len(table) else None,
                        segments.keys, n_rows, weight, results)


@dataclass
class SegmentParts:
    """One segment's summaries gathered from the ranges, in ascending score order."""

    key: tuple[Any, ...]
    n_rows: int
    weight: float
    parts: list[Any]


def gather_segments(summaries: list[RangeSummary]) -> tuple[list[Any], list[SegmentParts]]:
    """The global results and every segment's parts, from the ranges in score order.

    A segment's parts are that segment's own ordered ranges (module
    docstring). Segments come sorted by key when the keys are comparable,
    else in order of first appearance.
    """
    by_key: dict[tuple[Any, ...], SegmentParts] = {}
    global_parts = []
    for s in summaries:
        if s.global_result is not None:
            global_parts.append(s.global_result)
        for key, n, w, r in zip(s.keys, s.n_rows.tolist(), s.weight.tolist(), s.results):
            entry = by_key.get(key)
            if entry is None:
                by_key[key] = SegmentParts(key, int(n), float(w), [r])
            else:
                entry.n_rows += int(n)
                entry.weight += float(w)
                entry.parts.append(r)
    segments = list(by_key.values())
    try:
        segments.sort(key=lambda e: e.key)
    except TypeError:  # keys of mixed types: keep the order of first appearance
        pass
    return global_parts, segments


def check_rows(arrays: dict[str, np.ndarray], text: dict[str, np.ndarray],
               columns: dict[str, str], finite_scores: bool = False
               ) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Rows to keep (valid, weight > 0; None: all) and the counts the driver adds up.

    The rules and counts of :func:`distcal.core.partition.pool_valid_rows`;
    the caller filters its key columns with the same mask.
    """
    checker = RowChecker(dict(columns), finite_scores=finite_scores)
    keep = checker.check(arrays, text)
    w = arrays.get("weight")
    if w is not None:
        positive = w > 0
        keep = positive if keep is None else keep & positive
    n = next(iter(arrays.values())).shape[0]
    kept = n if keep is None else int(np.count_nonzero(keep))
    weight_total = float(kept) if w is None else float(w[keep].sum() if keep is not None
                                                       else w.sum())
    sum_wyy = 0.0
    if "prob" in columns:  # the Brier score's label term, as pool_valid_rows gathers it
        y = arrays["label"] if keep is None else arrays["label"][keep]
        wk = None if w is None else (w if keep is None else w[keep])
        sum_wyy = float(np.dot(y * wk, y) if wk is not None else np.dot(y, y))
    stats = {"problems": checker.problems, "rows": checker.rows_seen,
             "invalid": checker.rows_invalid, "n_rows": kept, "weight_total": weight_total,
             "sum_wyy": sum_wyy}
    return keep, stats


def value_roles(columns: dict[str, Any]) -> tuple[str, str]:
    """The roles of the ordered value and of the target: ("score" or "prob", "label" or "loss").

    A fit orders rows by score; an evaluation by probability; a threshold
    with a per-row loss pools the loss in place of the label.
    """
    return ("prob" if "prob" in columns else "score",
            "loss" if "loss" in columns else "label")


def pool_range(score: np.ndarray, label: np.ndarray, weight: np.ndarray | None,
               key_columns: Sequence[Any], segments: bool = True, with_wyy: bool = False
               ) -> tuple[DistinctTable, KeyedTable | None]:
    """The global distinct-score table of a range's valid rows and, if asked, every segment's.

    The segments' tables form a :class:`~distcal.core.keyed.KeyedTable`
    whose keys are the segment tuples. ``with_wyy``: the segments also pool
    w * y^2 (evaluation's Brier score).
    """
    table = pool_ties(score, label, weight)
    if not segments:
        return table, None
    codes, keys = factorize_keys(key_columns)
    return table, pool_keyed(codes, list(keys), score, label, weight, with_wyy=with_wyy)
