"""MODL through the public API: ``fit(method="modl")``, ``discretize``, the CLI, every engine.

The partition itself is checked against brute force and a plain dynamic
programme in tests/test_modl.py; here the oracle is that core applied to
class counts computed independently with numpy in the test, and the
engines must agree with the local result.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from test_modl import brute_force, oracle_cost, plain_groups, sum_rows
from test_spark_cluster import run_child

import distcal


def scores(n: int, seed: int, classes: int = 2, decimals: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = np.round(rng.random(n), decimals)
    cut = np.minimum((s + rng.normal(0, 0.15, n)) * classes, classes - 1).clip(0).astype(int)
    return pd.DataFrame({"score": s, "label": cut})


def counts_by_numpy(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list]:
    classes = sorted(df.label.unique().tolist())
    values = np.unique(df.score.to_numpy())
    counts = np.array([[int(((df.score == v) & (df.label == c)).sum()) for c in classes]
                       for v in values])
    return values, counts, classes


def test_fit_modl_is_the_brute_force_optimum_on_small_data():
    df = scores(60, seed=1, decimals=1)  # 11 distinct scores: brute force over 2^10 partitions
    values, counts, _ = counts_by_numpy(df)
    best_cost, best_cuts = brute_force(counts)[0]
    model = distcal.fit(df, method="modl")
    assert model.params["cost"] == pytest.approx(best_cost, rel=1e-12)
    assert model.params["exact"] is True
    starts = [0, *best_cuts] if best_cuts[:1] != (0,) else list(best_cuts)
    assert model.blocks["score_min"].tolist() == [values[i] for i in starts]
    # each interval predicts its positive rate, stepwise
    b = model.blocks
    np.testing.assert_allclose(b.prob, b.positives / b.weight)
    np.testing.assert_allclose(model.predict(b.score_min), b.prob)


def test_fit_modl_cost_is_the_criterion_of_its_blocks():
    df = scores(5000, seed=2)
    model = distcal.fit(df, method="modl")
    b = model.blocks
    rows = np.column_stack([b.weight - b.positives, b.positives]).astype(int).tolist()
    assert model.params["cost"] == pytest.approx(oracle_cost(rows), rel=1e-12)
    assert b.weight.sum() == len(df)


def test_fit_modl_refuses_weights_and_non_binary_labels():
    df = scores(200, seed=3)
    df["w"] = 1.0
    with pytest.raises(distcal.DataError, match="column 'w'"):
        distcal.fit(df, method="modl", weight_col="w")
    df["label"] = df["label"] * 0.5
    with pytest.raises(distcal.DataError, match="column 'label'"):
        distcal.fit(df, method="modl")
    df["g"] = np.arange(len(df)) % 3
    df["label"] = (df["label"] > 0).astype(float)
    df.loc[df.g == 2, "label"] *= 0.5  # one segment's labels are not 0/1
    bad = int(((df["label"] != 0) & (df["label"] != 1)).sum())  # the rows, counted
    with pytest.raises(distcal.DataError, match=rf"column 'label': {bad} rows are neither 0 "
                                                r"nor 1 \(MODL calibration needs 0/1 labels\)"):
        distcal.fit(df, method="modl", by="g")


@pytest.mark.parametrize("classes", [2, 3, 5])
def test_discretize_any_labels_matches_brute_force(classes):
    df = scores(80, seed=10 + classes, classes=classes, decimals=1)
    names = ["apple", "kiwi", "pear", "fig", "lime"][:classes]
    df["label"] = [names[i] for i in df.label]
    values, counts, found = counts_by_numpy(df)
    best_cost, _ = brute_force(counts)[0]
    out = distcal.discretize(df)
    assert out.attrs["cost"] == pytest.approx(best_cost, rel=1e-12)
    assert list(out.columns) == ["score_min", "score_max", "n", *sorted(found)]
    assert out["n"].sum() == len(df) and out[sorted(found)].to_numpy().sum() == len(df)


def test_discretize_pure_noise_is_one_interval():
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"score": rng.random(3000), "label": rng.integers(0, 2, 3000)})
    assert len(distcal.discretize(df)) == 1


def test_discretize_bad_scores():
    df = pd.DataFrame({"score": [0.1, np.nan, 0.3], "label": ["a", "b", "a"]})
    with pytest.raises(distcal.DataError, match="column 'score': 1 row is null or NaN"):
        distcal.discretize(df)


def test_cli_fit_modl_and_discretize(tmp_path):
    df = scores(3000, seed=5, classes=3)
    path = tmp_path / "s.parquet"
    df.to_parquet(path)
    binary = tmp_path / "b.parquet"
    df.assign(label=(df.label > 0).astype(int)).to_parquet(binary)
    r = subprocess.run([sys.executable, "-m", "distcal", "fit", "--method", "modl", "--input",
                        str(binary), "--output", str(tmp_path / "m")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    assert line["cost"] == pytest.approx(distcal.load(tmp_path / "m").params["cost"])
    r = subprocess.run([sys.executable, "-m", "distcal", "discretize", "--input", str(path),
                        "--output", str(tmp_path / "d.parquet")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    expect = distcal.discretize(df)
    assert json.loads(r.stdout)["cost"] == pytest.approx(expect.attrs["cost"], rel=1e-12)
    written = pd.read_parquet(tmp_path / "d.parquet")
    assert written["n"].tolist() == expect["n"].tolist()
    # MODL counts rows: a weight column it would ignore is refused, and nothing is written.
    r = subprocess.run([sys.executable, "-m", "distcal", "discretize", "--input", str(path),
                        "--weight-col", "score", "--output", str(tmp_path / "w.parquet")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--weight-col" in r.stderr
    assert not (tmp_path / "w.parquet").exists()


@pytest.mark.spark
def test_spark_equals_local(spark):
    df = scores(20_000, seed=6, classes=3, decimals=3)
    sdf = spark.createDataFrame(df).repartition(5)
    local = distcal.discretize(df)
    remote = distcal.discretize(sdf)
    pd.testing.assert_frame_equal(remote.reset_index(drop=True), local, check_dtype=False)
    assert remote.attrs["cost"] == pytest.approx(local.attrs["cost"], rel=1e-9)
    binary = df.assign(label=(df.label > 0).astype(int))
    assert distcal.fit(spark.createDataFrame(binary).repartition(4), method="modl") == \
        distcal.fit(binary, method="modl")
    # The greedy path (about 8,600 distinct scores, most of them mixed), ranges cut anywhere.
    wide = scores(20_000, seed=8, decimals=4)
    model = distcal.fit(wide, method="modl")
    assert model.params["exact"] is False
    assert distcal.fit(spark.createDataFrame(wide).repartition(4), method="modl") == model
    # Granularised: grouped range by range on the executors, the same groups as locally.
    grouped = distcal.fit(wide, method="modl", max_groups=300)
    assert grouped.params["groups"] == len(plain_groups(counts_by_numpy(wide)[1], 300))
    assert distcal.fit(spark.createDataFrame(wide).repartition(4), method="modl",
                       max_groups=300) == grouped
    local = distcal.discretize(df, max_groups=40)
    remote = distcal.discretize(sdf, max_groups=40)
    pd.testing.assert_frame_equal(remote.reset_index(drop=True), local, check_dtype=False)
    assert remote.attrs["groups"] == local.attrs["groups"] == \
        len(plain_groups(counts_by_numpy(df)[1], 40))


@pytest.mark.dask
def test_dask_equals_local():
    import dask.dataframe as dd

    df = scores(20_000, seed=7, classes=3, decimals=3)
    ddf = dd.from_pandas(df, npartitions=4)
    local = distcal.discretize(df)
    remote = distcal.discretize(ddf)
    pd.testing.assert_frame_equal(remote, local, check_dtype=False)
    binary = df.assign(label=(df.label > 0).astype(int))
    assert distcal.fit(dd.from_pandas(binary, npartitions=3), method="modl") == \
        distcal.fit(binary, method="modl")
    wide = scores(20_000, seed=9, decimals=4)
    model = distcal.fit(wide, method="modl")
    assert model.params["exact"] is False
    assert distcal.fit(dd.from_pandas(wide, npartitions=5), method="modl") == model
    grouped = distcal.fit(wide, method="modl", max_groups=300)
    assert grouped.params["groups"] == len(plain_groups(counts_by_numpy(wide)[1], 300))
    assert distcal.fit(dd.from_pandas(wide, npartitions=5), method="modl",
                       max_groups=300) == grouped
    local = distcal.discretize(df, max_groups=40)
    remote = distcal.discretize(ddf, max_groups=40)
    pd.testing.assert_frame_equal(remote, local, check_dtype=False)
    assert remote.attrs["groups"] == local.attrs["groups"]


def test_max_groups_parameter():
    df = scores(5000, seed=12, decimals=4)
    model = distcal.fit(df, method="modl")
    assert model.params["max_groups"] == 100_000 and model.params["groups"] is None
    values, counts, _ = counts_by_numpy(df)
    small = distcal.fit(df, method="modl", max_groups=8)
    starts = plain_groups(counts, 8)
    assert small.params["groups"] == len(starts) and small.params["exact"] is True
    # the exact optimum of the grouped table, every cut at a group start
    assert small.params["cost"] == pytest.approx(
        brute_force(np.asarray(sum_rows(counts, starts)))[0][0], rel=1e-12)
    assert set(small.blocks["score_min"].tolist()) <= {values[i] for i in starts}
    with pytest.raises(ValueError, match="max_groups"):
        distcal.fit(df, method="modl", max_groups=0)
    with pytest.raises(ValueError, match="max_groups"):
        distcal.discretize(df, max_groups=2.5)
    with pytest.raises(TypeError):
        distcal.fit(df, method="isotonic", max_groups=10)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_2e6_distinct_scores_under_8m_driver_results(tmp_path):
    """2e6 rows, 2e6 distinct scores: what reaches the driver is at most max_groups rows.

    The data is written by the child's driver with pyarrow and read by Spark,
    so the local fit sees the very same rows. (``discretize`` runs the same
    passes as ``fit(method="modl")``; test_spark_equals_local compares its tables.)
    """
    out = run_child(f"""
        import numpy as np, pandas as pd, pyarrow as pa, pyarrow.parquet as pq
        n = 2_000_000
        rng = np.random.default_rng(0)
        s = rng.permutation(n) / n
        y = (rng.random(n) < s * s).astype(np.int64)
        path = {str(tmp_path / "d.parquet")!r}
        pq.write_table(pa.table({{"score": s, "label": y}}), path, row_group_size=1 << 18)
        sdf = spark.read.parquet(path).repartition(8)
        pdf = pd.DataFrame({{"score": s, "label": y}})
        fit_remote = distcal.fit(sdf, method="modl")
        fit_local = distcal.fit(pdf, method="modl")
        print(json.dumps({{"fit_same": fit_remote == fit_local,
                          "groups": [fit_remote.params["groups"], fit_local.params["groups"]],
                          "costs": [fit_remote.params["cost"], fit_local.params["cost"]],
                          "intervals": len(fit_local.blocks)}}))
    """, conf={"spark.driver.maxResultSize": "8m", "spark.driver.memory": "2g"})
    assert out["fit_same"]
    assert out["groups"][0] == out["groups"][1]
    assert 50_000 < out["groups"][0] <= 100_000
    assert out["costs"][0] == out["costs"][1] and out["intervals"] > 5
