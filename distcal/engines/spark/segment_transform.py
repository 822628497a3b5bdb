"""Applying a per-segment model to a Spark DataFrame inside the JVM (no Python worker).

Every segment's map is piecewise: sorted split points ``xs`` and, for the
piece ``b`` = number of split points <= s (< s for histogram bins), a line
``y0 + slope * (s - x0)``. A small table (key, segment number g) is joined
to the data on the ``by`` columns (a broadcast hash join). Two of Spark
ML's Bucketizers (binary search in the JVM) then find the piece of every
row exactly: the first gives j, the bucket of s among U, the sorted union of
all segments' split points; since a segment's split points are among U, its
piece is constant on each bucket, and segment g's pieces are intervals of
``z = g * (|U| + 2) + j``, disjoint across segments. The second Bucketizer,
over the starts of every segment's pieces, gives the piece, whose line is
read from constant arrays (as :mod:`.transform` does for one map). Rows
whose key is null or not a fitted segment, and segments that fall back, get
the global map, computed by the unsegmented transform.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import column_not_found, output_column_exists
from .schema import quote
from .transform import _bucketize, _const_array
from .transform import transform as transform_global

__all__ = ["transform_segmented", "pieces"]

def pieces(model: Any) -> dict[str, Any]:
    """The piecewise form of one map (module docstring), as plain lists.

    Same values as ``model.predict``: the pieces are built from the same
    knots, blocks or bins, and the ends (scores beyond the knots, ±inf when
    an end block has no finite knot) are explicit.
    """
    nan = None
    if model.method == "sigmoid":
        return {"xs": [], "x0": [0.0], "y0": [0.0], "sl": [0.0], "strict": False,
                "lo_p": nan, "hi_p": nan, "a": float(model.params["a"]),
                "b": float(model.params["b"])}
    out: dict[str, Any] = {"strict": False, "lo_p": nan, "hi_p": nan, "a": nan, "b": nan}
    if model.method == "histogram":
        # bin = searchsorted(edges[1:-1], s, "left") = number of inner edges < s
        inner = np.asarray(model.params["edges"], dtype=np.float64)[1:-1]
        rate = np.asarray(model.params["bin_prob"], dtype=np.float64)
        out.update(xs=inner.tolist(), x0=[0.0] * len(rate), y0=rate.tolist(),
                   sl=[0.0] * len(rate), strict=True)
        return out
    b = model._fitted_blocks()
    if model.method == "modl" or model.params.get("interpolation", "linear") == "step":
        # value of the highest block with score_min <= s; the lowest below the range
        out.update(xs=b.score_min[1:].tolist(), x0=[0.0] * len(b), y0=b.prob.tolist(),
                   sl=[0.0] * len(b))
        return out
    x, y = model.knots()
    xs, first = np.unique(x, return_index=True)
    ys = y[first]
    if xs.shape[0] == 0:  # every fitted score was infinite: s > 0 gets the highest block
        out.update(xs=[0.0], x0=[0.0, 0.0], y0=[float(b.prob[0]), float(b.prob[-1])],
                   sl=[0.0, 0.0], strict=True)
        return out
    slopes = (ys[1:] - ys[:-1]) / (xs[1:] - xs[:-1])
    out.update(xs=xs.tolist(), x0=[0.0, *xs[:-1].tolist(), 0.0],
               y0=[float(ys[0]), *ys[:-1].tolist(), float(ys[-1])],
               sl=[0.0, *slopes.tolist(), 0.0])
    low, high = model.end_knots()
    if not np.isfinite(low):
        out["lo_p"] = float(b.prob[0])
    if not np.isfinite(high):
        out["hi_p"] = float(b.prob[-1])
    return out


def _key_table(model: Any, key_types: list[Any]) -> tuple[list[tuple[Any, ...]], Any, list[Any]]:
    """Rows (key..., segment number) of the fitted segments, their schema, their maps."""
    from pyspark.sql import types as T

    seg = model.segments
    keys = list(seg.loc[~seg["fallback"], model.by].itertuples(index=False, name=None))
    schema = T.StructType([T.StructField(f"_k{i}", t, True) for i, t in enumerate(key_types)]
                          + [T.StructField("_g", T.IntegerType(), False)])
    return ([(*k, g) for g, k in enumerate(keys)], schema,
            [model.segment(tuple(k)) for k in keys])


def _piece_layout(maps: list[Any]) -> dict[str, Any]:
    """All segments' pieces on one line, for two Bucketizers (module docstring).

    Split points are made non-strict (``x < s`` is ``nextafter(x, inf) <= s``
    for doubles), U is their sorted union, and segment g's piece k starts at
    ``g * M + (position in U of its (k-1)-th split point) + 1``.
    """
    parts = [pieces(m) for m in maps]
    splits = []
    for p in parts:
        sp = np.asarray(p["xs"], dtype=np.float64)
        if p["strict"]:
            sp = np.nextafter(sp, np.inf)
        u = np.unique(sp)
        if u.shape[0] < sp.shape[0]:  # repeated split points: the pieces between are empty
            keep = np.concatenate(([0], np.searchsorted(sp, u, side="right")))
            for f in ("x0", "y0", "sl"):
                p[f] = np.asarray(p[f])[keep].tolist()
        splits.append(u)
    union = np.unique(np.concatenate(splits)) if splits else np.zeros(0)
    m = float(union.shape[0] + 2)  # buckets 0..|U| and NaN's |U| + 1
    starts = [g * m + np.concatenate(([0.0], np.searchsorted(union, sp) + 1.0))
              for g, sp in enumerate(splits)]
    nan = float("nan")
    return {"union": union, "m": m, "starts": np.concatenate(starts) if starts else starts,
            "x0": [v for p in parts for v in p["x0"]], "y0": [v for p in parts for v in p["y0"]],
            "sl": [v for p in parts for v in p["sl"]],
            "lo_p": [nan if p["lo_p"] is None else p["lo_p"] for p in parts],
            "hi_p": [nan if p["hi_p"] is None else p["hi_p"] for p in parts]}


def transform_segmented(model: Any, df: Any, score_col: str, output_col: str) -> Any:
    """Add ``output_col`` lazily, in the JVM: a broadcast join and SQL (module docstring)."""
    from pyspark.sql import functions as F

    fields = {f.name: f.dataType for f in df.schema.fields}
    for name in model.by:
        if name not in fields:
            raise column_not_found(name, "segment", fields)
    if output_col in fields:
        raise output_column_exists(output_col)
    names = [f.name for f in df.schema.fields]
    glob = "_dc_global"
    while glob in fields:
        glob = "_" + glob
    # The global map for every row (also checks the score column).
    base = transform_global(model.global_model, df, score_col, glob)
    rows, schema, maps = _key_table(model, [fields[b] for b in model.by])
    spark = df.sparkSession
    table = spark.createDataFrame(rows, schema)
    cond = None
    for j, name in enumerate(model.by):
        eq = base[quote(name)] == table[f"_k{j}"]
        cond = eq if cond is None else cond & eq
    joined = base.join(F.broadcast(table), on=cond, how="left")
    keep = [base[quote(n)] for n in names] + [F.col(glob)]
    s = F.col(quote(score_col)).cast("double")
    rows_ = joined.select(*keep, F.col("_g"), s.alias("_s"))
    g1 = F.col("_g") + F.lit(1)
    sv = F.col("_s")

    def const(values: list[float]) -> Any:
        return _const_array(spark, values if len(values) else [0.0])

    if model.method == "sigmoid":
        a = F.try_element_at(const([m.params["a"] for m in maps]), g1)
        b = F.try_element_at(const([m.params["b"] for m in maps]), g1)
        p = F.lit(1.0) / (F.lit(1.0) + F.exp(sv * a + b))
        staged = rows_
    else:
        lay = _piece_layout(maps)
        union = lay["union"]
        if union.shape[0]:
            staged = _bucketize(rows_, [-np.inf, *union.tolist(), np.inf], "_s") \
                .withColumnRenamed("_b", "_j")
        else:
            staged = rows_.withColumn("_j", F.lit(0.0))
        staged = staged.withColumn("_z", F.col("_g").cast("double") * F.lit(lay["m"])
                                   + F.col("_j"))
        staged = _bucketize(staged, [-np.inf, *lay["starts"].tolist(), np.inf], "_z")
        piece = F.col("_b").cast("int")  # 1-based: bucket 0 is below every start
        x0, y0, sl = (F.try_element_at(const(lay[n]), piece) for n in ("x0", "y0", "sl"))
        p = F.when(sl == 0.0, y0).otherwise(sl * (sv - x0) + y0)
        lo_p = F.try_element_at(const(lay["lo_p"]), g1)
        hi_p = F.try_element_at(const(lay["hi_p"]), g1)
        p = F.when(~F.isnan(lo_p) & (sv == float("-inf")), lo_p).otherwise(p)
        p = F.when(~F.isnan(hi_p) & (sv == float("inf")), hi_p).otherwise(p)
    p = (F.when(F.col("_g").isNull(), F.col(glob))  # no fitted segment: the global map
         .when(sv.isNull(), F.lit(None).cast("double"))
         .when(F.isnan(sv), F.lit(float("nan"))).otherwise(p))
    return staged.select(*[F.col(quote(n)) for n in names], p.alias(output_col))
