"""The one interface every method is written against: a map over ordered score ranges.

A distinct-value table (:class:`~distcal.core.distinct.DistinctTable`) is
split into ascending, non-overlapping score ranges; a *map over ranges*
applies a function to each non-empty range (on whatever machine holds it)
and returns the results in ascending score order. One in-memory table, a
table spilled to disk, and a range-partitioned Spark or Dask frame all
offer it, so the methods in this package never see an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .distinct import DistinctTable

__all__ = ["MapRanges", "as_map_ranges"]

MapRanges = Callable[[Callable[[DistinctTable], Any]], list[Any]]


def as_map_ranges(data: DistinctTable | MapRanges) -> MapRanges:
    """A map over ordered ranges, from one table (a single range) or as given."""
    if isinstance(data, DistinctTable):
        table = data
        return lambda fn: [fn(table)] if len(table) else []
    return data
