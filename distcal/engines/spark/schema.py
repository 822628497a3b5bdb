"""A Spark DataFrame's columns in Spark SQL: their kind, vectors and vector lengths.

Rows are checked in the Python workers by :func:`distcal.core.rows.read_rows`
(the same rules and words on every engine); what stays in the JVM is the
schema: a column's kind, quoting, and reading vectors (arrays and pyspark.ml
``VectorUDT``) and counting their lengths without a Python worker.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

from ...core.validate import check_vector_lengths
from ...errors import VECTORS_EXPECTED, column_type

__all__ = ["fields_of", "column_kind", "quote", "vector_element", "is_vector_udt", "vector_array",
           "vector_length_counts", "map_in_arrow", "check_scores"]


def fields_of(df: Any) -> dict[str, Any]:
    """The Spark types of ``df``'s columns, by name."""
    return {f.name: f.dataType for f in df.schema.fields}


def column_kind(dtype: Any) -> str:
    from pyspark.sql import types as T

    if isinstance(dtype, (T.NumericType, T.BooleanType, T.NullType)):
        return "number"
    if isinstance(dtype, (T.StringType, T.VarcharType, T.CharType)):
        return "text"
    return "other"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def map_in_arrow(df: Any, fn: Callable[[Iterator[Any]], Iterator[Any]], schema: Any) -> Any:
    """``df.mapInArrow(fn, schema)`` for columns of any name.

    pyspark hands ``mapInArrow`` the input columns by their names unquoted,
    so a name with a dot reads as a struct's field and fails to resolve. The
    columns go in under positional names, and ``fn`` gets its batches with
    their own names back (a rename of the batch, no copy).

    Each task starts by moving the worker's objects to the garbage collector's
    permanent generation (``gc.freeze``): a reused Spark Python worker runs a
    full ``gc.collect()`` after every task (pyspark/daemon.py), and once numpy,
    pandas, pyarrow, scipy and distcal are imported that collection walks some
    100,000 objects, ~0.1 s of CPU (more than a small task's own work). What is
    alive when a task starts is the imports and what they keep; frozen, the
    collection after each task walks only that task's objects. (Reference
    counting still frees frozen objects; only cycles among them stay.)
    """
    import pyarrow as pa

    names = list(df.columns)

    def named(batches: Iterator[Any]) -> Iterator[Any]:
        gc.freeze()
        return fn(pa.RecordBatch.from_arrays(b.columns, names=names) for b in batches)

    return df.toDF(*[f"_col{i}" for i in range(len(names))]).mapInArrow(named, schema)


def check_scores(df: Any, names: list[str], vectors: bool = False) -> None:
    """The ``DataError`` that a transform's reader would raise in the workers (wrapped in
    Spark's exception there), raised on the driver where the schema tells: a score column
    of text counts its rows (one job, only then); another non-number type is named; with
    ``vectors``, the one column ``names`` must hold vectors of numbers. Vectors of the
    wrong length are found by the workers, as Spark ML's models find them: counting them
    first would be one more pass over the input in every transform.
    """
    from pyspark.sql import functions as F

    from ...core.rows import InvalidRowsError, not_vectors

    fields = fields_of(df)
    if vectors:
        (name,) = names
        if vector_array(df, name) is None:
            raise not_vectors(name, fields[name].simpleString())
        return
    for name in names:
        kind = column_kind(fields[name])
        if kind == "text" and not df.isStreaming:
            text = df.where(F.col(quote(name)).isNotNull()).count()
            if text:
                raise InvalidRowsError([(name, "are text, not numbers", text)])
        elif kind != "number":
            raise column_type(name, "score", fields[name].simpleString())


def vector_element(df: Any, name: str, index: int) -> Any:
    """Element ``index`` of the vectors in score column ``name`` (in ``df``: the caller
    checked) as a double column, in the JVM.

    ``ArrayType`` of numbers, or pyspark.ml's ``VectorUDT`` (dense or
    sparse, through ``vector_to_array``): the element is taken by Spark's
    own operators, so no Python UDF sees the vectors. Before that, one
    aggregation counts the vectors by length, for the same ``DataError``
    as the other engines (unequal lengths, index out of range). Null
    vectors and null elements give null (a null score to the row checks).
    A streaming DataFrame cannot be aggregated before it runs: there a
    vector too short for ``index`` fails its row when the query runs.
    """
    from pyspark.sql import functions as F

    arr = vector_array(df, name)
    if arr is None:
        raise column_type(name, "score", fields_of(df)[name].simpleString(), VECTORS_EXPECTED)
    if df.isStreaming:
        return F.when(arr.isNull() | (F.size(arr) > index), F.get(arr, index)).otherwise(
            F.raise_error(F.lit(f"column '{name}' (score): score_index {index} is out of "
                                "range for a vector of this row")))
    check_vector_lengths(name, "score", index, vector_length_counts(df, name))
    # get() is null beyond the end (arr[i] raises under ANSI mode); none are, after the check.
    return F.get(arr, index)


def is_vector_udt(dtype: Any) -> bool:
    """pyspark.ml's ``VectorUDT`` (by name: pyspark.ml need not be imported)."""
    names = {type(dtype).__name__, getattr(type(dtype), "__module__", "")}
    return "VectorUDT" in names


def vector_array(df: Any, name: str) -> Any:
    """Column ``name`` as an ``array<double>`` column, in the JVM, or None if not vectors.

    The one place that knows what a vector column is on Spark: ``ArrayType``
    of numbers, or pyspark.ml's ``VectorUDT`` (dense or sparse, through
    ``vector_to_array``).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    dtype = fields_of(df)[name]
    if isinstance(dtype, T.ArrayType) and column_kind(dtype.elementType) == "number":
        return F.col(quote(name)).cast("array<double>")
    if is_vector_udt(dtype):
        from pyspark.ml.functions import vector_to_array

        return vector_to_array(F.col(quote(name)))
    return None


def vector_length_counts(df: Any, name: str) -> dict[int, int]:
    """How many non-null vectors of column ``name`` have each length (one small job)."""
    from pyspark.sql import functions as F

    n = F.size(vector_array(df, name))
    counts = df.where(F.col(quote(name)).isNotNull()).groupBy(n.alias("n")).count().collect()
    return {int(r["n"]): int(r["count"]) for r in counts}


def wall_clock(col: Any, dtype: Any) -> Any:
    """A segment key column of Spark's ``TIMESTAMP`` (an instant) as ``TIMESTAMP_NTZ``, the
    session time zone's wall-clock time: the naive values ``toPandas()`` gives, so that a
    fit on Spark has the keys of a fit on the same rows in pandas. Other types as they are."""
    from pyspark.sql import types as T

    return col.cast("timestamp_ntz") if isinstance(dtype, T.TimestampType) else col
