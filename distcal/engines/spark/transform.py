"""Applying a fitted map to a Spark DataFrame inside the JVM (no Python worker)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from ...errors import column_not_found, column_type, output_column_exists
from .schema import column_kind, quote, vector_element

__all__ = ["transform"]


def transform(model: Any, df: Any, score_col: str, output_col: str,
              score_index: int | None = None) -> Any:
    """Add ``output_col`` = model.predict(score_col), lazily, inside the JVM.

    The map is small (knots or bin edges), so it is evaluated with Spark's
    own operators: Bucketizer's binary search over the knots, the knot
    values as constant arrays indexed by the bucket, and the interpolation
    as a SQL expression (``np.interp``'s formula); Platt's sigmoid is one
    expression. No Python worker touches the rows, which keeps transform +
    write as fast as MLlib's. The output keeps every input column and adds a
    double column; an ``output_col`` that exists already is a ``DataError``.
    With ``score_index`` the score is that element of the vectors in
    ``score_col`` (:func:`.schema.vector_element`, one aggregation to check
    their lengths first).
    """
    from pyspark.sql import functions as F

    fields = {f.name: f.dataType for f in df.schema.fields}
    if score_col not in fields:
        raise column_not_found(score_col, "score", fields)
    if score_index is None and column_kind(fields[score_col]) != "number":
        raise column_type(score_col, "score", fields[score_col].simpleString())
    if output_col in fields:
        raise output_column_exists(output_col)
    keep = [F.col(quote(f.name)) for f in df.schema.fields]
    s = (F.col(quote(score_col)).cast("double") if score_index is None
         else vector_element(df, score_col, score_index))
    if model.method == "sigmoid":
        a, b = float(model.params["a"]), float(model.params["b"])
        prob = F.lit(1.0) / (F.lit(1.0) + F.exp(s * F.lit(a) + F.lit(b)))
        return df.select(*keep, prob.alias(output_col))
    if model.method == "beta":
        return df.select(*keep, beta_column(s, *(float(model.params[k]) for k in "abc"))
                         .alias(output_col))
    if model.method == "venn_abers":
        return _transform_venn_abers(model, df, s, keep, output_col)
    return _transform_by_table(model, df, s, keep, output_col)


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


def _transform_venn_abers(model: Any, df: Any, s: Any, keep: list, output_col: str) -> Any:
    """p1 / (1 - p0 + p1) in the JVM: one Bucketizer per step function.

    p0 = v0[#{x0 <= s} - 1] (0 below), Bucketizer's bucket on s; p1 =
    v1[#{x1 < s}] (1 above), the bucket of -s among -x1 (``#{x1 < s} = m -
    #{-x1 <= -s}``). Infinite thresholds (infinite calibration scores)
    become explicit cases: Bucketizer's splits are finite between -inf and inf.
    """
    from pyspark.sql import functions as F

    st = model._steps
    x0, v0, below0, inf0 = st.x0, st.v0, 0.0, None
    if x0[0] == -np.inf:  # every score is >= -inf: the lowest step applies below
        x0, v0, below0 = x0[1:], v0[1:], float(v0[0])
    if x0.shape[0] and x0[-1] == np.inf:  # only s = +inf reaches it
        x0, v0, inf0 = x0[:-1], v0[:-1], float(v0[-1])
    x1, v1, above1, neg1 = st.x1, st.v1, 1.0, None
    if x1[-1] == np.inf:
        x1, v1, above1 = x1[:-1], v1[:-1], float(v1[-1])
    if x1.shape[0] and x1[0] == -np.inf:
        x1, v1, neg1 = x1[1:], v1[1:], float(v1[0])
    spark = df.sparkSession
    base = df.select(*keep, s.alias("_s")).withColumn("_neg", -F.col("_s"))
    sv = F.col("_s")

    def lookup(splits: np.ndarray, col: str, out: str, values: list[float], base: Any,
               offset: Any) -> tuple[Any, Any]:
        if splits.shape[0] == 0:  # one value for every score
            return base, F.lit(values[0])
        base = _bucketize(base, [-np.inf, *splits.tolist(), np.inf], col, out)
        return base, F.try_element_at(_const_array(spark, values), offset(F.col(out)))

    m1 = x1.shape[0]
    base, p0 = lookup(x0, "_s", "_b0", [below0, *v0.tolist()],
                      base, lambda b: b.cast("int") + F.lit(1))
    base, p1 = lookup(-x1[::-1], "_neg", "_b1", [*v1.tolist(), above1], base,
                      lambda b: F.lit(m1 + 1) - b.cast("int"))
    if inf0 is not None:
        p0 = F.when(sv == float("inf"), F.lit(inf0)).otherwise(p0)
    if neg1 is not None:
        p1 = F.when(sv == float("-inf"), F.lit(neg1)).otherwise(p1)
    p = p1 / (F.lit(1.0) - p0 + p1)
    p = (F.when(sv.isNull(), F.lit(None).cast("double"))
         .when(F.isnan(sv), F.lit(float("nan"))).otherwise(p))
    return base.select(*keep, p.alias(output_col))


def _knot_table(model: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """(sorted split points, values, how to read them) for the piecewise map."""
    if model.method == "histogram":
        edges = np.asarray(model.params["edges"], dtype=np.float64)
        return edges, np.asarray(model.params["bin_prob"], dtype=np.float64), "bins"
    b = _block_arrays(model)
    if model.method == "modl" or model.params.get("interpolation", "linear") == "step":
        return b.score_min, b.prob, "step"
    x, y = model.knots()  # finite knots, ascending ("linear" or "centered")
    xs, first = np.unique(x, return_index=True)
    return xs, y[first], "linear"


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


def _bucketize(df: Any, splits: list[float], col: str, out: str = "_b") -> Any:
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


def _transform_by_table(model: Any, df: Any, s: Any, keep: list, output_col: str) -> Any:
    """Piecewise maps: Bucketizer finds the piece, one constant array lookup its line.

    Each bucket carries (x0, y0, slope); the value is ``slope * (s - x0) + y0``
    (``np.interp``'s formula, slope computed by numpy the same way) or the
    constant y0 where the slope is 0 (ends, steps, bins).
    """
    from pyspark.sql import functions as F

    xs, ys, kind = _knot_table(model)
    blocks = _block_arrays(model)
    nan = F.lit(float("nan"))
    base = df.select(*keep, s.alias("_s"))
    col_in = "_s"
    if kind == "bins":
        # searchsorted(edges[1:-1], s) puts s on an inner edge in the lower bin:
        # intervals (u_{j-1}, u_j] over the distinct inner edges u, which is
        # Bucketizer's [a, b) on -s. Interval j maps to the bin searchsorted gives.
        inner = xs[1:-1]
        u = np.unique(inner)
        interval_bin = np.append(np.searchsorted(inner, u), inner.shape[0])
        splits = [-np.inf, *(-u[::-1]).tolist(), np.inf]
        base = base.withColumn("_neg", -F.col("_s"))
        col_in, m = "_neg", u.shape[0]
        pieces = [(0.0, float(ys[interval_bin[m - k]]), 0.0) for k in range(m + 1)]
    elif kind == "step":
        # value of the highest block with score_min <= s; the lowest below the range
        splits = [-np.inf, *xs[1:].tolist(), np.inf]
        pieces = [(0.0, float(y), 0.0) for y in ys]
    else:
        if xs.shape[0] == 0:  # every fitted score was infinite
            p = F.when(F.col("_s") > 0, F.lit(float(blocks.prob[-1]))).otherwise(
                F.lit(float(blocks.prob[0])))
            return base.select(*keep, F.when(F.isnan("_s"), nan).otherwise(p)
                               .alias(output_col))
        splits = [-np.inf, *xs.tolist(), np.inf]
        # bucket k in 1..n-1 lies between knots k-1 and k; 0 and n are the clipped ends
        slopes = (ys[1:] - ys[:-1]) / (xs[1:] - xs[:-1])
        pieces = [(0.0, float(ys[0]), 0.0)]
        pieces += [(float(x0), float(y0), float(sl))
                   for x0, y0, sl in zip(xs[:-1], ys[:-1], slopes)]
        pieces.append((0.0, float(ys[-1]), 0.0))
    if len(pieces) == 1:  # one block or bin: a constant (Bucketizer needs two buckets)
        sv = F.col("_s")
        p = F.when(sv.isNull(), F.lit(None).cast("double")).when(F.isnan(sv), nan) \
            .otherwise(F.lit(pieces[0][1]))
        return base.select(*keep, p.alias(output_col))
    bucketed = _bucketize(base, splits, col_in)
    # The pieces as constant arrays indexed by the bucket.
    i = F.col("_b").cast("int") + F.lit(1)
    x0, y0, sl = (F.try_element_at(_const_array(df.sparkSession, [pc[j] for pc in pieces]), i)
                  for j in range(3))
    sv = F.col("_s")
    p = F.when(sl == 0.0, y0).otherwise(sl * (sv - x0) + y0)
    if kind == "linear":
        # an end block without a finite knot (only -inf/+inf scores, or an
        # infinite centered mean) is reached by s = -inf/+inf only
        low, high = model.end_knots()
        if not np.isfinite(low):
            p = F.when(sv == float("-inf"), F.lit(float(blocks.prob[0]))).otherwise(p)
        if not np.isfinite(high):
            p = F.when(sv == float("inf"), F.lit(float(blocks.prob[-1]))).otherwise(p)
    p = F.when(sv.isNull(), F.lit(None).cast("double")).when(F.isnan(sv), nan).otherwise(p)
    return bucketed.select(*keep, p.alias(output_col))


def _block_arrays(model: Any) -> SimpleNamespace:
    """The model's blocks as numpy arrays by column name."""
    b = model.blocks
    return SimpleNamespace(**{c: b[c].to_numpy() for c in b.columns})
