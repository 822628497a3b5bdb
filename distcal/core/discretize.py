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
range boundary), and every engine searches the same table. Why both
steps are safe range by range: docs/modl.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from .distinct import DistinctTable
from .isotonic import Blocks
from .modl import (
    MAX_GROUPS,
    RangeGroups,
    group_range,
    interval_bounds,
    join_groups,
    modl_partition,
    plan_groups,
    premerge_range,
    range_summary,
)

__all__ = ["modl_from_counts"]

RangeCounts = tuple[np.ndarray, np.ndarray, np.ndarray]


def _problem(t: DistinctTable) -> str | None:
    """Why MODL cannot count a range's rows (None: it can)."""
    if not t.binary:
        return "MODL calibration needs 0/1 labels"
    if not np.array_equal(t.weight, t.count.astype(np.float64)):
        return "MODL needs unit weights"
    return None


def _counts(t: DistinctTable) -> np.ndarray:
    """(V, 2) class counts of one range's distinct scores (0/1 labels, unit weights: pass 1
    checked every range, :func:`_summary`)."""
    ones = np.rint(t.label_sum).astype(np.int64)
    return np.column_stack([t.count.astype(np.int64) - ones, ones])


def _summary(t: DistinctTable) -> tuple[float, Any]:
    """Pass 1 of one range: its first score and summary, or the problem (told on the driver,
    where the key's fit fails with it, instead of a worker's exception)."""
    problem = _problem(t)
    return float(t.score[0]), problem if problem is not None else range_summary(_counts(t))


def range_rows(counts: np.ndarray, scores: np.ndarray, plan: dict[float, RangeGroups] | None
               ) -> Any:
    """Pass 2 of one range: pre-merged, or grouped as the plan says (found by its first score)."""
    if plan is None:
        return premerge_range(counts, scores)
    return group_range(counts, plan[float(scores[0])], scores)


def _rows(plan: dict[float, RangeGroups] | None, t: DistinctTable) -> Any:
    return range_rows(_counts(t), t.score, plan)


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
    summaries = yield _summary
    for _, summary in summaries:
        if isinstance(summary, str):
            raise ValueError(summary)
    parts, groups = yield from rows_plan([f for f, _ in summaries], [s for _, s in summaries],
                                         max_groups, lambda plan: functools.partial(_rows, plan))
    smin, smax, counts, cost, exact, groups = modl_from_counts(parts, exact_max, max_groups,
                                                               groups)
    n = counts.sum(axis=1).astype(np.float64)
    pos = counts[:, 1].astype(np.float64)
    return Blocks(smin, smax, n, pos, pos / n), cost, exact, groups
