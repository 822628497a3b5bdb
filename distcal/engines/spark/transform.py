"""Applying binary maps to a Spark DataFrame inside the JVM (no Python worker).

Platt's sigmoid and beta calibration are one SQL expression each. Every
other map, a Venn-Abers predictor's too, is piecewise
(:mod:`distcal.core.piecewise`): sorted split points and, for the piece
``b`` = number of split points <= s, a line ``y0 + slope * (s - x0)`` (a
constant where the slope is 0), with the values at s = -inf / +inf of an
end block that has no finite knot. A binary search in the JVM finds the
piece (Spark ML's Bucketizer for one map, SQL for one map per segment);
the rows never reach a Python worker, which keeps transform + write as
fast as MLlib's.

* One map (:func:`transform`): one Bucketizer over its split points, and
  the pieces' (x0, y0, slope) as three constant arrays indexed by the bucket.
* One map per segment (:func:`transform_segmented`): a small table (key,
  the map's split points and its pieces' x0, y0, slope as arrays, the
  values at s = -inf / +inf) is joined to the data on the ``by`` columns (a
  broadcast hash join); rows whose key is null or not a fitted segment,
  and segments that fall back, take the global map's arrays as constants
  (one map's, as :func:`transform` uses them). The piece, i = #{split
  points <= s}, is a binary search in SQL over the row's own split points
  (binary lifting: ceil(log2(largest map + 1)) steps of one
  ``try_element_at`` and one comparison), so each search stays in one
  map's array (a few KB, in cache); a search over the union of all maps'
  split points (10^5 doubles) and a second join on the piece cost 2-3x
  more. The tables go to the JVM as Arrow batches (local relations): as
  constant arrays, ~10^5 pieces would be printed into every plan
  description (10 MB a query at 10,000 segments) and shipped in every
  task.

The output keeps every input column and adds a double column; an
``output_col`` that exists already is a ``DataError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.distinct import starts_of_runs
from ...core.piecewise import Piecewise, piecewise
from ..base import check_transform_columns
from .schema import check_scores, fields_of, quote, vector_element, wall_clock

__all__ = ["transform", "transform_segmented"]


def _form(model: Any) -> Piecewise:
    pw = piecewise(model)
    assert pw is not None, model.method  # every map but sigmoid is piecewise
    return pw


def _pieces(pw: Piecewise) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(split points U, strictly ascending; x0, y0, slope of the |U| + 1 buckets).

    Bucketizer's bucket b of s is the number of points of U <= s. A map
    whose leaves count ``t < s`` (``right=False``) counts ``nextafter(t, inf)
    <= s`` instead, the same for doubles; repeated split points leave empty
    leaves, skipped: bucket b is the leaf ``#{t <= U[b-1]}``.
    """
    t = pw.thresholds if pw.right else np.nextafter(pw.thresholds, np.inf)
    u = t[starts_of_runs(t)]  # t ascending
    leaf = np.concatenate(([0], np.searchsorted(t, u, side="right")))
    slope = np.where(pw.constant, 0.0, pw.slope)
    return u, pw.x0[leaf], pw.y0[leaf], slope[leaf]


def _fresh_names(names: list[str], taken: set[str]) -> list[str]:
    """Internal column names that clash neither with ``taken`` nor with each other."""
    out = []
    for name in names:
        while name in taken:
            name = "_" + name
        taken.add(name)
        out.append(name)
    return out


def _check(df: Any, score_col: str, output_col: str, vectors: bool = False,
           by: tuple[str, ...] = ()) -> dict[str, Any]:
    fields = fields_of(df)
    check_transform_columns(list(fields), {score_col: "score"})
    if not vectors:
        check_scores(df, [score_col])
    check_transform_columns(list(fields), dict.fromkeys(by, "segment"), output_col)
    return fields


def _value(p: Any, sv: Any, at_neg_inf: Any, at_pos_inf: Any) -> Any:
    """``p`` with the ends' values at s = -inf / +inf (where given) and NULL / NaN kept."""
    from pyspark.sql import functions as F

    if at_neg_inf is not None:
        p = F.when(at_neg_inf.isNotNull() & (sv == float("-inf")), at_neg_inf).otherwise(p)
    if at_pos_inf is not None:
        p = F.when(at_pos_inf.isNotNull() & (sv == float("inf")), at_pos_inf).otherwise(p)
    return (F.when(sv.isNull(), F.lit(None).cast("double"))
            .when(F.isnan(sv), F.lit(float("nan"))).otherwise(p))


def _line(x0: Any, y0: Any, sl: Any, sv: Any) -> Any:
    """``np.interp``'s formula on a piece; the constant y0 where the slope is 0."""
    from pyspark.sql import functions as F

    return F.when(sl == 0.0, y0).otherwise(sl * (sv - x0) + y0)


def transform(model: Any, df: Any, score_col: str, output_col: str,
              score_index: int | None = None) -> Any:
    """Add ``output_col`` = model.predict(score_col), lazily, inside the JVM.

    With ``score_index`` the score is that element of the vectors in
    ``score_col`` (:func:`.schema.vector_element`, one aggregation to check
    their lengths first).
    """
    from pyspark.sql import functions as F

    fields = _check(df, score_col, output_col, vectors=score_index is not None)
    names = list(fields)
    keep = [F.col(quote(n)) for n in names]
    s = (F.col(quote(score_col)).cast("double") if score_index is None
         else vector_element(df, score_col, score_index))
    if model.method == "sigmoid":
        a, b = float(model.params["a"]), float(model.params["b"])
        return df.select(*keep, (F.lit(1.0) / (F.lit(1.0) + F.exp(_times(s, F.lit(a))
                                                                 + F.lit(b))))
                         .alias(output_col))
    if model.method == "beta":
        return df.select(*keep, beta_column(s, *(float(model.params[k]) for k in "abc"))
                         .alias(output_col))
    pw = _form(model)
    u, x0, y0, sl = _pieces(pw)
    cs, cb = _fresh_names(["_s", "_b"], set(names))
    # -0.0 as 0.0: Bucketizer's binary search (Java's) puts -0.0 below a split at 0.0.
    s = F.when(s == 0.0, F.lit(0.0)).otherwise(s)
    staged, sv = df.select(*keep, s.alias(cs)), F.col(cs)
    if u.shape[0] == 0:  # one piece: a constant (Bucketizer needs two buckets)
        p = F.lit(float(y0[0]))
    else:
        staged = _bucketize(staged, [-np.inf, *u.tolist(), np.inf], cs, cb)
        i = F.col(cb).cast("int") + F.lit(1)
        cx0, cy0, csl = (F.try_element_at(_const_array(df.sparkSession, v.tolist()), i)
                         for v in (x0, y0, sl))
        p = _line(cx0, cy0, csl, sv)
    ends = [None if v is None else F.lit(v) for v in (pw.at_neg_inf, pw.at_pos_inf)]
    return staged.select(*keep, _value(p, sv, *ends).alias(output_col))


def _times(s: Any, a: Any) -> Any:
    """a s, 0 where a = 0 (a sigmoid fitted on one distinct score is the constant map, at
    s = +-inf too, where 0 * inf is NaN); null and NaN scores stay null and NaN."""
    from pyspark.sql import functions as F

    return F.when(a == F.lit(0.0), F.when(s.isNull() | F.isnan(s), s).otherwise(F.lit(0.0))
                  ).otherwise(s * a)


def beta_column(s: Any, a: Any, b: Any, c: Any) -> Any:
    """Beta calibration of the score column ``s`` (:func:`distcal.core.beta.beta_predict`).

    ``a``, ``b``, ``c``: numbers or columns. Clipped to [1e-12, 1 - 1e-12]
    after the null and NaN tests (greatest() skips nulls, and Spark orders NaN
    above every number, so least() would turn it into 1 - 1e-12).
    """
    from pyspark.sql import functions as F

    from ...core.beta import CLIP

    def lit(v: Any) -> Any:
        return F.lit(v) if isinstance(v, float) else v

    clipped = F.least(F.greatest(s, F.lit(CLIP)), F.lit(1.0 - CLIP))
    z = lit(a) * F.log(clipped) - lit(b) * F.log(F.lit(1.0) - clipped) + lit(c)
    return (F.when(s.isNull(), F.lit(None).cast("double"))
            .when(F.isnan(s), F.lit(float("nan")))
            .otherwise(F.lit(1.0) / (F.lit(1.0) + F.exp(-z))))


def transform_segmented(model: Any, df: Any, score_col: str, output_col: str) -> Any:
    """Add ``output_col`` lazily, in the JVM: broadcast joins and SQL.

    Each row gets its segment's map (its split points and pieces as arrays,
    or Platt's / beta's parameters) from a broadcast join on the ``by``
    columns; rows with no fitted segment take the global map's, as
    constants. A piecewise map's piece is found by a binary search in SQL
    over the row's split points (module docstring).
    Keys of another type than the model's are a ``DataError`` from the
    columns' types, before any job.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = _check(df, score_col, output_col, by=tuple(model.by))
    model.check_column_types(fields)  # keys of another type would match no segment
    names = list(fields)
    spark = df.sparkSession
    nk = len(model.by)
    formula = model.method in ("sigmoid", "beta")
    base = {"sigmoid": ["_a", "_b"], "beta": ["_a", "_b", "_c"]}.get(
        model.method, ["_u", "_x0", "_y0", "_sl", "_lo", "_hi"])
    fresh = _fresh_names(["_s", "_i", *base, *[f"_k{i}" for i in range(nk)]], set(names))
    cs, ci, cv, ck = fresh[0], fresh[1], fresh[2:2 + len(base)], fresh[2 + len(base):]
    seg = model.segments
    keys = list(seg.loc[~seg["fallback"], model.by].itertuples(index=False, name=None))
    if not keys:  # every segment fell back (or every key was null): the global map
        return transform(model.global_model, df, score_col, output_col)
    maps = [model.segment(tuple(k)) for k in keys] + [model.global_model]
    values = _map_values(maps, formula)
    ntz = T.TimestampNTZType()  # TIMESTAMP keys compared as wall-clock times (as fitted)
    table = _table(spark, keys, [ntz if isinstance(fields[b], T.TimestampType) else fields[b]
                                 for b in model.by], ck, cv, [v[:-1] for v in values])
    cond = None
    for j, name in enumerate(model.by):
        eq = wall_clock(df[quote(name)], fields[name]) == table[ck[j]]
        cond = eq if cond is None else cond & eq
    joined = df.join(F.broadcast(table), on=cond, how="left")
    # Unmatched rows (null or unseen keys, segments that fall back) take the
    # global map, as constants; a matched row's first value is never null.
    matched = table[cv[0]].isNotNull()
    staged = joined.select(*[df[quote(n)] for n in names],
                           F.col(quote(score_col)).cast("double").alias(cs),
                           *[F.when(matched, table[c]).otherwise(_constant(spark, v[-1])).alias(c)
                             for c, v in zip(cv, values)])
    sv, v = F.col(cs), [F.col(c) for c in cv]
    ends: list[Any] = [None, None]  # the values at s = -inf / +inf, for piecewise maps
    if model.method == "sigmoid":
        p = F.lit(1.0) / (F.lit(1.0) + F.exp(_times(sv, v[0]) + v[1]))
    elif model.method == "beta":
        p = beta_column(sv, *v)
    else:
        # i = #{split points <= s}, by binary lifting: add each power of two,
        # largest first, while the split point it reaches is <= s (null past
        # the end of the array, or for a null s: not <= s).
        staged = staged.withColumn(ci, F.lit(0))
        for k in reversed(range(max(u.shape[0] for u in values[0]).bit_length())):
            nxt = F.col(ci) + F.lit(1 << k)
            staged = staged.withColumn(
                ci, F.when(F.try_element_at(v[0], nxt) <= sv, nxt).otherwise(F.col(ci)))
        i = F.col(ci) + F.lit(1)
        x0, y0, sl = (F.try_element_at(c, i) for c in v[1:4])
        p = _line(x0, y0, sl, sv)
        ends = v[4:]
    return staged.select(*[F.col(quote(n)) for n in names],
                         _value(p, sv, *ends).alias(output_col))


def _map_values(maps: list[Any], formula: bool) -> list[list[Any]]:
    """Per column, each map's value: Platt's (a, b) or beta's (a, b, c); else the
    split points U and the pieces' x0, y0, slope (:func:`_pieces`) and the values
    at s = -inf / +inf (None: the end piece's)."""
    if formula:
        ks = "abc" if maps[0].method == "beta" else "ab"
        return [[float(m.params[k]) for m in maps] for k in ks]
    forms = [_form(m) for m in maps]
    pieces = [_pieces(pw) for pw in forms]
    return [*([p[i] for p in pieces] for i in range(4)),
            [pw.at_neg_inf for pw in forms], [pw.at_pos_inf for pw in forms]]


def _table(spark: Any, keys: list[tuple[Any, ...]], key_types: list[Any], key_cols: list[str],
           cols: list[str], values: list[list[Any]]) -> Any:
    """(key..., values...) as a Spark table, sent as one Arrow batch.

    ``values``: per column, a double (or None) or an array of doubles per
    key. Built with Arrow it is a local relation: a list of rows would be a
    Python RDD, run by Python workers when broadcast; nor are its rows
    printed in the plan (as literals they would be: 10 MB a query).
    """
    import pyarrow as pa
    from pyspark.sql import types as T

    # Column by column from Python values (pa.array keeps a NaN key a NaN,
    # as Spark's own key column has it; pandas' conversion would make it null).
    arrays = [pa.array([k[i] for k in keys]) for i in range(len(key_cols))]
    fields = [T.StructField(c, t, True) for c, t in zip(key_cols, key_types)]
    for c, vs in zip(cols, values):
        if isinstance(vs[0], np.ndarray):
            lengths = np.array([a.shape[0] for a in vs], dtype=np.int32)
            offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))
            arrays.append(pa.ListArray.from_arrays(
                offsets, pa.array(np.concatenate(vs).astype(np.float64))))
            fields.append(T.StructField(c, T.ArrayType(T.DoubleType(), False), True))
        else:
            arrays.append(pa.array(vs, pa.float64()))
            fields.append(T.StructField(c, T.DoubleType(), True))
    return spark.createDataFrame(pa.table(arrays, names=[*key_cols, *cols]),
                                 T.StructType(fields))


def _constant(spark: Any, value: Any) -> Any:
    """A number, null or constant array<double> column."""
    from pyspark.sql import functions as F

    if isinstance(value, np.ndarray):
        return _const_array(spark, value.tolist())
    return F.lit(value).cast("double")


def _java_doubles(spark: Any, values: Any) -> Any:
    """A Java double[] of ``values`` in three py4j calls, whatever the length.

    (py4j converts a Python list element by element: 0.3 s for 1000 values.)
    """
    sc = spark.sparkContext
    raw = bytearray(np.asarray(values, dtype=">f8").tobytes())
    arr = sc._gateway.new_array(sc._jvm.double, len(values))
    sc._jvm.java.nio.ByteBuffer.wrap(raw).asDoubleBuffer().get(arr)
    return arr


def _const_array(spark: Any, values: list[float]) -> Any:
    """A constant array<double> column: one literal, cheap to build and to analyse."""
    from pyspark.sql import functions as F

    try:
        from pyspark.sql.column import Column

        jvm = spark.sparkContext._jvm
        return Column(jvm.org.apache.spark.sql.functions.lit(_java_doubles(spark, values)))
    except AttributeError:  # Spark Connect: the same literal as SQL text
        return F.expr("array(" + ", ".join(f"{v!r}D" for v in values) + ")")


def _bucketize(df: Any, splits: list[float], col: str, out: str) -> Any:
    """Spark ML's Bucketizer (binary search in the JVM) adding ``out`` from ``col``.

    The splits go to the JVM as one byte array: pyspark's Bucketizer sends a
    list element by element over py4j, which took 0.3 s for 1000 splits.
    """
    from pyspark.sql import DataFrame

    try:
        jvm = df.sparkSession.sparkContext._jvm
        jb = (jvm.org.apache.spark.ml.feature.Bucketizer()
              .setSplits(_java_doubles(df.sparkSession, splits)).setInputCol(col)
              .setOutputCol(out).setHandleInvalid("keep"))
        return DataFrame(jb.transform(df._jdf), df.sparkSession)
    except AttributeError:  # Spark Connect: no JVM on the client
        from pyspark.ml.feature import Bucketizer

        return Bucketizer(splits=splits, inputCol=col, outputCol=out,
                          handleInvalid="keep").transform(df)
