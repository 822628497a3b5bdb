"""Applying a model to a Parquet table in bounded memory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import column_not_found, column_type, output_column_exists
from .model import CalibrationModel
from .storage import local_publishing
from .tables import arrow_kind, arrow_to_float, iter_tables, open_dataset

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
    dataset = open_dataset(source)
    schema = dataset.schema
    if score_col not in schema.names:
        raise column_not_found(score_col, "score", schema.names)
    if arrow_kind(schema.field(score_col).type) == "other":
        raise column_type(score_col, "score", str(schema.field(score_col).type))
    if output_col in schema.names:
        raise output_column_exists(output_col)
    keep = list(schema.names)
    out_schema = pa.schema([schema.field(n) for n in keep] + [pa.field(output_col, pa.float64())])
    rows = 0
    with local_publishing(output, overwrite=overwrite) as tmp:
        with pq.ParquetWriter(tmp, out_schema) as writer:
            for table in iter_tables(dataset, keep, batch_rows):
                scores, _ = arrow_to_float(table.column(score_col))
                probs = pa.array(model.predict(scores), type=pa.float64())
                writer.write_table(pa.Table.from_arrays(
                    [table.column(n) for n in keep] + [probs], schema=out_schema))
                rows += table.num_rows
        if before_commit is not None:
            before_commit(tmp)
    return rows
