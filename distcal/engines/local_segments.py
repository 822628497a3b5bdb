"""Per-segment ranges on the local engine: the whole input as one range, in memory.

The valid rows (score, label, weight and the ``by`` columns) are read in
one piece, checked with the rules of every engine, and pooled by score and
by (segment, score) (:mod:`distcal.core.segments`). Unlike an unsegmented
local fit this holds the rows in memory (about 32 bytes a row plus the key
columns); a Spark or Dask frame scales past that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.distinct import DistinctTable
from ..core.partition import add_up
from ..core.segments import SegmentTables, check_rows, pool_range, value_roles
from ..errors import DataError, column_not_found
from ..logs import describe_input, log, phase
from ..tables import ColumnSource, is_path, read_table
from .frames import refuse_cluster_frames

__all__ = ["LocalSegmentRanges", "key_columns_of"]


def key_columns_of(data: pd.DataFrame | pa.Table, by: list[str]) -> list[Any]:
    """The ``by`` columns of an in-memory frame (pandas-friendly arrays), or DataError."""
    names = list(map(str, data.columns)) if isinstance(data, pd.DataFrame) \
        else data.schema.names
    for name in by:
        if name not in names:
            raise column_not_found(name, "segment", names)
    if isinstance(data, pd.DataFrame):
        return [data[name] for name in by]
    return [data.column(name).to_pandas(integer_object_nulls=True, date_as_object=True)
            for name in by]


class LocalSegmentRanges:
    """One range holding every valid row; maps over its global and per-segment tables."""

    def __init__(self, data: Any, columns: dict[str, str | None], by: list[str], *,
                 on_invalid: str = "raise", finite_scores: bool = False):
        refuse_cluster_frames(data)
        self.columns = {r: c for r, c in columns.items() if c is not None}
        with phase("local: read, validate and pool %s by %s", describe_input(data), by):
            if is_path(data):
                data = read_table(data)
            if isinstance(data, pa.RecordBatch):
                data = pa.Table.from_batches([data])
            keys = key_columns_of(data, by)  # before the source: a missing key column first
            arrays, text = next(ColumnSource(data, self.columns).batches())
            keep, stats = check_rows(arrays, text, self.columns, finite_scores)
            totals = add_up([stats], self.columns, on_invalid=on_invalid,
                            finite_scores=finite_scores)
            if keep is not None:
                arrays = {r: a[keep] for r, a in arrays.items()}
                keys = [np.asarray(k)[keep] for k in keys]
            value, target = value_roles(self.columns)
            self.rows = {"score": arrays[value], "label": arrays[target]}
            self.table, segments = pool_range(arrays[value], arrays[target],
                                              arrays.get("weight"), keys,
                                              with_wyy=value == "prob")
            assert segments is not None
            self.segments: SegmentTables = segments
            self._codes_keys = (keys, segments)
        self.n_rows, self.weight_total = totals.n_rows, totals.weight_total
        self.dropped_rows, self.sum_wyy = totals.dropped_rows, totals.sum_wyy
        log.info("local: %d rows used (weight %g), %d dropped; %d segments", self.n_rows,
                 self.weight_total, self.dropped_rows, len(self.segments))

    def map(self, fn: Callable[[DistinctTable], Any]) -> list[Any]:
        return [fn(self.table)]

    def map_segments(self, fn: Callable[[DistinctTable, SegmentTables], Any]) -> list[Any]:
        return [fn(self.table, self.segments)]

    def spearman_rows(self) -> bool:
        return _spearman_sign(self.rows["score"], self.rows["label"])

    def close(self) -> None:
        pass

    def __enter__(self) -> LocalSegmentRanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refuse_text(text: dict[str, np.ndarray], score_col: str) -> None:
    from ..core.validate import RowChecker

    if "score" in text and text["score"].any():  # the rule's own words, as every engine
        checker = RowChecker({"score": score_col})
        checker.check({"score": np.zeros(text["score"].shape[0])}, {"score": text["score"]})
        raise DataError(checker.message())


def _spearman_sign(s: np.ndarray, y: np.ndarray) -> bool:
    from scipy.stats import spearmanr

    return not (spearmanr(s, y).statistic < 0)
