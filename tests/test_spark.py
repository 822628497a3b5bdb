"""What only Spark has: MLlib's isotonic regression as an oracle, the JVM transform's
nulls and plan, the pyspark.ml stage, Spark's types and input formats, a fit that runs
on Spark from local data. What every engine shares is in test_engines.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores

import distcal


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


def test_transform_nulls_stay_null(spark):
    model = distcal.fit(make_scores(500, seed=20))
    nulls = spark.createDataFrame([(None,), (0.3,)], "score double")
    vals = [r["calibrated"] for r in model.transform(nulls).collect()]
    assert vals[0] is None and vals[1] == pytest.approx(model.predict([0.3])[0])


def test_schema_errors_and_empty(spark):
    sdf = spark.createDataFrame(pd.DataFrame({"score": [0.1, 0.2], "label": [0, 1]}))
    with pytest.raises(distcal.DataError, match=r"column 'target' \(label\) not found"):
        distcal.fit(sdf, label_col="target")
    with pytest.raises(distcal.DataError, match="no rows with weight > 0"):
        distcal.fit(sdf.where("score > 5"))
    dates = spark.sql("select current_date() as score, 1 as label")
    with pytest.raises(distcal.DataError, match=r"has type date; expected numbers"):
        distcal.fit(dates)


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
    model_dir = next((tmp_path / "pipe" / "stages").glob("1_*")) / "model"
    assert distcal.load(model_dir) == stage.model
    assert json.loads((model_dir / "model.json").read_text())["format_version"] == 2
    # a stage saved before (a binary model in format 1) loads; a model of another kind does not
    shutil.rmtree(model_dir)
    shutil.copytree(Path(__file__).parent / "fixtures" / "models_v1" / "isotonic_step", model_dir)
    old = PipelineModel.load(str(tmp_path / "pipe")).stages[-1].model
    assert type(old) is distcal.CalibrationModel and old == distcal.load(model_dir)
    shutil.rmtree(model_dir)
    distcal.fit(df.rename(columns={"raw": "score"}).assign(g=df.index % 2), by="g").save(
        model_dir)
    with pytest.raises(distcal.ModelError, match="holds KeyedModel.*binary score"):
        PipelineModel.load(str(tmp_path / "pipe"))


def test_pipeline_saves_where_spark_does_on_another_default_filesystem(spark, tmp_path):
    # A path without a scheme is on the cluster's default filesystem (HDFS on YARN), for
    # the stage's model as for the metadata Spark writes beside it. Here the default is a
    # viewfs mount whose fallback is a directory of this machine, so where each file went
    # can be seen; the same path on the local disk must stay empty.
    from pyspark.ml import Pipeline, PipelineModel

    from distcal.spark import Calibrator

    sdf = spark.createDataFrame(make_scores(2000, seed=4))
    fitted = Pipeline(stages=[Calibrator(outputCol="p")]).fit(sdf)
    store = tmp_path / "default_fs"
    store.mkdir()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    before = conf.get("fs.defaultFS")
    conf.set("fs.viewfs.mounttable.distcaltest.linkFallback", store.as_uri())
    conf.set("fs.defaultFS", "viewfs://distcaltest/")
    target = str(tmp_path / "pipe")  # absolute, no scheme
    try:
        fitted.write().save(target)
        back = PipelineModel.load(target)
    finally:
        conf.set("fs.defaultFS", before)
    assert not Path(target).exists()
    stage_dir = next(Path(str(store) + target, "stages").glob("0_*"))
    assert sorted(p.name for p in stage_dir.iterdir()) == ["metadata", "model"]
    assert back.stages[0].model == fitted.stages[0].model


def test_columns_named_with_dots(spark):
    # Spark takes any column name (backticked in SQL); pyspark's mapInArrow resolved its
    # inputs unquoted, so a dot in a name (the score's, or any other column's) failed.
    from distcal.spark import Calibrator

    df = make_scores(3000, seed=21).rename(columns={"score": "p.score", "label": "y.true"})
    sdf = spark.createDataFrame(df.assign(**{"meta.id": np.arange(len(df))}))
    want = distcal.fit(df, score_col="p.score", label_col="y.true")
    assert distcal.fit(sdf, score_col="p.score", label_col="y.true") == want
    assert Calibrator(scoreCol="p.score", labelCol="y.true").fit(sdf).model == want
    assert distcal.evaluate(sdf, prob_col="p.score", label_col="y.true").brier == \
        pytest.approx(distcal.evaluate(df, prob_col="p.score", label_col="y.true").brier,
                      rel=1e-12)
    cols = ["s.0", "s.1", "s.2"]
    rng = np.random.default_rng(3)
    mc = pd.DataFrame(rng.normal(size=(600, 3)), columns=cols).assign(
        **{"y.cls": rng.integers(0, 3, 600), "meta.id": np.arange(600)})
    model = distcal.fit(mc, score_cols=cols, label_col="y.cls")
    assert distcal.fit(spark.createDataFrame(mc), score_cols=cols, label_col="y.cls") == model
    out = model.transform(spark.createDataFrame(mc), output_col="p").toPandas()
    assert list(out.columns) == [*mc.columns, "p"]
    np.testing.assert_allclose(np.stack(out.sort_values("meta.id").p),
                               model.predict(mc[cols].to_numpy()), rtol=1e-12)


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
    # A Python bool is the text it stands for (it was a TypeError from Params' converter)
    down = Calibrator(increasing=False)
    assert down.getOrDefault(down.increasing) == "false"
    assert down.fit(sdf).model == distcal.fit(df, increasing=False)
    # the stage calibrates one binary score: temperature scaling (multiclass) is refused
    # before a model it could neither transform with nor load is made
    with pytest.raises(distcal.ParameterError, match="method must be one of isotonic, "
                       "sigmoid, histogram, modl, beta, venn_abers .*got 'temperature'"):
        Calibrator(method="temperature").fit(sdf)
    # a Param given as None is unset (cleared), as pyspark.ml's setParams does
    assert Calibrator(scoreIndex=1, weightCol="w").setParams(
        scoreIndex=None, weightCol=None).getScoreIndex() is None
    assert Calibrator(nBins=3).setParams(nBins=None).getNBins() == 10


def test_a_stage_directory_loads_as_its_own_class_only(spark, tmp_path):
    """Calibrator.load of a fitted stage (pyspark's DefaultParamsReader made an empty
    CalibratorModel of it) and CalibratorModel.load of an unfitted one: a ModelError
    naming both classes and the loader to use, as Spark's readers refuse another class."""
    from distcal.spark import Calibrator, CalibratorModel

    sdf = spark.createDataFrame(make_scores(2000, seed=13))
    Calibrator(method="sigmoid").fit(sdf).write().save(str(tmp_path / "fitted"))
    Calibrator(method="sigmoid").write().save(str(tmp_path / "unfitted"))
    with pytest.raises(distcal.ModelError, match=r"holds a distcal.spark.ml.CalibratorModel "
                       r"stage, not a distcal.spark.ml.Calibrator \(load it with "
                       r"CalibratorModel.load\)"):
        Calibrator.load(str(tmp_path / "fitted"))
    with pytest.raises(distcal.ModelError, match=r"not a distcal.spark.ml.CalibratorModel "
                       r"\(load it with Calibrator.load\)"):
        CalibratorModel.load(str(tmp_path / "unfitted"))
    assert Calibrator.load(str(tmp_path / "unfitted")).getMethod() == "sigmoid"
    assert CalibratorModel.load(str(tmp_path / "fitted")).model.method == "sigmoid"
    with pytest.raises(distcal.ModelError, match="holds no fitted model"):
        CalibratorModel().transform(sdf)


def test_calibrator_setters_and_getters_as_pyspark_ml_stages_have_them(spark):
    """Every Param has its getter (the value or its default, None when unset) and the
    Calibrator its setter, chained as pyspark.ml's; the fitted model sets what it
    reads to transform (scoreCol, scoreIndex, outputCol)."""
    from distcal.spark import Calibrator

    cal = Calibrator()
    for param in cal.params:
        cap = param.name[0].upper() + param.name[1:]
        assert callable(getattr(cal, "get" + cap)) and callable(getattr(cal, "set" + cap))
    assert (cal.getScoreCol(), cal.getLabelCol(), cal.getOutputCol(), cal.getMethod(),
            cal.getIncreasing(), cal.getInterpolation(), cal.getNBins(), cal.getStrategy()
            ) == ("score", "label", "calibrated", "isotonic", "true", "linear", 10, "uniform")
    assert (cal.getScoreIndex(), cal.getWeightCol(), cal.getYMin(), cal.getYMax()) == (None,) * 4
    df = make_scores(3000, seed=12).assign(w=lambda d: 0.5 + d.index % 3)
    df = df.rename(columns={"score": "s", "label": "y"})
    sdf = spark.createDataFrame(df)
    cal = (Calibrator().setScoreCol("s").setLabelCol("y").setWeightCol("w")
           .setMethod("isotonic").setIncreasing("auto").setInterpolation("step")
           .setYMin(0.01).setYMax(0.9))
    assert (cal.getWeightCol(), cal.getIncreasing(), cal.getYMax()) == ("w", "auto", 0.9)
    fitted = cal.fit(sdf)
    assert fitted.model == distcal.fit(df, score_col="s", label_col="y", weight_col="w",
                                       increasing="auto", interpolation="step", y_min=0.01,
                                       y_max=0.9)
    hist = Calibrator(scoreCol="s", labelCol="y").setMethod("histogram").setNBins(4) \
        .setStrategy("quantile").fit(sdf)
    assert hist.model == distcal.fit(df, score_col="s", label_col="y", method="histogram",
                                     n_bins=4, strategy="quantile")
    out = fitted.setOutputCol("p").transform(sdf)
    assert out.columns == ["s", "y", "w", "p"] and fitted.getOutputCol() == "p"
    vec = spark.createDataFrame(df.assign(v=[[1 - x, x] for x in df.s])[["v"]])
    got = fitted.setScoreCol("v").setScoreIndex(1).transform(vec).toPandas().p
    np.testing.assert_array_equal(got, fitted.model.predict(df.s))


def test_a_spark_frame_is_refused_by_the_local_engine(spark):
    df = make_scores(5000, seed=18)
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


def test_calibrator_directory_appears_whole_and_replaces_only_its_kind(spark, tmp_path,
                                                                          monkeypatch):
    """The stage's directory is published in one step: never half-written, an old one
    kept when the new one fails, and overwrite() replaces only a calibrator directory."""
    from distcal.spark import Calibrator, CalibratorModel
    from distcal.storage import OutputExistsError, OutputPathError

    df = make_scores(3000, seed=12)
    sdf = spark.createDataFrame(df)
    first = Calibrator().fit(sdf)
    second = Calibrator(method="sigmoid").fit(sdf)
    path = str(tmp_path / "cal")
    first.write().save(path)
    with pytest.raises(OutputExistsError, match=r"exists .use write\(\)\.overwrite\(\)"):
        second.write().save(path)
    assert CalibratorModel.load(path).model == first.model

    def broken(tmp):
        raise RuntimeError("disk full")

    monkeypatch.setattr(second.model, "write_dir", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        second.write().overwrite().save(path)
    assert CalibratorModel.load(path).model == first.model  # the old one, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal"]  # nothing left aside
    monkeypatch.undo()
    second.write().overwrite().save(path)
    assert CalibratorModel.load(path).model == second.model
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(OutputPathError, match="not a distcal output"):
        second.write().overwrite().save(str(tmp_path / "mine"))
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
