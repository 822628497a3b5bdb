"""Histogram binning calibration (Zadrozny & Elkan, 2001).

Scores are cut into ``n_bins`` bins (the bins of :mod:`distcal.core.bins`,
i.e. scikit-learn's calibration-curve bins); a non-empty bin predicts its
weighted positive rate  sum w y / sum w. A score falling in an empty bin
gets the rate of the nearest non-empty bin below it, or above it for the
lowest bins. Everything is a sum over the distinct-score table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .bins import bin_edges, bin_ids
from .distinct import DistinctTable
from .isotonic import Blocks

__all__ = ["fit_histogram", "fill_empty_bins"]


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


def fit_histogram(tables: DistinctTable | Callable[[], Iterable[DistinctTable]],
                  n_bins: int = 10,
                  strategy: str = "uniform") -> tuple[np.ndarray, np.ndarray, Blocks]:
    """Return (edges, rate of every bin, blocks of the non-empty bins).

    ``tables`` is one distinct-score table or a function returning the
    tables of ascending, non-overlapping score ranges.
    """
    if isinstance(tables, DistinctTable):
        one = tables
        tables = lambda: (one,)  # noqa: E731
    edges = bin_edges(tables, n_bins, strategy)
    nb = edges.shape[0] - 1
    weight = np.zeros(nb)
    positives = np.zeros(nb)
    for t in tables():
        ids = bin_ids(edges, t.score)
        weight += np.bincount(ids, weights=t.weight, minlength=nb)[:nb]
        positives += np.bincount(ids, weights=t.positives, minlength=nb)[:nb]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(weight > 0, positives / np.where(weight > 0, weight, 1.0), 0.0)
    filled = fill_empty_bins(rate, weight)
    full = np.flatnonzero(weight > 0)
    blocks = Blocks(edges[full], edges[full + 1], weight[full], positives[full], rate[full])
    return edges, filled, blocks
