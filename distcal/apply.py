"""Applying a model to a Parquet table in bounded memory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError
from .io import _arrow_kind, _arrow_to_float, _open_dataset, atomic_path, iter_tables
from .model import CalibrationModel

__all__ = ["apply_to_parquet"]


def apply_to_parquet(model: CalibrationModel, source: str | os.PathLike,
                     output: str | os.PathLike, *, score_col: str = "score",
                     output_col: str = "calibrated", overwrite: bool = False,
                     batch_rows: int = 1 << 20,
                     before_commit: Callable[[Path], None] | None = None) -> int:
    """Stream ``source`` batch by batch, add ``output_col``, write one Parquet file.

    Every input column is kept (hive partition columns included). The file
    is written aside and renamed, so ``output`` is never half-written;
    ``before_commit(path_of_the_new_file)`` runs in between (a report on the
    output: if it raises, nothing is published). Returns the rows written.
    """
    dataset = _open_dataset(source)
    schema = dataset.schema
    if score_col not in schema.names:
        raise DataError(f"column '{score_col}' (score) not found; the input has columns "
                        f"{schema.names}")
    if _arrow_kind(schema.field(score_col).type) == "other":
        raise DataError(f"column '{score_col}' (score) has type "
                        f"{schema.field(score_col).type}; expected numbers")
    keep = [n for n in schema.names if n != output_col]
    out_schema = pa.schema([schema.field(n) for n in keep] + [pa.field(output_col, pa.float64())])
    rows = 0
    with atomic_path(output, overwrite=overwrite) as tmp:
        with pq.ParquetWriter(tmp, out_schema) as writer:
            for table in iter_tables(dataset, keep, batch_rows):
                scores, _ = _arrow_to_float(table.column(score_col))
                probs = pa.array(model.predict(scores), type=pa.float64())
                writer.write_table(pa.Table.from_arrays(
                    [table.column(n) for n in keep] + [probs], schema=out_schema))
                rows += table.num_rows
        if before_commit is not None:
            before_commit(tmp)
    return rows
