"""Hot scores on Spark: a few scores that hold a large share of the rows.

A range partitioner never splits equal keys, so a default score held by 40%
of the rows fills one range partition, pooled chunk by chunk as it streams
(its memory is its distinct scores, not its rows). The keyed pass asks Spark
for more ranges by the hot share it sampled, so that the other rows still
spread over the ranges asked for. Oracles: scikit-learn's
IsotonicRegression on the rows, the local engine, and the sizes of Spark's
range partitions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.isotonic import IsotonicRegression

import distcal
from distcal.core.keyed import KeySpec
from distcal.engines.spark.keyed import SparkKeyedRanges

N = 20_000


def hot_scores(n: int, seed: int) -> pd.DataFrame:
    """40% of the rows at 0.0, 15% at 0.5, the rest all distinct."""
    rng = np.random.default_rng(seed)
    score = rng.random(n)
    kind = rng.random(n)
    score[kind < 0.40] = 0.0
    score[(kind >= 0.40) & (kind < 0.55)] = 0.5
    label = (rng.random(n) < 0.1 + 0.8 * score).astype(np.int64)
    return pd.DataFrame({"score": score, "label": label, "w": rng.uniform(0.5, 2.0, n)})


def rows_per_partition(ranged) -> list[int]:
    from pyspark.sql import functions as F

    sizes = (ranged.groupBy(F.spark_partition_id().alias("p"))
             .agg(F.count(F.lit(1)).alias("n")).collect())
    return sorted(int(r["n"]) for r in sizes)


def test_hot_scores_fill_one_range_and_the_fit_is_exact(spark):
    df = hot_scores(N, 1)
    sdf = spark.createDataFrame(df).repartition(6)
    with SparkKeyedRanges(sdf, KeySpec(weight_col="w"), range_rows=2_000) as keyed:
        sizes = rows_per_partition(keyed.ranged)
        asked = keyed.k
    hot_rows = int((df.score == 0.0).sum())
    cold = int((~df.score.isin([0.0, 0.5])).sum())
    assert sizes[-1] >= hot_rows  # the range holding 0.0
    # ~8,000 distinct scores over a budget of 2,000 pairs: at least 4 ranges for the
    # cold rows, asked for as more ranges by the sampled hot share (~55%).
    assert asked >= 8 and sum(n for n in sizes if n < hot_rows) >= cold

    model = distcal.fit(sdf, weight_col="w", range_rows=2_000)
    assert model == distcal.fit(df, weight_col="w")
    iso = IsotonicRegression(out_of_bounds="clip").fit(df.score, df.label, sample_weight=df.w)
    q = np.concatenate([[0.0, 0.5], np.linspace(0.0, 1.0, 2001), df.score.to_numpy()[:300]])
    np.testing.assert_allclose(model.predict(q), iso.predict(q), rtol=1e-9, atol=1e-12)
    assert model.n_rows == N and model.weight_total == pytest.approx(df.w.sum(), rel=1e-12)

    t = distcal.optimal_threshold(sdf, weight_col="w", cost_fp=1, cost_fn=3)
    u = distcal.optimal_threshold(df, weight_col="w", cost_fp=1, cost_fn=3)
    assert t.threshold == u.threshold and t.cost == pytest.approx(u.cost, rel=1e-9)


def test_bad_rows_among_hot_scores_give_the_local_error(spark):
    df = hot_scores(4_000, 4).drop(columns="w")
    df["score"] = df["score"].astype(object)
    df.loc[[3, 17, 29], "score"] = None  # null scores, among rows of hot score 0.0 too
    df.loc[[5, 11], "label"] = 2  # labels outside [0, 1]
    sdf = spark.createDataFrame(df)
    with pytest.raises(distcal.DataError) as local:
        distcal.fit(df.astype({"score": float}))
    with pytest.raises(distcal.DataError) as remote:
        distcal.fit(sdf)
    assert str(remote.value) == str(local.value)
    assert "'score': 3 rows are null" in str(local.value)
    assert "'label': 2 rows are outside [0, 1]" in str(local.value)
