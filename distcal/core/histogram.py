"""Histogram binning calibration (Zadrozny & Elkan, 2001).

Scores are cut into ``n_bins`` bins (the bins of :mod:`distcal.core.bins`,
i.e. scikit-learn's calibration-curve bins); a non-empty bin predicts its
weighted positive rate  sum w y / sum w. A score falling in an empty bin
gets the rate of the nearest non-empty bin below it, or above it for the
lowest bins. Everything is a sum over the distinct-score table.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from .bins import bin_ids, edges_plan
from .distinct import DistinctTable
from .isotonic import Blocks
from .keyed import KeyedTable
from .plans import KeyBatch, run_plan
from .ranges import MapRanges, as_map_ranges

__all__ = ["fit_histogram", "histogram_plan", "fill_empty_bins"]


def fill_empty_bins(rate: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Rate per bin, empty bins taking the nearest non-empty bin below (else above)."""
    full = weight > 0
    if not full.any():
        raise ValueError("every bin is empty")
    idx = np.where(full, np.arange(rate.shape[0]), -1)
    below = np.maximum.accumulate(idx)
    first = int(np.argmax(full))
    below[below < 0] = first
    return rate[below]


def fit_histogram(data: DistinctTable | MapRanges, n_bins: int = 10,
                  strategy: str = "uniform") -> tuple[np.ndarray, np.ndarray, Blocks]:
    """Return (edges, rate of every bin, blocks of the non-empty bins).

    ``data`` is one distinct-score table or a map over ascending,
    non-overlapping score ranges (:data:`~distcal.core.ranges.MapRanges`).
    More bins than rows is a :class:`~distcal.ParameterError`.
    """
    return run_plan(histogram_plan(n_bins, strategy), as_map_ranges(data))


class _BinSums(KeyBatch):
    """Weight and positives per bin of one range (a (2, n_bins) array); the requests of
    many keys (the same number of bins, their edges stacked: :meth:`pack`) run as one
    call for all the keys of a range."""

    def __init__(self, edges: np.ndarray):
        self.edges = np.atleast_2d(edges)  # one row of edges per key
        self.batch_id = self.edges.shape[1]

    @classmethod
    def pack(cls, requests: list[_BinSums]) -> _BinSums:
        return cls(np.concatenate([r.edges for r in requests]))

    def run(self, which: np.ndarray, part: KeyedTable) -> np.ndarray:
        t, starts = part.table, part.starts
        keys, nb = len(starts) - 1, self.edges.shape[1] - 1
        # A search per key (numpy searches one sorted array at a time; a comparison per
        # edge and row would cost n_bins passes over the range), then one bincount.
        ids = np.empty(len(t), dtype=np.intp)
        for k, (lo, hi) in enumerate(zip(starts[:-1].tolist(), starts[1:].tolist())):
            ids[lo:hi] = bin_ids(self.edges[which[k]], t.score[lo:hi])
        cell = np.repeat(np.arange(keys) * nb, np.diff(starts)) + ids
        with np.errstate(over="ignore", invalid="ignore"):  # overflow: refused by the model
            return np.stack([np.bincount(cell, weights=t.weight, minlength=keys * nb),
                             np.bincount(cell, weights=t.positives, minlength=keys * nb)]
                            ).reshape(2, keys, nb).transpose(1, 0, 2)


def histogram_plan(n_bins: int = 10, strategy: str = "uniform"
                   ) -> Generator[Any, list[Any], tuple[np.ndarray, np.ndarray, Blocks]]:
    """:func:`fit_histogram` as a plan: the edges' passes, then one pass of bin sums."""
    edges = yield from edges_plan(n_bins, strategy, rows_for_bins=True)
    parts = yield _BinSums(edges)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: refused by the model
        sums: np.ndarray = np.sum(parts, axis=0)
    weight, positives = sums[0], sums[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(weight > 0, positives / np.where(weight > 0, weight, 1.0), 0.0)
    filled = fill_empty_bins(rate, weight)
    full = np.flatnonzero(weight > 0)
    blocks = Blocks(edges[full], edges[full + 1], weight[full], positives[full], rate[full])
    return edges, filled, blocks
