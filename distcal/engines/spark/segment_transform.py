"""Applying a per-segment model to a Spark DataFrame inside the JVM (no Python worker).

Every segment's map is piecewise: sorted split points ``xs`` and, for the
piece ``b`` = number of split points <= s (< s for histogram bins), a line
``y0 + slope * (s - x0)``. A small table (key, segment number g) is joined
to the data on the ``by`` columns (a broadcast hash join); rows whose key
is null or not a fitted segment, and segments that fall back, get g = G:
the global map is laid out as one more segment. Two of Spark ML's
Bucketizers (binary search in the JVM) then find the piece of every row
exactly: the first gives j, the bucket of s among U, the sorted union of
all maps' split points; since a map's split points are among U, its piece
is constant on each bucket, and map g's pieces are intervals of
``z = g * (|U| + 2) + j``, disjoint across maps. The second Bucketizer,
over the starts of every map's pieces, gives the piece number, and a
broadcast join on it with the table (piece, x0, y0, slope) the line.

Both tables go to the JVM as Arrow batches (local relations): ~10^5 pieces
as constant arrays were printed into every plan description (10 MB a
query at 10,000 segments) and shipped in every task.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import column_not_found, column_type, output_column_exists
from .schema import column_kind, quote
from .transform import _bucketize, beta_column

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


def _segment_maps(model: Any) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """Keys of the fitted segments (numbered g = 0, 1, ... in this order) and their maps."""
    seg = model.segments
    keys = list(seg.loc[~seg["fallback"], model.by].itertuples(index=False, name=None))
    return keys, [model.segment(tuple(k)) for k in keys]


def _key_table(spark: Any, keys: list[tuple[Any, ...]], key_types: list[Any], cols: list[str],
               values: list[Any]) -> Any:
    """(key..., g, per-segment doubles) as a Spark table, sent as one Arrow batch.

    ``cols`` names the columns. Built with Arrow it is a local relation: a
    list of rows would be a Python RDD, run by Python workers when broadcast.
    The per-segment values ride with the key (read once per row, no lookup).
    """
    import pyarrow as pa
    from pyspark.sql import types as T

    nk = len(key_types)
    schema = T.StructType([T.StructField(c, t, True) for c, t in zip(cols, key_types)]
                          + [T.StructField(cols[nk], T.IntegerType(), False)]
                          + [T.StructField(c, T.DoubleType(), True) for c in cols[nk + 1:]])
    # Column by column from Python values (pa.array keeps a NaN key a NaN,
    # as Spark's own key column has it; pandas' conversion would make it null).
    arrays = [pa.array([k[i] for k in keys]) for i in range(nk)]
    arrays.append(pa.array(np.arange(len(keys), dtype=np.int32)))
    arrays += [pa.array([v[i] for v in values], pa.float64()) for i in range(len(cols) - nk - 1)]
    return spark.createDataFrame(pa.table(arrays, names=cols), schema)


def _piece_layout(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """All maps' pieces on one line, for two Bucketizers (module docstring).

    Split points are made non-strict (``x < s`` is ``nextafter(x, inf) <= s``
    for doubles), U is their sorted union, and map g's piece k starts at
    ``g * M + (position in U of its (k-1)-th split point) + 1``, M = |U| + 2.
    """
    splits, x0, y0, sl = [], [], [], []
    for p in parts:
        sp = np.asarray(p["xs"], dtype=np.float64)
        if p["strict"]:
            sp = np.nextafter(sp, np.inf)
        u = np.unique(sp)
        keep: Any = slice(None)
        if u.shape[0] < sp.shape[0]:  # repeated split points: the pieces between are empty
            keep = np.concatenate(([0], np.searchsorted(sp, u, side="right")))
        splits.append(u)
        x0.append(np.asarray(p["x0"], dtype=np.float64)[keep])
        y0.append(np.asarray(p["y0"], dtype=np.float64)[keep])
        sl.append(np.asarray(p["sl"], dtype=np.float64)[keep])
    union = np.unique(np.concatenate(splits))
    m = float(union.shape[0] + 2)  # buckets 0..|U| and NaN's |U| + 1
    starts = np.concatenate([g * m + np.concatenate(([0.0], np.searchsorted(union, sp) + 1.0))
                             for g, sp in enumerate(splits)])
    return {"union": union, "m": m, "starts": starts, "x0": np.concatenate(x0),
            "y0": np.concatenate(y0), "sl": np.concatenate(sl)}


def _piece_table(spark: Any, lay: dict[str, Any], cols: list[str]) -> Any:
    """(piece number 1.., x0, y0, slope) as a Spark table, sent as one Arrow batch.

    A local relation: its rows are neither printed in the plan nor shipped
    in every task (constant arrays of 10^5 doubles were both), and the
    broadcast join on the dense long key is one array index per row.
    """
    import pyarrow as pa

    n = lay["x0"].shape[0]
    table = pa.table([pa.array(np.arange(1, n + 1, dtype=np.int64)), pa.array(lay["x0"]),
                      pa.array(lay["y0"]), pa.array(lay["sl"])], names=cols)
    return spark.createDataFrame(table)


def _fresh_names(names: list[str], taken: set[str]) -> list[str]:
    """Internal column names that clash neither with ``taken`` nor with each other."""
    out = []
    for name in names:
        while name in taken:
            name = "_" + name
        taken.add(name)
        out.append(name)
    return out


def transform_segmented(model: Any, df: Any, score_col: str, output_col: str) -> Any:
    """Add ``output_col`` lazily, in the JVM: broadcast joins, Bucketizers and SQL.

    Rows are numbered by their segment g (a broadcast join on the ``by``
    columns; no fitted segment: g = G, the global map laid out as one more
    segment), two Bucketizers find the piece (module docstring) and a
    broadcast join on the piece number brings its line (x0, y0, slope):
    the value is ``slope * (s - x0) + y0``, or y0 on a constant piece.
    """
    from pyspark.sql import functions as F

    fields = {f.name: f.dataType for f in df.schema.fields}
    if score_col not in fields:
        raise column_not_found(score_col, "score", fields)
    if column_kind(fields[score_col]) != "number":
        raise column_type(score_col, "score", fields[score_col].simpleString())
    for name in model.by:
        if name not in fields:
            raise column_not_found(name, "segment", fields)
    model.check_column_types(fields)  # keys of another type would match no segment
    if output_col in fields:
        raise output_column_exists(output_col)
    names = [f.name for f in df.schema.fields]
    spark = df.sparkSession
    sigmoid = model.method == "sigmoid"
    beta = model.method == "beta"  # per segment (a, b, c), as sigmoid's (a, b)
    nk = len(model.by)
    (cs, cg, ce0, ce1, ce2, cj, cz, cb, cp, cx0, cy0, csl, *ck) = _fresh_names(
        ["_s", "_g", "_e0", "_e1", "_e2", "_j", "_z", "_b", "_p", "_x0", "_y0", "_sl"]
        + [f"_k{i}" for i in range(nk)], set(names))
    consts = (ce0, ce1, ce2) if beta else (ce0, ce1)
    keys, maps = _segment_maps(model)
    glob = model.global_model
    # Per segment: Platt's (a, b), or the values at s = -inf / +inf of a map
    # whose end block has no finite knot (null: the end piece's value).
    if sigmoid or beta:
        names_ = ("a", "b", "c") if beta else ("a", "b")
        vals = [tuple(float(m.params[k]) for k in names_) for m in maps]
        gvals = tuple(float(glob.params[k]) for k in names_)
    else:
        parts = [pieces(m) for m in [*maps, glob]]
        vals = [(p["lo_p"], p["hi_p"]) for p in parts[:-1]]
        gvals = (parts[-1]["lo_p"], parts[-1]["hi_p"])
    table = _key_table(spark, keys, [fields[b] for b in model.by], [*ck, cg, *consts], vals)
    cond = None
    for j, name in enumerate(model.by):
        eq = df[quote(name)] == table[ck[j]]
        cond = eq if cond is None else cond & eq
    joined = df.join(F.broadcast(table), on=cond, how="left")
    # Unmatched rows (null or unseen keys, segments that fall back) take the
    # global map: g = G (its pieces come last), its constants otherwise.
    staged = joined.select(*[df[quote(n)] for n in names],
                           F.col(quote(score_col)).cast("double").alias(cs),
                           F.coalesce(table[cg], F.lit(len(maps))).alias(cg),
                           *[F.coalesce(table[c], F.lit(v).cast("double")).alias(c)
                             for c, v in zip(consts, gvals)])
    sv, e0, e1 = F.col(cs), F.col(ce0), F.col(ce1)
    if sigmoid:
        p = F.lit(1.0) / (F.lit(1.0) + F.exp(sv * e0 + e1))
    elif beta:
        p = beta_column(sv, e0, e1, F.col(ce2))
    else:
        lay = _piece_layout(parts)
        if lay["union"].shape[0]:
            staged = _bucketize(staged, [-np.inf, *lay["union"].tolist(), np.inf], cs, cj)
        else:
            staged = staged.withColumn(cj, F.lit(0.0))
        staged = staged.withColumn(cz, F.col(cg).cast("double") * F.lit(lay["m"]) + F.col(cj))
        staged = _bucketize(staged, [-np.inf, *lay["starts"].tolist(), np.inf], cz, cb)
        ptable = _piece_table(spark, lay, [cp, cx0, cy0, csl])
        # Left join: a null score has no bucket (its output is null below).
        staged = staged.join(F.broadcast(ptable), F.col(cb).cast("long") == ptable[cp], "left")
        x0, y0, sl = F.col(cx0), F.col(cy0), F.col(csl)
        p = F.when(sl == 0.0, y0).otherwise(sl * (sv - x0) + y0)
        p = F.when(e0.isNotNull() & (sv == float("-inf")), e0).otherwise(p)
        p = F.when(e1.isNotNull() & (sv == float("inf")), e1).otherwise(p)
    p = (F.when(sv.isNull(), F.lit(None).cast("double"))
         .when(F.isnan(sv), F.lit(float("nan"))).otherwise(p))
    return staged.select(*[F.col(quote(n)) for n in names], p.alias(output_col))
