"""Spark at scale: 2e6 rows and ~865,000 distinct probabilities, driver results capped at 8 MB.

Rows are generated on the executors (``spark.range``), never in the driver.
evaluate (the default ``roc_points=1000``), optimal_threshold and fit, with
row weights, must succeed with ``spark.driver.maxResultSize=8m``: what reaches the driver is
O(roc_points + hull + blocks), not O(distinct probabilities) (the full ROC
of 865,000 points alone is 20 MB). Runs in its own process and SparkSession
(see test_spark_cluster.py).
"""

from __future__ import annotations

import re

import pytest
from test_spark_cluster import run_child

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_evaluate_threshold_fit_on_2e6_rows_865k_distinct_under_8m_results():
    out = run_child("""
        import time
        from pyspark.sql import functions as F
        n = 2_000_000  # probabilities on a grid of 1e6: 1e6 * (1 - e^-2) distinct expected
        # weights independent of the labels: the expected AUC and threshold stay as below
        df = (spark.range(0, n, numPartitions=8)
              .select(F.round(F.rand(1), 6).alias("prob"), F.rand(2).alias("u"),
                      (F.rand(3) * 2).alias("w"))
              .select("prob", "w", (F.col("u") < F.col("prob")).cast("int").alias("label")))
        t0 = time.perf_counter()
        rep = distcal.evaluate(df, prob_col="prob", weight_col="w")
        t1 = time.perf_counter()
        thr = distcal.optimal_threshold(df, score_col="prob", weight_col="w", cost_fn=2.0)
        t2 = time.perf_counter()
        model = distcal.fit(df, score_col="prob", weight_col="w")
        t3 = time.perf_counter()
        hull = rep.roc_hull
        at = {t: (x, y) for t, x, y in zip(rep.roc["threshold"], rep.roc["fpr"], rep.roc["tpr"])}
        print(json.dumps({"n_rows": rep.n_rows, "n_distinct": rep.n_distinct,
                          "roc": len(rep.roc), "hull": len(hull), "auc": rep.auc,
                          "complete": rep.roc_complete, "threshold": thr.threshold,
                          "blocks": len(model.blocks), "model_rows": model.n_rows,
                          "ends": [list(at[float("inf")]), rep.roc["fpr"].iloc[-1],
                                   rep.roc["tpr"].iloc[-1]],
                          "seconds": [t1 - t0, t2 - t1, t3 - t2]}))
    """, conf={"spark.driver.maxResultSize": "8m", "spark.driver.memory": "2g"})
    print("evaluate, threshold, fit seconds:", out["seconds"])
    assert out["n_rows"] == out["model_rows"] == 2_000_000
    assert 850_000 < out["n_distinct"] <= 880_000
    assert not out["complete"] and out["roc"] <= 1000 and out["hull"] > 2
    # (1, 1) exactly, float weights and all
    assert out["ends"] == [[0.0, 0.0], 1.0, 1.0]
    # labels ~ Bernoulli(p), p uniform: AUC = P(p+ > p-) = 5/6 in expectation
    assert abs(out["auc"] - 5 / 6) < 3e-3
    assert abs(out["threshold"] - 1 / 3) < 0.02 and out["blocks"] > 10


def test_by_segment_fits_of_2000_segments_under_a_2m_result_cap(tmp_path):
    """5e5 rows in 2,000 segments of ~250 rows (~442,000 distinct (segment, score)
    pairs, ~3.2 MB as the per-segment tables the driver once collected, at the ~7.5
    bytes a pair they took) under ``spark.driver.maxResultSize=2m`` (the summaries a
    pass brings, 2,000 keys in 8 ranges, take ~1.7 MiB of it): no method brings a table
    per segment to the driver, and each model is the one pandas fits from the same
    rows.

    Temperature scaling's first pass samples each part's rows for Newton's start: a
    segment's rows take the stride of their part (each segment sending up to 512
    rows of every part sent them all).

    MODL needs each key's table after merging pure runs on the driver (more than
    the cap over all segments): its second pass runs in waves of keys, each
    bringing at most a quarter of the cap; so do Venn-Abers' steps (its second
    pass brought every segment's at once).
    """
    out = run_child(f"""
        import numpy as np, pandas as pd, pyarrow as pa, pyarrow.parquet as pq
        n, segs = 500_000, 2_000
        rng = np.random.default_rng(0)
        seg = rng.integers(0, segs, n)
        s = rng.integers(0, 1000, n) / 1000 + seg * 1e-7
        y = (rng.random(n) < s).astype(np.int64)
        path = {str(tmp_path / "d.parquet")!r}
        pq.write_table(pa.table({{"score": s, "label": y, "seg": seg}}), path,
                       row_group_size=1 << 18)
        sdf, pdf = spark.read.parquet(path), pd.DataFrame({{"score": s, "label": y, "seg": seg}})
        same = {{}}
        for method in ("sigmoid", "histogram", "modl", "isotonic", "temperature",
                       "venn_abers", "beta"):
            remote = distcal.fit(sdf, method=method, by="seg")
            same[method] = [remote == distcal.fit(pdf, method=method, by="seg"),
                            len(remote.segments)]
        print(json.dumps(same))
    """, conf={"spark.driver.maxResultSize": "2m", "spark.driver.memory": "2g"})
    assert out == {m: [True, 2000] for m in ("sigmoid", "histogram", "modl", "isotonic",
                                             "temperature", "venn_abers", "beta")}, out


def test_a_pass_over_the_result_cap_names_it():
    """A fit's first pass brings each key's summary of each range (keys: segments x classes):
    over spark.driver.maxResultSize it is an EngineSetupError naming both sizes and the
    setting (it was a Py4JJavaError and a JVM stack trace)."""
    out = run_child("""
        import numpy as np, pandas as pd
        n = 50_000  # in 2,000 segments of 3 classes: 6,000 keys, ~1.3 MiB of summaries
        rng = np.random.default_rng(0)
        p = rng.dirichlet([1, 1, 1], n)
        df = pd.DataFrame({"p": [list(map(float, v)) for v in p],
                           "label": rng.integers(0, 3, n), "g": rng.integers(0, 2000, n)})
        try:
            distcal.fit(spark.createDataFrame(df), score_col="p", by="g")
            print(json.dumps({"error": None}))
        except distcal.errors.EngineSetupError as exc:
            print(json.dumps({"error": str(exc)}))
    """, conf={"spark.driver.maxResultSize": "1m", "spark.driver.memory": "2g"})
    assert out["error"] is not None and re.search(
        r"the results of \d+ tasks of one pass \([\d.]+ KiB\) exceed "
        r"spark.driver.maxResultSize \(1024.0 KiB\): raise that setting", out["error"]), out
