"""The local engine: this process, in-memory frames or Parquet read in batches.

The same pipeline as the cluster engines with the shuffle done in one
process (:mod:`.local_keyed`): each record batch is validated and pooled by
(key, score), the pooled tables are merged, spilling sorted runs to disk
past a memory budget, and the methods run over the ordered score ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.keyed import KeySpec
from ..errors import DataError, column_not_found, output_column_exists
from ..tables import ColumnSource, is_path, read_table

__all__ = ["LocalEngine"]


class LocalEngine:
    """The local engine (see the module docstring); implements :class:`~.base.Engine`."""

    name = "local"
    options = frozenset({"memory_rows", "batch_rows", "chunk_rows"})

    def transform(self, model: Any, data: Any, score_col: str, output_col: str,
                  score_index: int | None = None) -> Any:
        """pandas in, pandas out; pyarrow in, pyarrow out; a Parquet path in, pandas out."""
        indexes = None if score_index is None else {"score": score_index}
        if is_path(data):
            data = read_table(data).to_pandas()
        if isinstance(data, pd.DataFrame):
            if score_col not in data.columns:
                raise column_not_found(score_col, "score", map(str, data.columns))
            values, text = ColumnSource(data, {"score": score_col}, indexes).batches().__next__()
            _refuse_text(text, score_col)
            if output_col in data.columns:
                raise output_column_exists(output_col)
            out = data.copy(deep=False)
            out[output_col] = model.predict(values["score"])
            return out
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            if score_col not in data.schema.names:
                raise column_not_found(score_col, "score", data.schema.names)
            values, text = ColumnSource(data, {"score": score_col}, indexes).batches().__next__()
            _refuse_text(text, score_col)
            if output_col in data.schema.names:
                raise output_column_exists(output_col)
            col = pa.array(model.predict(values["score"]), type=pa.float64())
            if isinstance(data, pa.RecordBatch):
                data = pa.Table.from_batches([data])
            return data.append_column(output_col, col)
        raise TypeError(f"cannot transform data of type {type(data).__name__}")


    def is_vector_column(self, data: Any, name: str) -> bool:
        """A pyarrow list column, or a pandas column of lists or arrays (first value)."""
        from ..tables import is_vector_column

        return is_vector_column(data, name)

    def open_keyed(self, data: Any, spec: KeySpec, *, on_invalid: str = "raise",
                   finite_scores: bool = False, passes: int = 1, **opts: Any) -> Any:
        """The keyed rows of a local input, streamed in batches (:mod:`.local_keyed`).

        Options: ``memory_rows`` (distinct (key, score) pairs held before
        spilling sorted runs to disk), ``batch_rows`` (rows read at a time);
        ``chunk_rows`` is accepted for the binary fit's sake.
        """
        from .local_keyed import LocalKeyedRanges

        return LocalKeyedRanges(data, spec, on_invalid=on_invalid, finite_scores=finite_scores,
                                **opts)

    def transform_rows(self, data: Any, columns: list[str], output_col: str,
                       predict: Callable[[Any], Any], vector: bool, model: Any = None) -> Any:
        """pandas in, pandas out; pyarrow in, pyarrow out; a Parquet path in, pandas out."""
        from .local_keyed import transform_rows

        return transform_rows(data, columns, output_col, predict, vector)


def _refuse_text(text: dict[str, np.ndarray], score_col: str) -> None:
    k = int(np.count_nonzero(text["score"])) if "score" in text else 0
    if k:
        raise DataError(f"column '{score_col}': {k} row{'s' if k > 1 else ''} "
                        f"{'are' if k > 1 else 'is'} text, not numbers")
