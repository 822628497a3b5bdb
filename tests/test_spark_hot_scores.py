"""Hot scores on Spark: a few scores that hold a large share of the rows.

A range partitioner never splits equal keys, so a default score held by 40%
of the rows would fill one range partition (one task doing 40% of the work).
``combine="hot"`` groups such scores before the shuffle (one row per map
task each) and sends the other rows as groups of one; the automatic choice
does so only where it pays (many cores), not on local[2]. Oracles:
scikit-learn's IsotonicRegression on the rows, the local engine, and the
sizes of Spark's range partitions.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.isotonic import IsotonicRegression

import distcal
from distcal.engines.spark.ranges import SparkRanges

N = 20_000
COLUMNS = {"score": "score", "label": "label", "weight": "w"}


def hot_scores(n: int, seed: int) -> pd.DataFrame:
    """40% of the rows at 0.0, 15% at 0.5, the rest all distinct."""
    rng = np.random.default_rng(seed)
    score = rng.random(n)
    kind = rng.random(n)
    score[kind < 0.40] = 0.0
    score[(kind >= 0.40) & (kind < 0.55)] = 0.5
    label = (rng.random(n) < 0.1 + 0.8 * score).astype(np.int64)
    return pd.DataFrame({"score": score, "label": label, "w": rng.uniform(0.5, 2.0, n)})


def rows_per_partition(ranges: SparkRanges) -> list[int]:
    from pyspark.sql import functions as F

    sizes = (ranges.ranged.groupBy(F.spark_partition_id().alias("p"))
             .agg(F.count(F.lit(1)).alias("n")).collect())
    return sorted(int(r["n"]) for r in sizes)


def test_hot_scores_are_grouped_and_the_fit_is_exact(spark):
    df = hot_scores(N, 1)
    sdf = spark.createDataFrame(df).repartition(6)
    # On 2 cores the 40% task is no slower than the other core's 60%: raw rows.
    auto = SparkRanges(sdf, COLUMNS, n_ranges=8)
    assert auto.hot == [] and not auto.combined
    hot = SparkRanges(sdf, COLUMNS, n_ranges=8, combine="hot")
    assert hot.hot == [0.0, 0.5] and hot.combined  # the most frequent first

    hot_rows = int((df.score == 0.0).sum())
    assert max(rows_per_partition(auto)) >= hot_rows  # the range holding 0.0
    grouped = rows_per_partition(hot)
    cold = int((~df.score.isin([0.0, 0.5])).sum())
    # The two hot scores arrive as one row each; the rest spread over 8 ranges.
    assert sum(grouped) == cold + 2
    assert max(grouped) < 2 * cold / 8

    model = distcal.fit(sdf, weight_col="w", n_ranges=8, combine="hot")
    assert model == distcal.fit(df, weight_col="w")
    iso = IsotonicRegression(out_of_bounds="clip").fit(df.score, df.label, sample_weight=df.w)
    q = np.concatenate([[0.0, 0.5], np.linspace(0.0, 1.0, 2001), df.score.to_numpy()[:300]])
    np.testing.assert_allclose(model.predict(q), iso.predict(q), rtol=1e-9, atol=1e-12)
    assert model.n_rows == N and model.weight_total == pytest.approx(df.w.sum(), rel=1e-12)

    t = distcal.optimal_threshold(sdf, weight_col="w", cost_fp=1, cost_fn=3, combine="hot")
    u = distcal.optimal_threshold(df, weight_col="w", cost_fp=1, cost_fn=3)
    assert t.threshold == u.threshold and t.cost == pytest.approx(u.cost, rel=1e-9)


def test_bad_rows_among_hot_scores_give_the_local_error(spark):
    df = hot_scores(4_000, 4).drop(columns="w")
    df["score"] = df["score"].astype(object)
    df.loc[[3, 17, 29], "score"] = None  # null scores, among rows of hot score 0.0 too
    df.loc[[5, 11], "label"] = 2  # labels outside [0, 1]
    sdf = spark.createDataFrame(df)
    assert SparkRanges(sdf, {"score": "score", "label": "label"}, combine="hot").hot
    with pytest.raises(distcal.DataError) as local:
        distcal.fit(df.astype({"score": float}))
    with pytest.raises(distcal.DataError) as remote:
        distcal.fit(sdf, combine="hot")
    assert str(remote.value) == str(local.value)
    assert "'score': 3 rows are null" in str(local.value)
    assert "'label': 2 rows are outside [0, 1]" in str(local.value)
