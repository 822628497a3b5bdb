"""score_index on Spark: pyspark.ml VectorUDT and ArrayType columns, equal to the plain column."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import distcal


@pytest.fixture(scope="module")
def predictions(spark):
    """A LogisticRegression's output (a VectorUDT ``probability``) and its element 1."""
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import VectorAssembler

    rng = np.random.default_rng(7)
    x = rng.normal(size=(3000, 2))
    y = (rng.random(3000) < 1 / (1 + np.exp(-(2 * x[:, 0] + x[:, 1])))).astype(int)
    sdf = spark.createDataFrame(pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "label": y}))
    feats = VectorAssembler(inputCols=["a", "b"], outputCol="features").transform(sdf)
    pred = LogisticRegression().fit(feats).transform(feats).select("probability", "label")
    pdf = pred.toPandas()
    plain = pd.DataFrame({"probability": [v[1] for v in pdf.probability], "label": pdf.label})
    return pred.cache(), plain


def test_vector_and_array_columns_equal_local(spark, predictions):
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    pred, plain = predictions
    ref = distcal.fit(plain, score_col="probability")
    assert distcal.fit(pred, score_col="probability", score_index=1) == ref
    arrays = pred.select(vector_to_array("probability").alias("probability"), "label")
    assert distcal.fit(arrays, score_col="probability", score_index=1) == ref
    got = distcal.optimal_threshold(pred, score_col="probability", score_index=1, cost_fn=3)
    assert got == distcal.optimal_threshold(plain, score_col="probability", cost_fn=3)
    # transform in the JVM keeps the vector column
    out = ref.transform(pred, score_col="probability", score_index=1)
    assert out.schema["probability"].dataType == pred.schema["probability"].dataType
    got = out.select(F.col("calibrated")).toPandas().calibrated.to_numpy()
    np.testing.assert_allclose(got, ref.predict(plain.probability), rtol=1e-12)


def test_calibrator_stage_score_index(spark, predictions, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel

    from distcal.spark import Calibrator

    pred, plain = predictions
    fitted = Pipeline(stages=[Calibrator(scoreCol="probability", scoreIndex=1,
                                         outputCol="cal")]).fit(pred)
    assert fitted.stages[0].model == distcal.fit(plain, score_col="probability")
    fitted.write().overwrite().save(str(tmp_path / "pipe"))
    loaded = PipelineModel.load(str(tmp_path / "pipe"))
    assert loaded.stages[0].getScoreIndex() == 1
    got = loaded.transform(pred).select("cal").toPandas().cal.to_numpy()
    np.testing.assert_allclose(got, fitted.stages[0].model.predict(plain.probability),
                               rtol=1e-12)


def test_bad_vectors_same_errors_as_local(spark):
    rows = [([.1, .9], 1), ([.2], 0), (None, 1), ([.3, .6, .1], 0), ([.4, .6], 1)]
    sdf = spark.createDataFrame(rows, "v array<double>, label int")
    local = pd.DataFrame({"v": [None if r is None else np.array(r) for r, _ in rows],
                          "label": [y for _, y in rows]})
    for index in (1, 4):
        with pytest.raises(distcal.DataError) as a:
            distcal.fit(sdf, score_col="v", score_index=index)
        with pytest.raises(distcal.DataError) as b:
            distcal.fit(local, score_col="v", score_index=index)
        assert str(a.value) == str(b.value)
        assert "column 'v' (score)" in str(a.value)
    with pytest.raises(distcal.DataError, match=r"column 'n' \(score\) has type int"):
        distcal.fit(sdf.withColumn("n", sdf["label"]), score_col="n", score_index=0)


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
    from conftest import make_scores

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
