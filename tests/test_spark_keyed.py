"""SparkEngine.open_keyed / transform_rows: keyed tables exact against pandas and scipy.

Oracles are computed here, independently of distcal: the keyed rows are
exploded with pandas (one frame per key kind) and pooled by ``groupby``;
isotonic regression is scipy's. Tests that need a Spark session of their
own (a driver result cap, a Python worker memory cap, Spark Connect) run it
in a child process, since one process holds one SparkContext.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from conftest import full_jit_env
from pyspark import cloudpickle

import distcal
from distcal.core.keyed import KeySpec
from distcal.core.rows import add_up_rows, read_rows
from distcal.engines.spark import SparkEngine

ENGINE = SparkEngine()

# The functions mapped over the ranges live here; the Python workers cannot
# import this test module, so they travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


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


def oracle(pdf: pd.DataFrame, spec: KeySpec, k: int) -> dict:
    """{key: DataFrame(score, weight, positives, count)} from pandas, sorted by score."""
    w = pdf[spec.weight_col].to_numpy(float) if spec.weight_col else np.ones(len(pdf))
    live = w > 0
    if spec.score_cols is not None:
        z = pdf[list(spec.score_cols)].to_numpy(float)
    elif spec.multiclass:
        z = np.stack(pdf[spec.score_col].to_numpy())
    else:
        z = pdf[[spec.score_col]].to_numpy(float)
    y = pdf[spec.label_col].to_numpy(float)
    classes = [None] if not spec.multiclass else ([1] if k == 2 else list(range(k)))
    segs = [None] * len(pdf)
    if spec.by:
        frame = pdf[list(spec.by)]
        null = frame.isna().any(axis=1).to_numpy()
        segs = [None if null[i] else tuple(frame.iloc[i]) for i in range(len(pdf))]
    frames = []
    for c in classes:
        s = z[:, 0] if c is None else z[:, c if z.shape[1] > 1 else 0]
        y01 = y if c is None else (y == c).astype(float)
        base = pd.DataFrame({"score": s, "w": w, "wy": w * y01, "n": 1})[live]
        frames.append(base.assign(key=[(None, c)] * int(live.sum())))
        seg_keys = [(segs[i], c) for i in np.flatnonzero(live)]
        part = base.assign(key=seg_keys)
        frames.append(part[[kk[0] is not None for kk in seg_keys]])
    rows = pd.concat(frames)
    rows["key"] = rows["key"].map(_plain_key)
    pooled = rows.groupby(["key", "score"], sort=True).agg(weight=("w", "sum"),
                                                             positives=("wy", "sum"),
                                                             count=("n", "sum"))
    return {key: g.reset_index(level=0, drop=True).reset_index()
            for key, g in pooled.groupby(level=0)}


def _plain_key(key):
    seg, c = key
    if seg is not None:
        seg = tuple(int(v) if isinstance(v, float) and float(v).is_integer() else v
                    for v in seg)
    return (seg, c)


def key_tables(t):
    """Per range: {key: (score, weight, positives, count)} (small test data only)."""
    out = {}
    for i, key in enumerate(t.keys):
        kt = t.key_table(i)
        out[key] = (kt.score.copy(), kt.weight.copy(), kt.positives.copy(), kt.count.copy())
    return out


def check_against_oracle(parts: list[dict], expected: dict) -> None:
    gathered: dict = {}
    for part in parts:  # ascending score order
        for key, cols in part.items():
            gathered.setdefault(_plain_key(key), []).append(cols)
    assert set(gathered) == set(expected)
    for key, pieces in gathered.items():
        for a, b in zip(pieces, pieces[1:]):  # ranges ascending, non-overlapping per key
            assert a[0].max() < b[0].min()
        got = [np.concatenate([p[j] for p in pieces]) for j in range(4)]
        want = expected[key]
        np.testing.assert_array_equal(got[0], want["score"].to_numpy())
        np.testing.assert_allclose(got[1], want["weight"].to_numpy(), rtol=1e-12)
        np.testing.assert_allclose(got[2], want["positives"].to_numpy(), rtol=1e-12, atol=1e-9)
        np.testing.assert_array_equal(got[3], want["count"].to_numpy())


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


CASES = {
    "binary": (dict(), dict(score_col="score")),
    "binary-weighted": (dict(weights=True), dict(score_col="score", weight_col="w")),
    "by-one": (dict(by=1), dict(score_col="score", by=("g",))),
    "by-two-weighted": (dict(by=2, weights=True),
                        dict(score_col="score", by=("g", "h"), weight_col="w")),
    "vector-array": (dict(k=3), dict(score_col="probs", multiclass=True)),
    "vector-udt": (dict(k=3), dict(score_col="probs", multiclass=True)),
    "score-cols": (dict(k=3), dict(score_col=None, score_cols=("p0", "p1", "p2"),
                                   multiclass=True)),
    "by-x-multiclass": (dict(k=3, by=2, weights=True),
                        dict(score_col="probs", multiclass=True, by=("g", "h"),
                             weight_col="w")),
    "two-classes": (dict(k=2), dict(score_col="probs", multiclass=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_keyed_tables_equal_pandas(spark, case):
    make, spec_kw = CASES[case]
    pdf = make_rows(3000, seed=len(case), **make)
    if "score_cols" in spec_kw:
        z = np.stack(pdf.pop("probs").to_numpy())
        for j in range(z.shape[1]):
            pdf[f"p{j}"] = z[:, j]
    spec = KeySpec(**spec_kw)
    df = to_spark(spark, pdf, "udt" if case == "vector-udt" else None)
    k = make.get("k", 0)
    with ENGINE.open_keyed(df, spec, on_invalid="raise", n_ranges=5) as kr:
        assert kr.n_classes == k
        parts = kr.map(key_tables)
        assert 1 < len(parts) <= 5
        check_against_oracle(parts, oracle(pdf, spec, k))
        w = pdf["w"].to_numpy() if "w" in pdf else np.ones(len(pdf))
        assert kr.n_rows == int((w > 0).sum())
        assert kr.weight_total == pytest.approx(w.sum(), rel=1e-12)
        assert kr.dropped_rows == 0
        # map_rows: every valid row once, whole (all its class scores)
        seen = kr.map_rows(lambda p: (p.n_rows, float(p.label.sum()), p.score.shape))
        assert sum(s[0] for s in seen) == kr.n_rows
        y = pdf["label"].to_numpy(float)
        assert sum(s[1] for s in seen) == pytest.approx(y[w > 0].sum())
        assert all(s[2][1:] == ((k,) if k else ()) for s in seen)


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
        first = kr.map(key_tables)
        second = kr.map(key_tables)
        assert len(first) >= kr.k // 2
        check_against_oracle(first, oracle(pdf, spec, 0))
        check_against_oracle(second, oracle(pdf, spec, 0))
    with ENGINE.open_keyed(df, spec, on_invalid="raise") as kr:
        assert kr.k == 8  # at least default_ranges: 20k pairs are far below 200k per range


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
        parts = kr.map(key_tables)
        check_against_oracle(parts, oracle(pdf, spec, k))
    sizes = [len(p[key][0]) for p in parts]
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


# -- invalid input: the messages of read_rows --------------------------------------------

def _local_error(pdf, spec, on_invalid, k=None):
    try:
        _, stats = read_rows(pdf, spec, n_classes=k)
        totals = add_up_rows([stats], on_invalid)
    except distcal.DataError as exc:
        return str(exc), None
    return None, totals


def _bad_binary():
    pdf = make_rows(400, seed=11, by=1, weights=True)
    pdf["score"] = pdf["score"].astype(object)
    pdf.loc[3, "score"] = None
    pdf.loc[7, "score"] = float("nan")
    pdf["score"] = pdf["score"].astype(float)
    pdf["label"] = pdf["label"].astype(str)
    pdf.loc[9, "label"] = "yes"
    pdf.loc[10, "label"] = "2"
    pdf.loc[12, "w"] = -1.0
    return pdf, KeySpec(by=("g",), weight_col="w")


def _bad_multiclass():
    pdf = make_rows(400, seed=12, k=3)
    v = list(pdf["probs"])
    v[2] = np.array([0.5, 0.5])  # ragged
    v[4] = np.array([np.nan, 0.5, 0.5])
    pdf["probs"] = v
    pdf.loc[6, "label"] = 7
    return pdf, KeySpec(score_col="probs", multiclass=True)


@pytest.mark.parametrize("bad", [_bad_binary, _bad_multiclass])
@pytest.mark.parametrize("on_invalid", ["raise", "drop"])
def test_invalid_rows_same_error_as_read_rows(spark, bad, on_invalid):
    pdf, spec = bad()
    k = 3 if spec.multiclass else None
    message, totals = _local_error(pdf, spec, on_invalid, k)
    with ENGINE.open_keyed(to_spark(spark, pdf), spec, on_invalid=on_invalid) as kr:
        if on_invalid == "raise":
            assert message is not None
            with pytest.raises(distcal.DataError) as got:
                kr.map(key_tables)
            assert str(got.value) == message
        else:
            assert message is None
            kr.map(key_tables)
            assert (kr.n_rows, kr.dropped_rows) == (totals.n_rows, totals.dropped_rows)
            assert kr.weight_total == pytest.approx(totals.weight_total)


def test_missing_column_same_error_as_read_rows(spark):
    pdf = make_rows(50, seed=1)
    for spec in (KeySpec(score_col="nope"), KeySpec(by=("region",)),
                 KeySpec(weight_col="wt"), KeySpec(label_col="y")):
        with pytest.raises(distcal.DataError) as local:
            read_rows(pdf, spec)
        with pytest.raises(distcal.DataError) as remote:
            ENGINE.open_keyed(spark.createDataFrame(pdf), spec, on_invalid="raise")
        assert str(remote.value) == str(local.value)


def test_no_valid_rows(spark):
    pdf = pd.DataFrame({"score": [0.1, 0.2], "label": [1, 0], "w": [0.0, 0.0]})
    spec = KeySpec(weight_col="w")
    message, _ = _local_error(pdf, spec, "raise")
    with ENGINE.open_keyed(spark.createDataFrame(pdf), spec, on_invalid="raise") as kr:
        with pytest.raises(distcal.DataError) as got:
            kr.map(key_tables)
    assert str(got.value) == message


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

SEGMENTS_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from pyspark.sql import SparkSession, functions as F
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    connect = sys.argv[1] == "connect"
    builder = SparkSession.builder.config("spark.ui.enabled", "false")
    if connect:
        spark = builder.remote("local[2]").getOrCreate()
    else:
        spark = (builder.master("local[2]").config("spark.driver.maxResultSize", "8m")
                 .config("spark.sql.shuffle.partitions", "8").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    from distcal.core.keyed import KeySpec
    from distcal.engines.spark import SparkEngine

    n, segs = int(sys.argv[2]), int(sys.argv[3])
    df = spark.range(0, n, numPartitions=4).select(
        F.round(F.rand(1), 3).alias("score"), (F.rand(2) < 0.3).cast("int").alias("label"),
        (F.col("id") % segs).alias("seg"))

    def sums(t):  # per key: rows, positives (small: no table leaves the range)
        n_rows, _ = t.key_totals()
        pos = np.add.reduceat(t.table.positives, t.starts[:-1])
        return {k[0][0] if k[0] is not None else -1: (int(a), float(b))
                for k, a, b in zip(t.keys, n_rows, pos)}

    with SparkEngine().open_keyed(df, KeySpec(by=("seg",)), on_invalid="raise") as kr:
        parts = kr.map(sums)
        n_rows = kr.n_rows
    total = {}
    for p in parts:
        for k, (a, b) in p.items():
            t = total.setdefault(k, [0, 0.0])
            t[0] += a
            t[1] += b
    want = {int(r["seg"]): (int(r["n"]), float(r["p"])) for r in
            df.groupBy("seg").agg(F.count("*").alias("n"), F.sum("label").alias("p")).collect()}
    ok = all(tuple(total[k]) == want[k] for k in want) and len(total) == segs + 1
    print(json.dumps({"ok": ok, "n_rows": n_rows, "global": total[-1], "keys": len(total),
                      "ranges": len(parts)}))
    spark.stop()
""")


def _child(script: str, *args: str, timeout: int = 900) -> dict:
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                       timeout=timeout, env=full_jit_env())
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_many_segments_under_a_small_driver_result_cap():
    out = _child(SEGMENTS_CHILD, "classic", "200000", "2000")
    assert out["ok"] and out["keys"] == 2001 and out["n_rows"] == 200_000, out
    assert out["global"][0] == 200_000


def test_keyed_map_on_spark_connect():
    out = _child(SEGMENTS_CHILD, "connect", "20000", "20")
    assert out["ok"] and out["keys"] == 21 and out["n_rows"] == 20_000, out


# -- issue 35: 2e7 rows in 600 MB Python workers -------------------------------------------

MEMORY_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from pyspark.sql import SparkSession, functions as F
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path, hot = sys.argv[1], sys.argv[2] == "hot"
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
    score = F.when(F.rand(12) < 0.4, F.lit(0.5)).otherwise(u) if hot else u
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
@pytest.mark.parametrize("hot", ["cold", "hot"])
def test_issue_35_rows_in_600m_python_workers(tmp_path, hot):
    import pyarrow.parquet as pq
    from scipy.optimize import isotonic_regression

    out = _child(MEMORY_CHILD, str(tmp_path), hot, timeout=1800)
    assert out["n_rows"] == 20_000_000
    pooled = pq.read_table(tmp_path / "pooled").to_pandas().sort_values("score")
    fitted = isotonic_regression(pooled["pos"] / pooled["n"], weights=pooled["n"]).x
    b = np.load(tmp_path / "blocks.npz")
    s = pooled["score"].to_numpy()
    at = np.searchsorted(b["score_min"], s, side="right") - 1
    assert np.all(s <= b["score_max"][at])  # every distinct score is in a block
    np.testing.assert_allclose(b["prob"][at], fitted, rtol=0, atol=1e-12)
