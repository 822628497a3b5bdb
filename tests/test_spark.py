"""The Spark engine on a real local SparkSession, against the local engine and MLlib."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores

import distcal


def both(spark, df, partitions=4):
    return spark.createDataFrame(df).repartition(partitions), df


@pytest.mark.parametrize("partitions", [1, 4, 13, 40])
def test_isotonic_equals_local(spark, partitions):
    df = make_scores(30_000, seed=partitions, weights=True)
    sdf, _ = both(spark, df, partitions)
    model = distcal.fit(sdf, weight_col="w")
    local = distcal.fit(df, weight_col="w")
    assert model == local
    q = np.linspace(-0.1, 1.1, 1201)
    np.testing.assert_allclose(model.predict(q), local.predict(q), rtol=1e-9, atol=1e-12)


def test_shuffled_rows_and_range_counts(spark):
    df = make_scores(20_000, seed=2, ties=False, weights=True)
    local = distcal.fit(df, weight_col="w")
    shuffled = df.sample(frac=1.0, random_state=3).reset_index(drop=True)
    for n_ranges in (1, 3, 16):
        sdf = spark.createDataFrame(shuffled).repartition(7)
        assert distcal.fit(sdf, weight_col="w", n_ranges=n_ranges) == local


def test_matches_spark_mllib(spark):
    from pyspark.ml.regression import IsotonicRegression

    df = make_scores(20_000, seed=4, weights=True)
    df = df[df.w > 0]  # MLlib drops nothing; zero weights are equivalent anyway
    sdf = spark.createDataFrame(df).repartition(5)
    mllib = IsotonicRegression(featuresCol="score", labelCol="label", weightCol="w").fit(sdf)
    ours = distcal.fit(sdf, weight_col="w")
    q = pd.DataFrame({"score": np.concatenate([np.linspace(-0.2, 1.2, 1401),
                                               df.score.to_numpy()[:500]])})
    expect = (mllib.transform(spark.createDataFrame(q)).toPandas()["prediction"].to_numpy())
    np.testing.assert_allclose(ours.predict(q.score), expect, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method,params", [
    ("sigmoid", {}), ("histogram", {"strategy": "quantile", "n_bins": 12}),
    ("histogram", {}), ("isotonic", {"increasing": "auto", "interpolation": "step"}),
    ("isotonic", {"y_min": 0.1, "y_max": 0.8}),
])
def test_other_methods_equal_local(spark, method, params):
    df = make_scores(20_000, seed=5, weights=True)
    sdf, _ = both(spark, df, 6)
    assert distcal.fit(sdf, method=method, weight_col="w", **params) == \
        distcal.fit(df, method=method, weight_col="w", **params)


def test_auto_direction_with_fractional_labels(spark):
    rng = np.random.default_rng(6)
    s = rng.random(3000)
    df = pd.DataFrame({"score": s, "label": np.clip(1 - s + rng.normal(0, .2, 3000), 0, 1)})
    model = distcal.fit(spark.createDataFrame(df), increasing="auto")
    assert model.params["increasing_"] is False
    assert model == distcal.fit(df, increasing="auto")


def test_threshold_equals_local(spark):
    df = make_scores(20_000, seed=7, weights=True)
    sdf, _ = both(spark, df, 9)
    for kw in ({"cost_fp": 1, "cost_fn": 3}, {"cost_fp": 2, "cost_fn": 1}):
        a = distcal.optimal_threshold(sdf, weight_col="w", **kw)
        b = distcal.optimal_threshold(df, weight_col="w", **kw)
        assert a.threshold == b.threshold
        for f in ("cost", "n_positive_predicted", "tp", "fp", "tn", "fn"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9)
    z = df.assign(z=np.where(df.label == 1, -1.0, 0.5))
    a = distcal.optimal_threshold(spark.createDataFrame(z), loss_col="z", weight_col="w")
    b = distcal.optimal_threshold(z, loss_col="z", weight_col="w")
    assert a.threshold == b.threshold and a.cost == pytest.approx(b.cost, rel=1e-9)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_evaluate_equals_local(spark, strategy):
    df = make_scores(20_000, seed=8, weights=True).rename(columns={"score": "prob"})
    sdf, _ = both(spark, df, 5)
    a = distcal.evaluate(sdf, weight_col="w", strategy=strategy)
    b = distcal.evaluate(df, weight_col="w", strategy=strategy)
    for f in ("brier", "log_loss", "ece", "mce", "auc", "reliability", "resolution",
              "uncertainty", "accuracy", "reliability_exact", "resolution_exact",
              "adaptive_ece", "adaptive_mce", "smece", "smece_sigma"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9, abs=1e-12), f
    pd.testing.assert_frame_equal(a.calibration_curve, b.calibration_curve, rtol=1e-9)
    pd.testing.assert_frame_equal(a.roc, b.roc, rtol=1e-9)
    assert a.confusion == pytest.approx(b.confusion, rel=1e-9)


def test_transform(spark):
    df = make_scores(5000, seed=9)
    df["id"] = np.arange(len(df))
    sdf = spark.createDataFrame(df).repartition(3)
    model = distcal.fit(df)
    out = model.transform(sdf, output_col="p")
    assert out.columns == ["score", "label", "id", "p"]
    assert dict(out.dtypes)["p"] == "double"
    got = out.toPandas().sort_values("id")
    # evaluated in the JVM with np.interp's formula: equal to rounding
    np.testing.assert_allclose(got["p"].to_numpy(), model.predict(got["score"]), rtol=0,
                               atol=1e-15)
    with pytest.raises(distcal.DataError, match="output column 'p' already exists"):
        model.transform(out, output_col="p")  # never overwrites an input column
    with pytest.raises(distcal.DataError, match="column 'nope'"):
        model.transform(sdf, score_col="nope")


@pytest.mark.parametrize("method,params", [
    ("isotonic", {}), ("isotonic", {"interpolation": "step"}), ("sigmoid", {}),
    ("histogram", {"strategy": "quantile", "n_bins": 7}), ("histogram", {"n_bins": 4}),
    ("isotonic", {"increasing": False}),
])
def test_transform_every_map_kind(spark, method, params):
    rng = np.random.default_rng(12)
    df = make_scores(4000, seed=12)
    df.loc[:3, "score"] = [0.25, 0.5, 0.0, 1.0]  # on histogram edges
    model = distcal.fit(df, method=method, **params)
    q = np.concatenate([df.score.to_numpy(), rng.uniform(-0.5, 1.5, 2000),
                        [np.inf, -np.inf, np.nan], np.asarray(model.params.get("edges", []))])
    sdf = spark.createDataFrame(pd.DataFrame({"score": q, "i": np.arange(len(q))}))
    got = model.transform(sdf).toPandas().sort_values("i")["calibrated"].to_numpy()
    np.testing.assert_allclose(got, model.predict(q), rtol=0, atol=1e-15, equal_nan=True)


def test_transform_infinite_blocks_and_nulls(spark):
    df = pd.DataFrame({"score": [-np.inf, -np.inf, 0.2, 0.4, 0.6, np.inf],
                       "label": [0, 0, 1, 0, 1, 1]})
    model = distcal.fit(df)
    q = [-np.inf, -1e300, 0.2, 0.5, 0.6, 1e300, np.inf, np.nan]
    sdf = spark.createDataFrame(pd.DataFrame({"score": q, "i": range(len(q))}))
    got = model.transform(sdf).toPandas().sort_values("i")["calibrated"].to_numpy()
    np.testing.assert_allclose(got, model.predict(q), atol=1e-15, equal_nan=True)
    nulls = spark.createDataFrame([(None,), (0.3,)], "score double")
    vals = [r["calibrated"] for r in model.transform(nulls).collect()]
    assert vals[0] is None and vals[1] == pytest.approx(model.predict([0.3])[0])


def test_edge_partitions_and_values(spark):
    df = pd.DataFrame({"score": [-np.inf, 0.2, 0.2, 0.5, np.inf, 0.7] * 50,
                       "label": [0, 0, 1, 1, 1, 0] * 50})
    skewed = spark.createDataFrame(df).repartition(40)  # many empty partitions
    assert distcal.fit(skewed) == distcal.fit(df)
    one = pd.DataFrame({"score": [0.4] * 100, "label": [1, 0, 0, 0] * 25})
    m = distcal.fit(spark.createDataFrame(one), n_ranges=5)
    assert len(m.blocks) == 1 and m.blocks.prob.iloc[0] == 0.25


def test_bad_input_same_errors(spark):
    cases = [
        pd.DataFrame({"score": [0.1, None, 0.3, float("nan")], "label": [0, 1, 0, 1]}),
        pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": [0.0, 2.0, None, 1.0]}),
        pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": ["0", "x", "1", "yes"]}),
        pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": [0, 1, 0, 1],
                      "w": [1.0, -1.0, float("inf"), 1.0]}),
    ]
    for df in cases:
        kw = {"weight_col": "w"} if "w" in df else {}
        local, remote = _errors(spark, df, kw)
        assert local == remote


def _errors(spark, df, kw):
    with pytest.raises(distcal.DataError) as local:
        distcal.fit(df, **kw)
    with pytest.raises(distcal.DataError) as remote:
        distcal.fit(spark.createDataFrame(df), **kw)
    return str(local.value), str(remote.value)


def test_schema_errors_and_empty(spark):
    sdf = spark.createDataFrame(pd.DataFrame({"score": [0.1, 0.2], "label": [0, 1]}))
    with pytest.raises(distcal.DataError, match=r"column 'target' \(label\) not found"):
        distcal.fit(sdf, label_col="target")
    with pytest.raises(distcal.DataError, match="no rows with weight > 0"):
        distcal.fit(sdf.where("score > 5"))
    dates = spark.sql("select current_date() as score, 1 as label")
    with pytest.raises(distcal.DataError, match=r"has type date; expected numbers"):
        distcal.fit(dates)


def test_drop_invalid(spark):
    df = pd.DataFrame({"score": [0.1, None, 0.3, 0.5, 0.7], "label": [0, 1, 5, 1, 1]})
    model = distcal.fit(spark.createDataFrame(df), on_invalid="drop")
    assert model.dropped_rows == 2 and model.n_rows == 3
    assert model == distcal.fit(df, on_invalid="drop")


def test_pipeline_fit_save_load(spark, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import SQLTransformer

    from distcal.spark import Calibrator, CalibratorModel

    df = make_scores(8000, seed=10, weights=True).rename(columns={"score": "raw"})
    sdf = spark.createDataFrame(df)
    pipe = Pipeline(stages=[
        SQLTransformer(statement="SELECT *, raw AS score FROM __THIS__"),
        Calibrator(weightCol="w", outputCol="p", method="isotonic", interpolation="step")])
    fitted = pipe.fit(sdf)
    stage = fitted.stages[-1]
    assert isinstance(stage, CalibratorModel)
    assert stage.model == distcal.fit(df.rename(columns={"raw": "score"}), weight_col="w",
                                      interpolation="step")
    fitted.write().overwrite().save(str(tmp_path / "pipe"))
    back = PipelineModel.load(str(tmp_path / "pipe"))
    assert back.stages[-1].model == stage.model and back.stages[-1].uid == stage.uid
    assert back.stages[-1].getOutputCol() == "p"
    a = fitted.transform(sdf).toPandas().sort_values("raw")
    b = back.transform(sdf).toPandas().sort_values("raw")
    np.testing.assert_array_equal(a["p"].to_numpy(), b["p"].to_numpy())
    # the stage directory holds distcal's own model format
    assert distcal.load(next((tmp_path / "pipe" / "stages").glob("1_*")) / "model") == stage.model


def test_calibrator_params(spark):
    from distcal.spark import Calibrator

    df = make_scores(3000, seed=11)
    sdf = spark.createDataFrame(df)
    hist = Calibrator(method="histogram", nBins=7, strategy="quantile").fit(sdf)
    assert hist.model == distcal.fit(df, method="histogram", n_bins=7, strategy="quantile")
    sig = Calibrator(method="sigmoid", outputCol="q").fit(sdf)
    assert sig.transform(sdf).columns == ["score", "label", "q"]
    auto = Calibrator(increasing="auto", yMin=0.05).fit(sdf)
    assert auto.model.params["increasing_"] is True and auto.model.blocks.prob.min() >= 0.05


def test_fit_and_threshold_one_pass(spark):
    df = make_scores(20_000, seed=13, weights=True)
    sdf, _ = both(spark, df, 6)
    model, res = distcal.fit_and_threshold(sdf, weight_col="w", cost_fn=4)
    assert model == distcal.fit(df, weight_col="w")
    alone = distcal.optimal_threshold(df, weight_col="w", cost_fn=4)
    assert res.threshold == alone.threshold and res.cost == pytest.approx(alone.cost, rel=1e-9)


def test_evaluate_many(spark):
    rng = np.random.default_rng(14)
    p = rng.random(4000)
    df = pd.DataFrame({"raw": p, "cal": np.sqrt(p), "label": (rng.random(4000) < p).astype(int)})
    df.loc[0, "raw"] = 2.0  # invalid in one column: dropped for both
    a = distcal.evaluate_many(spark.createDataFrame(df), ["raw", "cal"], on_invalid="drop")
    b = distcal.evaluate_many(df, ["raw", "cal"], on_invalid="drop")
    for c in ("raw", "cal"):
        assert a[c].n_rows == b[c].n_rows == 3999 and a[c].dropped_rows == 1
        assert a[c].brier == pytest.approx(b[c].brier, rel=1e-9)
    with pytest.raises(distcal.DataError) as remote:
        distcal.evaluate_many(spark.createDataFrame(df), ["raw", "cal"])
    with pytest.raises(distcal.DataError) as local:
        distcal.evaluate_many(df, ["raw", "cal"])
    assert str(remote.value) == str(local.value)


def test_forced_engine_on_local_data(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    df = make_scores(5000, seed=18)
    assert distcal.fit(df, engine="spark") == distcal.fit(df)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "s.parquet")
    assert distcal.fit(str(tmp_path / "s.parquet"), engine="spark") == distcal.fit(df)
    with pytest.raises(TypeError, match="collect"):
        distcal.fit(spark.createDataFrame(df), engine="local")


def test_combine_is_ignored_with_a_warning(spark):
    df = make_scores(2_000, seed=3)
    with pytest.warns(FutureWarning, match="combine is ignored"):
        model = distcal.fit(spark.createDataFrame(df), combine=True)
    assert model == distcal.fit(df)


def test_all_null_sample_of_scores(spark):
    """The combine decision's sample holds only null scores (estimate_distinct of d = 0)."""
    rng = np.random.default_rng(9)
    score = rng.random(400).round(2)
    score[:40] = np.nan
    df = pd.DataFrame({"score": score, "label": (rng.random(400) < 0.5).astype(int)})
    rows = [(None if np.isnan(s) else float(s), int(y)) for s, y in zip(df.score, df.label)]
    sdf = spark.createDataFrame(rows, "score double, label int").coalesce(1)  # nulls first
    got = distcal.fit(sdf, on_invalid="drop", sample_rows=10)
    assert got == distcal.fit(df, on_invalid="drop")
    assert got.dropped_rows == 40


def test_input_formats_of_the_spark_backend(spark, tmp_path, capsys):
    """--input-format csv|json|orc reads the same rows as Parquet; errors are one line."""
    import pyarrow as pa
    import pyarrow.orc as orc

    from distcal.cli.main import main
    from distcal.cli.spark import SparkBackend

    df = make_scores(2000, seed=5)
    df.to_csv(tmp_path / "s.csv", index=False)
    df.to_json(tmp_path / "s.json", orient="records", lines=True)
    orc.write_table(pa.Table.from_pandas(df, preserve_index=False), str(tmp_path / "s.orc"))
    ref = distcal.fit(df)
    backend = SparkBackend(spark)
    for fmt in ("csv", "json", "orc"):
        data = backend.read({"input": str(tmp_path / f"s.{fmt}"), "input_format": fmt})
        assert distcal.fit(data) == ref, fmt
    with pytest.raises(distcal.DataError, match=r"input '.*s\.csv' cannot be read as orc"):
        backend.read({"input": str(tmp_path / "s.csv"), "input_format": "orc"})
    # the local engine reads Parquet only: a usage error before anything runs
    assert main(["fit", "--input", str(tmp_path / "s.csv"), "--input-format", "csv",
                 "--output", str(tmp_path / "m")]) == 2
    assert "--input-format csv needs the Spark engine" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
