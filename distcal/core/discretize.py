"""MODL over ordered score ranges: calibration by Bayes-optimal binning, distributed.

Each range of the distinct-score table (any engine) pre-merges the rows
that no MODL optimum ever cuts apart (adjacent scores pure in the same
class, :func:`~distcal.core.modl.premerge_range`); the driver concatenates
the ranges' much smaller tables in score order and finds the partition
(:func:`~distcal.core.modl.modl_partition`: exact up to 1,000 rows after
merging, greedy with post-optimisation beyond). Why the pre-merge is safe
range by range: docs/modl.md.
"""

from __future__ import annotations

import numpy as np

from .distinct import DistinctTable
from .isotonic import Blocks
from .modl import _partition, _premerge
from .ranges import MapRanges, as_map_ranges

__all__ = ["fit_modl", "modl_from_counts"]

RangeCounts = tuple[np.ndarray, np.ndarray, np.ndarray]


def _binary_counts(t: DistinctTable) -> RangeCounts:
    """(class counts (V, 2), lowest and highest score) of one range, pre-merged."""
    if not t.binary:
        raise ValueError("MODL calibration needs 0/1 labels")
    if not np.array_equal(t.weight, t.count.astype(np.float64)):
        raise ValueError("MODL needs unit weights")
    ones = np.rint(t.label_sum).astype(np.int64)
    counts = np.empty((ones.shape[0], 2), dtype=np.int64)
    np.subtract(t.count, ones, out=counts[:, 0], casting="unsafe")
    counts[:, 1] = ones
    # Valid by construction (every distinct score holds a row, 0 <= ones <=
    # count for 0/1 labels): premerge_range's checks would only cost time.
    return _premerge(counts, t.score)


def modl_from_counts(parts: list[RangeCounts], exact_max: int = 1000
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, bool]:
    """The MODL partition of ranges' pre-merged tables, concatenated in score order.

    Each part is the output of :func:`~distcal.core.modl.premerge_range` on
    one range. Returns (score_min, score_max, interval counts (I, J), cost, exact).
    """
    parts = [p for p in parts if p[0].shape[0]]
    if not parts:
        raise ValueError("MODL of no rows")
    if len(parts) == 1:  # (a local fit: one range, nothing to gather)
        counts, lo, hi = parts[0]
        counts = counts.astype(np.int64, copy=False)
    else:
        counts = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
        lo = np.concatenate([p[1] for p in parts])
        hi = np.concatenate([p[2] for p in parts])
    # Pure runs cut by a range boundary are merged here too, so the table
    # given to modl_partition is the pure-run reduction of the whole
    # distinct table whatever the ranges: on the greedy path with mixed rows
    # greedy starts from these rows, and every engine must start from the same.
    if len(parts) > 1:  # one part is already reduced: the rule merges runs to their ends
        counts, first, last = _premerge(counts)
        lo, hi = lo[first], hi[last]
    # The parts come from premerge_range (or _binary_counts): checked counts.
    res = _partition(counts, exact_max=exact_max)
    starts = np.asarray(res.cuts, dtype=np.int64)
    ends = np.append(starts[1:], counts.shape[0]) - 1
    return lo[starts], hi[ends], np.asarray(res.interval_counts), float(res.cost), res.exact


def fit_modl(data: DistinctTable | MapRanges, exact_max: int = 1000
             ) -> tuple[Blocks, float, bool]:
    """MODL intervals of 0/1 labels with unit weights, as blocks; and (cost, exact).

    Each interval predicts its positive rate; its bounds are the lowest and
    highest score of the rows in it.
    """
    map_ranges = as_map_ranges(data)
    smin, smax, counts, cost, exact = modl_from_counts(map_ranges(_binary_counts), exact_max)
    n = counts.sum(axis=1).astype(np.float64)
    pos = counts[:, 1].astype(np.float64)
    return Blocks(smin, smax, n, pos, pos / n), cost, exact
