"""A model applied to whole rows of a Spark DataFrame: one ``mapInArrow``, a column added.

Each Arrow batch's model columns go to ``predict`` as a pyarrow Table (a
``VectorUDT`` column as a list column, a ``TIMESTAMP`` key as its wall-clock
time, converted in the JVM); the batch
comes back with the prediction appended, ``double`` or ``array<double>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from ..base import check_transform_columns, prediction_array
from .schema import fields_of, is_vector_udt, map_in_arrow, quote, vector_array, wall_clock
from .session import on_executors

__all__ = ["transform_rows"]

# The model's inputs when a column had to be converted (a VectorUDT to a list).
_INPUT = "__distcal_in_{}"


def transform_rows(df: Any, columns: dict[str, str], output_col: str,
                   predict: Callable[[Any], Any], vector: bool) -> Any:
    """``df`` with ``output_col`` = ``predict(columns of a batch)`` (``Engine.transform_rows``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = fields_of(df)
    check_transform_columns(list(fields), columns, output_col)
    # Converted in the JVM: a VectorUDT to a list; a TIMESTAMP segment key to the session's
    # wall-clock time, the naive keys a fit on Spark has (Arrow would hand the workers
    # instants in UTC).
    conversions = {c: (vector_array(df, c), T.ArrayType(T.DoubleType()))
                   if is_vector_udt(fields[c]) else
                   (wall_clock(F.col(quote(c)), fields[c]), T.TimestampNTZType())
                   for c in columns if is_vector_udt(fields[c])
                   or isinstance(fields[c], T.TimestampType)}
    converted = {c: _INPUT.format(i) for i, c in enumerate(columns) if c in conversions}
    work = df
    for c, hidden in converted.items():
        work = work.withColumn(hidden, conversions[c][0])
    passed = [f for f in df.schema.fields]
    hidden_fields = [T.StructField(h, conversions[c][1]) for c, h in converted.items()]
    out_type = T.ArrayType(T.DoubleType()) if vector else T.DoubleType()
    schema = T.StructType(passed + hidden_fields + [T.StructField(output_col, out_type)])
    inputs = [converted.get(c, c) for c in columns]
    names = list(columns)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            part = pa.Table.from_batches([batch]).select(inputs).rename_columns(names)
            col = prediction_array(predict(part), vector)
            yield pa.RecordBatch.from_arrays([*batch.columns, col],
                                             names=[*batch.schema.names, output_col])

    out = on_executors(lambda: map_in_arrow(work, run, schema))
    if converted:
        out = out.drop(*[quote(h) for h in converted.values()])
    return out.select(*[F.col(quote(f.name)) for f in df.schema.fields], F.col(quote(output_col)))
