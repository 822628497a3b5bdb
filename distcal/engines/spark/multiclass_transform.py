"""Applying a multiclass model to a Spark DataFrame inside the JVM (no Python worker).

One-vs-rest: each class's binary map by the binary JVM transform
(:mod:`.transform`: Bucketizer and constant arrays), then the row
normalisation as SQL on an array. Temperature scaling: softmax(beta * z)
as SQL. The output is an ``array<double>`` column.
"""

from __future__ import annotations

from typing import Any

from ...errors import DataError, output_column_exists
from .multiclass import looks_like_probabilities_sql, score_array
from .schema import quote

__all__ = ["transform_multiclass"]



def transform_multiclass(model: Any, df: Any, score_col: str | None,
                         score_cols: list[str] | None, output_col: str) -> Any:
    """``df`` with ``output_col`` = the model's calibrated probabilities (array<double>).

    One-vs-rest: each class's binary map by the binary JVM transform, then
    the normalisation as SQL (1/K where a row sums to 0; K = 2: p0 = 1 - p1;
    values above 1 by at most 1e-5 set to 1, as
    :func:`~distcal.core.multiclass.normalise_ovr`). Temperature:
    softmax(beta * z) as SQL, z the logits by scikit-learn's rule over the
    rows given (decided by one aggregation, as the local model decides it
    over the rows it is given). Null or NaN scores give NaN.
    """
    from pyspark.sql import functions as F

    from .transform import transform as binary_transform

    fields = [f.name for f in df.schema.fields]
    if output_col in fields:
        raise output_column_exists(output_col)
    z, texts, k_cols = score_array(df, score_col, score_cols)
    keep = [F.col(quote(f)) for f in fields]
    base = df.select(*keep, z.alias("_mz"))
    zc = F.col("_mz")
    # One eager aggregation: vector lengths (ragged vectors are an error, as
    # locally), text in score columns, and scikit-learn's probability rule
    # over all rows (temperature scaling).
    probs = F.min(looks_like_probabilities_sql(zc).cast("int")).alias("probs")
    text_sums = [F.sum(t.cast("long")).alias(f"_t{i}") for i, t in enumerate(texts)
                 if t is not None]
    if k_cols is None:
        groups = base.groupBy(F.size(zc).alias("n")).agg(F.count(F.lit(1)).alias("count"),
                                                         probs).collect()
        lengths = {int(r["n"]): int(r["count"]) for r in groups
                   if r["n"] is not None and r["n"] >= 0}
        is_probs = all(r["probs"] == 1 for r in groups)
        if lengths:
            k_cols = max(lengths, key=lambda n: (lengths[n], -n))
            ragged = sum(lengths.values()) - lengths[k_cols]
            if ragged:
                raise DataError(f"column '{score_col}': {ragged} "
                                f"{'row has' if ragged == 1 else 'rows have'} a length other "
                                f"than {k_cols} (ragged vectors)")
        else:
            k_cols = 1 if model.n_classes == 2 else model.n_classes
    else:
        row = base.agg(probs, *text_sums).collect()[0]
        is_probs = row["probs"] == 1
        assert score_cols is not None
        for i, t in enumerate(texts):
            if t is not None and row[f"_t{i}"]:
                n = int(row[f"_t{i}"])
                raise DataError(f"column '{score_cols[i]}': {n} "
                                f"{'row is' if n == 1 else 'rows are'} text, not numbers")
    k = model.n_classes
    if k_cols != k and not (k == 2 and k_cols == 1):
        raise DataError(f"scores have {k_cols} columns; the model has K = {k} classes")
    nan = F.lit(float("nan"))
    if model.method == "temperature":
        if k_cols == 1:
            logits = [-zc[0], zc[0]]
        else:
            elems = [zc[i] for i in range(k_cols)]
            logits = [F.log(e + F.lit(1e-12)) for e in elems] if is_probs else elems
        beta = F.lit(float(model.beta))
        a = [F.coalesce(beta * v, nan) for v in logits]
        m = F.greatest(*a)
        e = [F.exp(x - m) for x in a]
        total = e[0]
        for x in e[1:]:
            total = total + x
        p = [x / total for x in e]
        out = base.select(*keep, F.array(*p).alias(output_col))
        return out
    staged = base.select(*keep, *[F.coalesce(zc[i], nan).alias(f"_ms{i}")
                                  for i in range(k_cols)])
    classes = [1] if k == 2 else list(range(k))
    for c in classes:
        j = k_cols - 1 if k == 2 else c
        staged = binary_transform(model.class_model(c), staged, f"_ms{j}", f"_mq{c}")
    def clip(x: Any) -> Any:
        return F.when((x > 1.0) & (x <= 1.0 + 1e-5), F.lit(1.0)).otherwise(x)

    if k == 2:
        q1 = F.col("_mq1")
        return staged.select(*keep, F.array(clip(F.lit(1.0) - q1), clip(q1)).alias(output_col))
    # The K values as one array and its sum as a column of their own: each
    # class's map is then evaluated once per row, not once per reference.
    staged = staged.select(*keep, F.array(*[F.col(f"_mq{c}") for c in classes]).alias("_mqa"))
    staged = staged.select(*keep, "_mqa", F.aggregate("_mqa", F.lit(0.0), lambda a, x: a + x)
                           .alias("_mqt"))
    total = F.col("_mqt")
    return staged.select(*keep, F.transform("_mqa", lambda x: clip(
        F.when(total != 0.0, x / total).otherwise(F.lit(1.0 / k)))).alias(output_col))
