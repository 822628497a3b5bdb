"""What only Spark's keyed ranges have: ranges from a sample of the data, hot scores,
transform_rows in the JVM's types, and sessions with capped memory or on Spark Connect.

The tables are checked against test_keyed_pass.py's pandas oracle (where every
engine's keyed pass is tested the same way); isotonic regression is scipy's.
Tests that need a Spark session of their own (a Python worker memory cap, Spark
Connect) run it in a child process, since one process holds one SparkContext; a
driver result cap with thousands of segments is test_scale_spark.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import test_keyed_pass
from conftest import full_jit_env
from pyspark import cloudpickle
from test_keyed_pass import assert_matches, gather, oracle

import distcal
from distcal.core.keyed import KeySpec
from distcal.engines.spark import SparkEngine

ENGINE = SparkEngine()

# The functions mapped over the ranges live here; the Python workers cannot
# import this test module, so they travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(test_keyed_pass)


# -- data and the oracle -------------------------------------------------------------

def make_rows(n: int, seed: int, k: int = 0, by: int = 0, weights: bool = False) -> pd.DataFrame:
    """n rows: a binary score (k = 0) or K = k per-class scores, labels, segments, weights."""
    rng = np.random.default_rng(seed)
    out: dict[str, object] = {}
    if k:
        z = np.round(rng.dirichlet(np.ones(k), n), 2)
        out["probs"] = list(z)
        out["label"] = np.array([rng.choice(k, p=p / p.sum()) for p in z + 0.01])
    else:
        s = np.round(rng.random(n), 2)
        out["score"] = s
        out["label"] = (rng.random(n) < s).astype(np.int64)
    if by >= 1:
        out["g"] = rng.choice(np.array(["fr", "de", "it", None], dtype=object), n)
    if by >= 2:
        h = rng.integers(0, 3, n).astype(float)
        h[rng.random(n) < 0.1] = np.nan  # a null key
        out["h"] = h
    if weights:
        w = np.round(rng.uniform(0, 3, n), 1)
        w[rng.random(n) < 0.05] = 0.0
        out["w"] = w
    return pd.DataFrame(out)


def to_spark(spark, pdf: pd.DataFrame, vector: str | None = None):
    """A Spark DataFrame of ``pdf``; ``vector="udt"`` makes ``probs`` a pyspark.ml vector."""
    pdf = pdf.copy()
    if "probs" in pdf:
        pdf["probs"] = [list(map(float, v)) for v in pdf["probs"]]
    df = spark.createDataFrame(pdf)
    if vector == "udt":
        from pyspark.ml.functions import array_to_vector

        df = df.withColumn("probs", array_to_vector("probs"))
    return df


def test_ranges_from_the_data_and_passes(spark):
    """The range count follows the distinct (key, score) pairs over ``range_rows``;
    passes > 1 persists, and a second map gives the same tables."""
    rng = np.random.default_rng(3)
    n = 20_000
    pdf = pd.DataFrame({"score": rng.random(n), "label": rng.integers(0, 2, n)})
    df = spark.createDataFrame(pdf)
    spec = KeySpec()
    with ENGINE.open_keyed(df, spec, on_invalid="raise", range_rows=1000, passes=2) as kr:
        assert 15 <= kr.k <= 25  # ~20k distinct pairs over 1k per range
        assert len(kr.map(len)) >= kr.k // 2
        assert_matches(gather(kr), oracle(pdf, spec))
        assert_matches(gather(kr), oracle(pdf, spec))  # a second map, the same tables
    with ENGINE.open_keyed(df, spec, on_invalid="raise") as kr:
        assert kr.k == 8  # at least default_ranges: 20k pairs are far below 200k per range
    # With segments each row is counted once, under its segment's key: the same ~20
    # ranges, each also holding the global key's table (at most its segments' size).
    pdf["g"] = rng.integers(0, 50, n)
    spec = KeySpec(by=("g",))
    with ENGINE.open_keyed(spark.createDataFrame(pdf), spec, on_invalid="raise",
                           range_rows=1000) as kr:
        assert 15 <= kr.k <= 25
        sizes = kr.map(lambda t: (len(t.key_table(t.keys.index((None, None))).score),
                                  len(t.table)))
        assert_matches(gather(kr), oracle(pdf, spec))
    assert all(2 * g == total for g, total in sizes)  # distinct scores: one segment each


def test_passes_read_the_pooled_ranges(spark):
    """A binary score with passes > 1: every pass reads each range's persisted keyed table
    (no range's rows again), with more ranges asked for than there are scores; segments of
    text and of dates come back as the input's values."""
    import datetime

    pdf = make_rows(3000, seed=8, by=1, weights=True)
    pdf["score"] = np.round(pdf["score"], 1)
    days = np.random.default_rng(8).integers(0, 3, len(pdf))
    pdf["d"] = [datetime.date(2026, 1, 1) + datetime.timedelta(days=int(x)) for x in days]
    spec = KeySpec(weight_col="w", by=("g", "d"))
    want = oracle(pdf, spec)
    with ENGINE.open_keyed(to_spark(spark, pdf), spec, on_invalid="raise", n_ranges=40,
                           passes=3) as kr:
        for _ in range(3):
            assert_matches(gather(kr), want)
        assert kr.pooled is not None
        assert (kr.n_rows, kr.dropped_rows) == (int((pdf["w"] > 0).sum()), 0)
    assert not kr.persisted  # unpersisted when closed


@pytest.mark.parametrize("kind", ["binary", "two-classes"])
def test_hot_score_does_not_eat_the_ranges(spark, kind):
    """40% of the rows on one score: the other scores still get ~8 ranges of about equal
    numbers of distinct pairs (binary: Spark's bounds, asked for k / (1 - 0.4); keyed:
    bounds from the sample's distinct pairs)."""
    rng = np.random.default_rng(5)
    n = 20_000
    s = np.where(rng.random(n) < 0.4, 0.5, np.round(rng.random(n), 4))
    y = (rng.random(n) < s).astype(np.int64)
    if kind == "binary":
        pdf, spec, k, key = pd.DataFrame({"score": s, "label": y}), KeySpec(), 0, (None, None)
        opts = dict(range_rows=1000)
    else:
        pdf = pd.DataFrame({"probs": list(np.stack([1 - s, s], axis=1)), "label": y})
        spec, k, key = KeySpec(score_col="probs", multiclass=True), 2, (None, 1)
        opts = dict(n_ranges=8)
    with ENGINE.open_keyed(to_spark(spark, pdf), spec, on_invalid="raise", **opts) as kr:
        assert_matches(gather(kr), oracle(pdf, spec, k))
        sizes = kr.map(lambda t: len(t.key_table(t.keys.index(key)).score))
    assert len(sizes) >= 7
    assert max(sizes) < 3 * np.mean(sizes)  # distinct pairs per range, not rows


@pytest.mark.parametrize("hot", [0.0, 0.4])
def test_range_count_from_distinct_pairs(hot):
    """The estimate sees the distinct pairs, with or without a hot score (no Spark)."""
    from distcal.engines.spark.keyed import ranges_for

    rng = np.random.default_rng(9)
    n, fraction = 20_000_000, 0.0025
    m = int(n * fraction)
    s = np.round(rng.random(m), 7)
    s[rng.random(m) < hot] = 0.5
    bounds, distinct, share = ranges_for(s, np.zeros(m, np.uint64), fraction, 200_000, 8)
    assert share == pytest.approx(hot, abs=0.02)
    want = 1e7 * -np.expm1(-n * (1 - hot) / 1e7)  # distinct values among the other rows
    # ~60 repeated values among 3e4 sampled rows: the estimate is within ~25% (2 sd),
    # and erring high only makes ranges smaller
    assert 0.75 * want < distinct < 1.4 * want
    assert 0.75 * want / 200_000 < len(bounds) + 1 < 1.4 * want / 200_000 + 1


# -- transform_rows ------------------------------------------------------------------

def test_transform_rows_round_trip(spark):
    pdf = make_rows(2000, seed=4, k=3)
    pdf["id"] = np.arange(len(pdf))
    for vector_kind in (None, "udt"):
        df = to_spark(spark, pdf, vector_kind)

        def scaled(part):
            z = np.stack(part.column("probs").to_numpy(zero_copy_only=False))
            return z * 2.0

        def first(part):
            return np.stack(part.column("probs").to_numpy(zero_copy_only=False))[:, 0]

        out = ENGINE.transform_rows(df, {"probs": "score"}, "cal", scaled, vector=True)
        assert out.columns == [*df.columns, "cal"]
        assert out.schema["cal"].dataType.simpleString() == "array<double>"
        assert out.schema["probs"].dataType == df.schema["probs"].dataType
        got = out.select("id", "cal").toPandas().sort_values("id")
        np.testing.assert_allclose(np.stack(got["cal"].to_numpy()),
                                   2.0 * np.stack(pdf["probs"].to_numpy()), rtol=1e-15)
        out = ENGINE.transform_rows(df, {"probs": "score", "label": "label"}, "p0", first,
                                    vector=False)
        assert out.schema["p0"].dataType.simpleString() == "double"
        got = out.select("id", "p0").toPandas().sort_values("id")
        np.testing.assert_allclose(got["p0"].to_numpy(), np.stack(pdf["probs"])[:, 0])
    plain = pd.DataFrame({"id": pdf["id"], "probs": [list(map(float, v)) for v in pdf["probs"]]})
    local = ENGINE.transform_rows(plain, {"probs": "score"}, "p0", first, vector=False)
    assert isinstance(local, pd.DataFrame) and list(local.columns) == ["id", "probs", "p0"]
    np.testing.assert_allclose(local.sort_values("id")["p0"].to_numpy(),
                               np.stack(pdf["probs"])[:, 0])
    with pytest.raises(distcal.DataError) as exists:
        ENGINE.transform_rows(df, {"probs": "score"}, "label", first, vector=False)
    assert str(exists.value) == str(distcal.errors.output_column_exists("label"))


# -- sessions of their own (child processes) --------------------------------------------

CONNECT_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from pyspark.sql import SparkSession, functions as F
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.config("spark.ui.enabled", "false").remote("local[2]")
             .getOrCreate())
    from distcal.core.keyed import KeySpec
    from distcal.engines.spark import SparkEngine

    n, segs = int(sys.argv[1]), int(sys.argv[2])
    df = spark.range(0, n, numPartitions=4).select(
        F.round(F.rand(1), 3).alias("score"), (F.rand(2) < 0.3).cast("int").alias("label"),
        (F.col("id") % segs).alias("seg"))

    def sums(t):  # per key: rows, positives (small: no table leaves the range)
        n_rows, _ = t.key_totals()
        pos = np.add.reduceat(t.table.positives, t.starts[:-1])
        return {k[0][0] if k[0] is not None else -1: (int(a), float(b))
                for k, a, b in zip(t.keys, n_rows, pos)}

    def added(parts):  # per key over the ranges
        total = {}
        for p in parts:
            for k, (a, b) in p.items():
                t = total.setdefault(k, [0, 0.0])
                t[0] += a
                t[1] += b
        return total

    totals, narrowed = [], None
    for passes in map(int, sys.argv[3].split(",")):
        with SparkEngine().open_keyed(df, KeySpec(by=("seg",)), on_invalid="raise",
                                      passes=passes) as kr:
            runs = [kr.map(sums) for _ in range(passes)]  # passes > 1: the pooled ranges
            n_rows = kr.n_rows
            if passes > 1:  # later passes of five keys read only their rows
                kr.narrow({((s,), None) for s in range(5)})
                narrowed = added(kr.map(sums))
        assert all(r == runs[0] for r in runs)
        parts = runs[0]
        totals.append(added(parts))
    total = totals[0]
    assert all(t == total for t in totals)
    want = {int(r["seg"]): (int(r["n"]), float(r["p"])) for r in
            df.groupBy("seg").agg(F.count("*").alias("n"), F.sum("label").alias("p")).collect()}
    ok = all(tuple(total[k]) == want[k] for k in want) and len(total) == segs + 1
    out = {"ok": ok, "n_rows": n_rows, "global": total[-1], "keys": len(total),
           "ranges": len(parts),
           "narrow_ok": narrowed is None or narrowed == {k: total[k] for k in range(5)}}
    # A refit from saved summaries: ranges from their score samples.
    import tempfile
    import distcal, pandas as pd
    from sklearn.isotonic import IsotonicRegression
    rng, tmp, frames = np.random.default_rng(5), tempfile.mkdtemp(), []
    for i in range(2):
        s = rng.normal(size=5000)
        frames.append(pd.DataFrame({"score": s, "label": (rng.random(5000) < 1 / (
            1 + np.exp(-s))).astype(int)}))
        distcal.summarize(frames[-1]).save(f"{tmp}/{i}")
    model = distcal.fit([f"{tmp}/0", f"{tmp}/1"], engine="spark")
    rows, q = pd.concat(frames), np.linspace(-3, 3, 61)
    want = IsotonicRegression(out_of_bounds="clip").fit(rows["score"], rows["label"])
    out["refit_ok"] = bool(np.allclose(model.predict(q), want.predict(q), rtol=1e-9,
                                       atol=1e-12))
    # Fit by segment, transform (every segment's map from a join, the global
    # map for a segment unseen at fit), evaluate and threshold, as on pandas.
    rows = rows.assign(seg=rng.integers(0, 4, len(rows)))
    sdf = spark.createDataFrame(rows)
    for method in ("isotonic", "sigmoid"):
        fitted, local = (distcal.fit(d, method=method, by="seg")
                         for d in (sdf.where("seg < 3"), rows[rows["seg"] < 3]))
        got = fitted.transform(sdf).toPandas()
        out[f"{method}_by_ok"] = bool(fitted == local and np.allclose(
            got["calibrated"], local.predict(got["score"].to_numpy(), got[["seg"]]),
            rtol=1e-12, atol=0))
    probs = fitted.transform(sdf)
    report = distcal.evaluate(probs, prob_col="calibrated", by="seg")
    want_report = distcal.evaluate(probs.toPandas(), prob_col="calibrated", by="seg")
    got_seg, want_seg = (r.segments.sort_values("seg") for r in (report, want_report))
    out["evaluate_ok"] = bool(np.allclose(report.brier, want_report.brier, rtol=1e-12)
                              and np.allclose(got_seg["brier"], want_seg["brier"], rtol=1e-12)
                              and len(got_seg) == 4)
    out["threshold_ok"] = (distcal.optimal_threshold(probs, score_col="calibrated")
                           == distcal.optimal_threshold(probs.toPandas(),
                                                        score_col="calibrated"))
    # The pyspark.ml stage saved and loaded (Spark's metadata through the session: a
    # Connect client has no SparkContext), and the jobs' Spark backend on plain paths.
    from pyspark.ml import Pipeline, PipelineModel
    from distcal.spark import Calibrator
    from distcal.cli.spark import SparkBackend
    Pipeline(stages=[Calibrator(outputCol="cal")]).fit(sdf).write().save(f"{tmp}/pipe")
    stage = PipelineModel.load(f"{tmp}/pipe").stages[0].model
    out["stage_ok"] = stage == distcal.fit(rows)
    # The unfitted stage too, replaced with overwrite() (pyspark's own writer deletes
    # the old directory through the JVM session, which a Connect client has not).
    Calibrator(method="sigmoid").write().save(f"{tmp}/est")
    Calibrator(method="histogram").write().overwrite().save(f"{tmp}/est")
    out["estimator_ok"] = Calibrator.load(f"{tmp}/est").getMethod() == "histogram"
    rows.to_parquet(f"{tmp}/in.parquet", index=False)
    n = SparkBackend(spark).apply(stage, {"input": f"{tmp}/in.parquet", "overwrite": False,
                                          "output": f"{tmp}/out.parquet",
                                          "score_col": "score", "output_col": "p"})
    got = pd.read_parquet(f"{tmp}/out.parquet")
    out["backend_ok"] = n == len(rows) and bool(np.allclose(
        got["p"], stage.predict(got["score"].to_numpy()), rtol=0, atol=1e-12))
    print(json.dumps(out))
    spark.stop()
""")


def _child(script: str, *args: str, timeout: int = 900, env: dict | None = None) -> dict:
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_keyed_map_on_spark_connect():
    out = _child(CONNECT_CHILD, "20000", "20", "1,2")  # one pass, then several
    assert out["ok"] and out["keys"] == 21 and out["n_rows"] == 20_000, out
    assert out["refit_ok"] and out["narrow_ok"], out
    assert out["isotonic_by_ok"] and out["sigmoid_by_ok"], out
    assert out["evaluate_ok"] and out["threshold_ok"], out
    assert out["stage_ok"] and out["backend_ok"] and out["estimator_ok"], out


# -- issue 35: 2e7 rows in 600 MB Python workers -------------------------------------------

MEMORY_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from pyspark.sql import SparkSession, functions as F
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path = sys.argv[1]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.executor.pyspark.memory", "600m")
             # RLIMIT_AS caps address space: Arrow's default allocator (mimalloc)
             # reserves 1 GiB of it up front, OpenBLAS a buffer per thread, glibc an
             # arena per thread (docs/scale.md: the settings for capped workers).
             .config("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL", "system")
             .config("spark.executorEnv.OPENBLAS_NUM_THREADS", "1")
             .config("spark.executorEnv.MALLOC_ARENA_MAX", "2")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from distcal.core.isotonic import merge_blocks, pav_blocks
    from distcal.core.keyed import KeySpec
    from distcal.engines.spark import SparkEngine

    n = 20_000_000
    u = F.round(F.rand(11), 7)
    score = F.when(F.rand(12) < 0.4, F.lit(0.5)).otherwise(u)  # a hot score: 40% of the rows
    gen = spark.range(0, n, numPartitions=8).select(score.alias("score"))
    gen = gen.select("score", (F.rand(13) < F.col("score")).cast("int").alias("label"))
    gen.write.mode("overwrite").parquet(path + "/rows")
    df = spark.read.parquet(path + "/rows")

    def blocks(t):
        assert len(t.keys) == 1
        return pav_blocks(t.key_table(0))

    with SparkEngine().open_keyed(df, KeySpec(), on_invalid="raise") as kr:
        parts = kr.map(blocks)
        k, n_rows = kr.k, kr.n_rows
    merged = merge_blocks(parts)
    np.savez(path + "/blocks.npz", score_min=merged.score_min, score_max=merged.score_max,
             prob=merged.prob)
    # The oracle's pooling: Spark's own groupBy(score), written out, never collected.
    (df.groupBy("score").agg(F.sum("label").cast("double").alias("pos"),
                             F.count("*").cast("double").alias("n"))
       .write.mode("overwrite").parquet(path + "/pooled"))
    print(json.dumps({"ranges": k, "n_rows": n_rows}))
    spark.stop()
""")


@pytest.mark.slow
def test_issue_35_rows_in_600m_python_workers(tmp_path):
    """With 40% of the rows on one score (one range holds all of them) and the other 60%
    uniform on a grid of 1e7 scores (the case without a hot score is within it)."""
    import pyarrow.parquet as pq
    from scipy.optimize import isotonic_regression

    out = _child(MEMORY_CHILD, str(tmp_path), timeout=1800, env=full_jit_env())  # 2e7 rows
    assert out["n_rows"] == 20_000_000
    pooled = pq.read_table(tmp_path / "pooled").to_pandas().sort_values("score")
    fitted = isotonic_regression(pooled["pos"] / pooled["n"], weights=pooled["n"]).x
    b = np.load(tmp_path / "blocks.npz")
    s = pooled["score"].to_numpy()
    at = np.searchsorted(b["score_min"], s, side="right") - 1
    assert np.all(s <= b["score_max"][at])  # every distinct score is in a block
    np.testing.assert_allclose(b["prob"][at], fitted, rtol=0, atol=1e-12)


def test_a_given_number_of_ranges_takes_no_count_and_no_sample(spark):
    """A binary score, with or without segments, in ``n_ranges`` ranges: Spark's range
    partitioner cuts them, so the fit counts and samples nothing first (that was two of
    a small isotonic fit's six jobs). The models are the local ones."""
    import uuid

    rng = np.random.default_rng(12)
    df = pd.DataFrame({"score": rng.random(3000), "label": rng.integers(0, 2, 3000),
                       "g": rng.integers(0, 4, 3000)})
    sdf, sc = spark.createDataFrame(df), spark.sparkContext
    for by in (None, "g"):
        group = f"ranges-{uuid.uuid4().hex}"
        sc.setJobGroup(group, group)
        try:
            model = distcal.fit(sdf, by=by, n_ranges=3)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        assert jobs <= 3, jobs  # the range partitioner's sample, the pass, its results
        assert model == distcal.fit(df, by=by)


def test_scores_distinct_in_their_type_but_one_double_share_a_range(spark):
    """Longs beyond 2^53 (and decimals of many digits) are distinct to Spark but one double
    to the workers: the ranges are cut on the double, so equal doubles never lie in two
    ranges (the fit stopped: "merge_blocks needs parts in ascending, non-overlapping
    score order"), and the model is the local one."""
    rng = np.random.default_rng(9)
    scores = np.r_[2**53 + np.arange(300), rng.integers(0, 2**40, 300)].astype(np.int64)
    df = pd.DataFrame({"score": scores, "label": rng.integers(0, 2, 600)})
    model = distcal.fit(spark.createDataFrame(df), n_ranges=16)
    assert model == distcal.fit(df)


def test_a_task_leaves_the_imports_out_of_the_collection_spark_runs_after_it(spark):
    """A reused Spark Python worker runs a full ``gc.collect()`` after every task. The
    objects alive when a distcal task starts (the imports of numpy, pandas, pyarrow, scipy
    and distcal: some 100,000) are frozen first, so that collection walks only the task's
    own objects (it walked them all, ~0.1 s of CPU per task)."""
    def census(table):
        import gc

        return gc.get_freeze_count(), len(gc.get_objects())

    rng = np.random.default_rng(4)
    df = spark.createDataFrame(pd.DataFrame({"score": rng.random(500),
                                             "label": rng.integers(0, 2, 500)}))
    with ENGINE.open_keyed(df, KeySpec(), on_invalid="raise", n_ranges=2, passes=2) as kr:
        got = kr.map(census) + kr.map(census)  # the first pass's tasks, then the pooled ones
    frozen, collected = np.array(got).T
    assert len(got) == 4 and frozen.min() > 50_000, got
    assert collected.max() < frozen.min() / 5, got
