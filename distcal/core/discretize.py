"""MODL over ordered score ranges: calibration by Bayes-optimal binning, distributed.

Two passes over the ranges of the distinct-score table (any engine):

1. each range returns :func:`~distcal.core.modl.range_summary` (five
   integers); the driver decides with :func:`~distcal.core.modl.plan_groups`
   whether the table, after merging pure runs, exceeds ``max_groups`` rows;
2. each range returns its rows pre-merged
   (:func:`~distcal.core.modl.premerge_range`), or, when grouping is
   needed, grouped (:func:`~distcal.core.modl.group_range`); the driver
   joins them in score order and finds the partition
   (:func:`~distcal.core.modl.modl_partition`).

So the driver never receives more than ``max_groups`` rows (plus one per
range boundary), and every engine searches the same table. With many keys
(``by=``, one-vs-rest) both passes run for all the keys of a range at once
(grouping, needed by large keys only, key by key); the second one's
requests say how many bytes they bring, so that a pass over thousands of
keys runs in waves within the engine's result budget
(:func:`~distcal.core.plans.run_plans`). Why both
steps are safe range by range: docs/modl.md.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from .distinct import DistinctTable
from .isotonic import Blocks
from .keyed import KeyedTable
from .modl import (
    MAX_GROUPS,
    RangeGroups,
    group_range,
    interval_bounds,
    join_groups,
    modl_partition,
    plan_groups,
    premerge_keys,
    premerge_range,
    range_summaries,
)
from .plans import KeyBatch, KeyResults
from .rows import LabelsNotBinaryError

__all__ = ["modl_from_counts"]

RangeCounts = tuple[np.ndarray, np.ndarray, np.ndarray]


#: Why MODL cannot count a key's rows (pass 1 tells the driver, where the key's fit fails
#: with it, instead of a worker's exception); index 0: it can.
PROBLEMS = ("", "MODL calibration needs 0/1 labels", "MODL needs unit weights")


def _counts(t: DistinctTable) -> np.ndarray:
    """(V, 2) class counts of a table's distinct scores (0/1 labels, unit weights: pass 1
    checked them, :class:`_Summaries`)."""
    ones = np.rint(t.label_sum).astype(np.int64)
    return np.column_stack([t.count.astype(np.int64) - ones, ones])


class _Summaries(KeyBatch):
    """Pass 1 of a range, all its keys at once: each key's first score, its
    :func:`~distcal.core.modl.range_summary` and its problem (an index of
    :data:`PROBLEMS`)."""

    def run(self, which: np.ndarray, part: KeyedTable) -> KeyResults:
        t, heads = part.table, part.starts[:-1]
        unit = np.logical_and.reduceat(t.weight == t.count, heads)
        problem = np.where(~part.binary, 1, np.where(unit, 0, 2))
        return KeyResults([t.score[heads], range_summaries(_counts(t), part.starts), problem],
                          [None] * 3)


class _Premerged(KeyBatch):
    """Pass 2 of a range, all its keys at once, when no key needs grouping: each key's
    pre-merged rows (:func:`~distcal.core.modl.premerge_range`): ``rows`` of them over
    all ranges, 32 bytes each (two counts, two scores)."""

    def __init__(self, rows: int = 0):
        self.driver_bytes = 32 * rows

    def run(self, which: np.ndarray, part: KeyedTable) -> KeyResults:
        t = part.table
        merged, lo, hi, starts = premerge_keys(_counts(t), t.score, part.starts)
        return KeyResults([merged, lo, hi], [starts] * 3)


def range_rows(counts: np.ndarray, scores: np.ndarray, plan: dict[float, RangeGroups] | None
               ) -> Any:
    """Pass 2 of one range: pre-merged, or grouped as the plan says (found by its first score)."""
    if plan is None:
        return premerge_range(counts, scores)
    return group_range(counts, plan[float(scores[0])], scores)


class _Grouped:
    """Pass 2 of one key whose table needs grouping: each range's groups
    (:func:`range_rows`), at most ``rows`` of them over all ranges, 40 bytes each
    (two counts, a group id, two scores)."""

    def __init__(self, plan: dict[float, RangeGroups], rows: int):
        self.plan, self.driver_bytes = plan, 40 * rows

    def __call__(self, t: DistinctTable) -> Any:
        return range_rows(_counts(t), t.score, self.plan)


def rows_plan(firsts: list[float], summaries: list[np.ndarray], max_groups: int,
              rows: Callable[[dict[float, RangeGroups] | None], Callable[[Any], Any]]
              ) -> Generator[Any, list[Any], tuple[list[RangeCounts], int | None]]:
    """Pass 2 as a plan, from pass 1's first scores and summaries: the count tables to search.

    ``rows(plan)`` is the function of a range (:func:`range_rows` of its
    counts). Returns the ranges' pre-merged tables, or, when grouped, the
    joined grouped table; and the number of groups (None: not grouped).
    """
    plan = plan_groups(summaries, max_groups)
    if plan is None:
        parts = yield rows(None)
        return parts, None
    table = join_groups((yield rows(dict(zip(firsts, plan)))))
    return [table], int(table[0].shape[0])


def modl_from_counts(parts: list[RangeCounts], exact_max: int = 1000,
                     max_groups: int = MAX_GROUPS, groups: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, bool, int | None]:
    """The MODL partition of ranges' pre-merged (or joined grouped) tables, in score order.

    Each part is (counts, lo, hi), e.g. :func:`~distcal.core.modl.premerge_range`
    of one range. ``groups``: the table was grouped before (its group
    count). Returns (score_min, score_max, interval counts (I, J), cost,
    exact, groups).
    """
    parts = [p for p in parts if p[0].shape[0]]
    if not parts:
        raise ValueError("MODL of no rows")
    counts = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    lo = np.concatenate([p[1] for p in parts])
    hi = np.concatenate([p[2] for p in parts])
    # Pure runs cut by a range boundary are merged here, so the table searched
    # is the pure-run reduction of the whole table whatever the ranges: every
    # engine starts greedy merging from the same rows.
    counts, first, last = premerge_range(counts)
    lo, hi = lo[first], hi[last]
    res = modl_partition(counts, exact_max=exact_max, max_groups=max_groups)
    used = res.groups if groups is None else groups
    return (interval_bounds(res, lo)[0], interval_bounds(res, hi)[1],
            np.asarray(res.interval_counts), float(res.cost), res.exact, used)


def modl_plan(exact_max: int = 1000, max_groups: int = MAX_GROUPS
              ) -> Generator[Any, list[Any], tuple[Blocks, float, bool, int | None]]:
    """MODL intervals of 0/1 labels with unit weights, as blocks; and (cost, exact, groups).

    A plan (:mod:`distcal.core.plans`): two passes over the ranges. The
    ranges' summaries decide the grouping on the driver; then each range
    sends its pre-merged (or grouped) counts. Each interval predicts its
    positive rate; its bounds are the lowest and highest score of the rows
    in it.
    """
    summaries = yield _Summaries()
    for _, _, problem in summaries:
        if problem:
            if problem == 1:  # the fit counts the rows
                raise LabelsNotBinaryError(PROBLEMS[problem], PROBLEMS[problem])
            raise ValueError(PROBLEMS[problem])
    # The rows pass 2 brings: each range's pre-merged rows, or at most max_groups
    # groups and one more per range (a group cut by a range boundary).
    rows = min(sum(int(s[1]) for _, s, _ in summaries), max_groups + len(summaries))
    parts, groups = yield from rows_plan(
        [f for f, _, _ in summaries], [s for _, s, _ in summaries], max_groups,
        lambda plan: _Premerged(rows) if plan is None else _Grouped(plan, rows))
    smin, smax, counts, cost, exact, groups = modl_from_counts(parts, exact_max, max_groups,
                                                               groups)
    n = counts.sum(axis=1).astype(np.float64)
    pos = counts[:, 1].astype(np.float64)
    return Blocks(smin, smax, n, pos, pos / n), cost, exact, groups
