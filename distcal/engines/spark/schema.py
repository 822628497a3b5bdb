"""Validation and preparation of a Spark DataFrame's columns, in Spark SQL.

Every column becomes a double (``try_cast``, so text gives null and a flag
instead of an error under ANSI mode), and the validation rules of
:mod:`distcal.core.validate` become SQL predicates, so that Spark counts the
same problems with the same words as the local engine. With the map-side
combine, one ``groupBy(score)`` sums weights, positives and the count of
every problem per distinct score.
"""

from __future__ import annotations

from typing import Any

from ...core.validate import check_vector_lengths, rules
from ...errors import VECTORS_EXPECTED, column_not_found, column_type

__all__ = ["column_kind", "quote", "check_schema", "prepared", "problem_flags", "combined",
           "any_problem", "vector_element", "with_vector_element", "is_vector_udt",
           "vector_array", "vector_length_counts", "common_length"]


def column_kind(dtype: Any) -> str:
    from pyspark.sql import types as T

    if isinstance(dtype, (T.NumericType, T.BooleanType, T.NullType)):
        return "number"
    if isinstance(dtype, (T.StringType, T.VarcharType, T.CharType)):
        return "text"
    return "other"


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def check_schema(df: Any, columns: dict[str, str]) -> dict[str, str]:
    fields = {f.name: f.dataType for f in df.schema.fields}
    kinds = {}
    for role, name in columns.items():
        if name not in fields:
            raise column_not_found(name, role, fields)
        kinds[role] = column_kind(fields[name])
        if kinds[role] == "other":
            raise column_type(name, role, fields[name].simpleString())
    return kinds


def prepared(df: Any, columns: dict[str, str], kinds: dict[str, str],
             extra: tuple[Any, ...] = ()) -> Any:
    """One double column per role (null for null/text) and a text flag per text column.

    ``extra`` columns (e.g. segment keys) are selected as they are, after those.

    Integer and boolean labels travel as 4-byte floats (exact for 0/1, and
    any integer beyond that is outside [0, 1] either way): a quarter less to
    shuffle and to hand to Python.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    cols = []
    for role, name in columns.items():
        small = role == "label" and isinstance(fields[name], (T.IntegralType, T.BooleanType))
        cols.append(F.expr(f"try_cast({quote(name)} AS {'FLOAT' if small else 'DOUBLE'})")
                    .alias(role))
        if kinds[role] == "text":
            cols.append(F.expr(f"{quote(name)} IS NOT NULL AND try_cast({quote(name)} AS DOUBLE) "
                               "IS NULL").alias(f"_text_{role}"))
    return df.select(*cols, *extra)


def problem_flags(columns: dict[str, str], kinds: dict[str, str],
                   finite_scores: bool) -> list[tuple[str, str, Any]]:
    """The validation rules as Spark SQL predicates over the prepared columns."""
    from pyspark.sql import functions as F

    out = []
    for role in columns:
        v = F.col(role)
        text = F.col(f"_text_{role}") if kinds[role] == "text" else F.lit(False)
        for problem, kind in rules(role, finite_scores):
            if kind == "text":
                if kinds[role] != "text":
                    continue
                cond = text
            elif kind == "null":
                cond = (v.isNull() | F.isnan(v)) & ~text
            elif kind == "inf":
                cond = F.abs(v) == float("inf")
            elif kind == "range01":
                cond = (v < 0.0) | (v > 1.0)
            else:  # negative
                cond = v < 0.0
            out.append((role, problem, F.coalesce(cond, F.lit(False))))
    return out


def combined(rows: Any, columns: dict[str, str], kinds: dict[str, str],
             finite_scores: bool, score_role: str, label_role: str,
             hot: list[float] | None = None) -> tuple[Any, list[Any]]:
    """Map-side combine: one row per distinct score with sums and problem counts.

    With ``hot`` (a few scores that hold many rows each), only the rows with
    those scores are grouped; every other row becomes a group of one with the
    same columns (no shuffle for a groupBy that would not shrink it). Either
    way the executors see rows of (score, sums, counts) and pool equal scores.
    """
    from pyspark.sql import functions as F

    flags = problem_flags(columns, kinds, finite_scores)
    bad = any_problem(flags)
    w = F.col("weight") if "weight" in columns else F.lit(1.0)
    y = F.col(label_role)
    live = ~bad & (w > 0)

    def s(expr: Any) -> Any:
        return F.when(live, expr).otherwise(F.lit(0.0))

    def count(cond: Any) -> Any:
        return F.when(cond, 1).otherwise(0)

    # (name, the row's value, a count?): summed per distinct score.
    terms = [("W", s(w), False), ("Y", s(w * y), False), ("n", count(live), True),
             ("ysum", s(y), False),
             ("nonbinary", count(live & (y != 0.0) & (y != 1.0)), True),
             ("wyy", s(w * y * y), False), ("rows", F.lit(1), True),
             ("invalid", count(bad), True)]
    terms += [(f"_p{i}", count(cond), True) for i, (_, _, cond) in enumerate(flags)]
    aggs = [F.sum(e).cast("long" if is_count else "double").alias(name)
            for name, e, is_count in terms]
    keys = [(role, problem) for role, problem, _ in flags]
    if not hot:
        # NaN and null scores form groups of their own (all invalid rows).
        return rows.groupBy(F.col(score_role).alias("s")).agg(*aggs), keys
    is_hot = F.coalesce(F.col(score_role).isin(*hot), F.lit(False))
    grouped = rows.where(is_hot).groupBy(F.col(score_role).alias("s")).agg(*aggs)
    singles = rows.where(~is_hot).select(
        F.col(score_role).alias("s"),
        *[e.cast("long" if is_count else "double").alias(name) for name, e, is_count in terms])
    return grouped.unionByName(singles), keys


def any_problem(flags: list[tuple[str, str, Any]]) -> Any:
    """One boolean column: the row has at least one of the problems."""
    from pyspark.sql import functions as F

    bad = F.lit(False)
    for _, _, cond in flags:
        bad = bad | cond
    return bad


def vector_element(df: Any, name: str, index: int, role: str = "score") -> Any:
    """Element ``index`` of the vectors in column ``name`` as a double column, in the JVM.

    ``ArrayType`` of numbers, or pyspark.ml's ``VectorUDT`` (dense or
    sparse, through ``vector_to_array``): the element is taken by Spark's
    own operators, so no Python UDF sees the vectors. Before that, one
    aggregation counts the vectors by length, for the same ``DataError``
    as the other engines (unequal lengths, index out of range). Null
    vectors and null elements give null (a null score to the row checks).
    """
    fields = {f.name: f.dataType for f in df.schema.fields}
    if name not in fields:
        raise column_not_found(name, role, fields)
    arr = vector_array(df, name)
    if arr is None:
        raise column_type(name, role, fields[name].simpleString(), VECTORS_EXPECTED)
    counts = vector_length_counts(df, name)
    check_vector_lengths(name, role, index, counts)
    from pyspark.sql import functions as F

    # get() is null beyond the end (arr[i] raises under ANSI mode); none are, after the check.
    return F.get(arr, index)


def with_vector_element(df: Any, name: str, index: int | None, role: str = "score") -> Any:
    """``df`` with column ``name`` replaced by element ``index`` of its vectors (None: as is).

    Keeping the column's name keeps every later message about the rows
    (nulls, ranges) in the user's words.
    """
    if index is None:
        return df
    return df.withColumn(name, vector_element(df, name, index, role))


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

    dtype = {f.name: f.dataType for f in df.schema.fields}[name]
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


def common_length(counts: dict[int, int]) -> int:
    """The most common vector length (0 if none), ties to the shortest (as ``argmax`` of
    :func:`distcal.core.rows.vector_lengths`)."""
    return max(counts, key=lambda n: (counts[n], -n)) if counts else 0
