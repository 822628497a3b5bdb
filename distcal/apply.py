"""Applying a model to a Parquet table in bounded memory."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .core.columns import arrow_kind, arrow_to_float, vector_element
from .core.validate import check_vector_lengths
from .errors import VECTORS_EXPECTED, column_not_found, column_type, output_column_exists
from .keyed_model import KeyedModel
from .model import CalibrationModel
from .storage import local_publishing
from .tables import iter_tables, open_dataset

__all__ = ["apply_to_parquet"]


def apply_to_parquet(model: CalibrationModel | KeyedModel, source: str | os.PathLike,
                     output: str | os.PathLike, *, score_col: str = "score",
                     output_col: str = "calibrated", overwrite: bool = False,
                     batch_rows: int = 1 << 20, score_index: int | None = None,
                     score_cols: list[str] | None = None,
                     before_commit: Callable[[Path], None] | None = None) -> int:
    """Stream ``source`` batch by batch, add ``output_col``, write one Parquet file.

    Every input column is kept (hive partition columns included). The file
    is written aside and renamed, so ``output`` is never half-written;
    ``before_commit(path_of_the_new_file)`` runs in between (a report on the
    output: if it raises, nothing is published). Returns the rows written.
    With ``score_index`` the score is that element of the vectors in
    ``score_col``; their lengths are checked over the whole input before
    the output is published. A :class:`~distcal.KeyedModel` reads its
    scores (``score_col``, a vector column, or ``score_cols``) and its
    segment columns from each batch; a multiclass one writes a
    ``list<double>`` column.
    """
    dataset = open_dataset(source)
    if isinstance(model, KeyedModel):
        return _apply_keyed(model, dataset, output, score_col, score_cols, output_col,
                            overwrite, batch_rows, before_commit)
    schema = dataset.schema
    if score_col not in schema.names:
        raise column_not_found(score_col, "score", schema.names)
    if score_index is None and arrow_kind(schema.field(score_col).type) == "other":
        raise column_type(score_col, "score", str(schema.field(score_col).type))
    if score_index is not None and arrow_kind(schema.field(score_col).type) != "other":
        raise column_type(score_col, "score", str(schema.field(score_col).type),
                          VECTORS_EXPECTED)
    lengths: Counter[int] = Counter()
    if output_col in schema.names:
        raise output_column_exists(output_col)
    keep = list(schema.names)
    out_schema = pa.schema([schema.field(n) for n in keep] + [pa.field(output_col, pa.float64())])
    rows = 0
    with local_publishing(output, overwrite=overwrite) as tmp:
        with pq.ParquetWriter(tmp, out_schema) as writer:
            for table in iter_tables(dataset, keep, batch_rows):
                if score_index is None:
                    scores, _ = arrow_to_float(table.column(score_col))
                else:
                    scores, seen = vector_element(table.column(score_col), score_index,
                                                  score_col)
                    lengths.update(seen)
                probs = pa.array(model.predict(scores), type=pa.float64())
                writer.write_table(pa.Table.from_arrays(
                    [table.column(n) for n in keep] + [probs], schema=out_schema))
                rows += table.num_rows
        if score_index is not None:
            check_vector_lengths(score_col, "score", score_index, lengths)
        if before_commit is not None:
            before_commit(tmp)
    return rows


def _apply_keyed(model: KeyedModel, dataset: Any, output: str | os.PathLike,
                 score_col: str | None, score_cols: list[str] | None, output_col: str,
                 overwrite: bool, batch_rows: int,
                 before_commit: Callable[[Path], None] | None) -> int:
    """:func:`apply_to_parquet` of a keyed model (segments, multiclass scores)."""
    schema = dataset.schema
    if score_cols is not None:
        score_col = None
    elif score_col is None:
        score_col, score_cols = model.columns.get("score"), model.columns.get("scores")
    for name in [*(score_cols or [str(score_col)])]:
        if name not in schema.names:
            raise column_not_found(name, "score", schema.names)
    for name in model.by:
        if name not in schema.names:
            raise column_not_found(name, "segment", schema.names)
    if output_col in schema.names:
        raise output_column_exists(output_col)
    keep = list(schema.names)
    out_type = pa.list_(pa.float64()) if model.n_classes >= 2 else pa.float64()
    out_schema = pa.schema([schema.field(n) for n in keep] + [pa.field(output_col, out_type)])
    rows = 0
    with local_publishing(output, overwrite=overwrite) as tmp:
        with pq.ParquetWriter(tmp, out_schema) as writer:
            for table in iter_tables(dataset, keep, batch_rows):
                values = model.predict_part(table, score_col, score_cols)
                if model.n_classes >= 2:  # one list of K probabilities per row
                    offsets = np.arange(values.shape[0] + 1, dtype=np.int32) * model.n_classes
                    probs = pa.ListArray.from_arrays(pa.array(offsets),
                                                     pa.array(values.reshape(-1),
                                                              type=pa.float64()))
                else:
                    probs = pa.array(values, type=pa.float64())
                writer.write_table(pa.Table.from_arrays(
                    [table.column(n) for n in keep] + [probs], schema=out_schema))
                rows += table.num_rows
        if before_commit is not None:
            before_commit(tmp)
    return rows
