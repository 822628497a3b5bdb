"""score_index: one element of a vector score column, on the local engine and the CLI.

Oracle: the same fit on the plain extracted column (itself checked against
scikit-learn's IsotonicRegression), for every local input kind.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

import distcal


def vectors(n: int = 3000, k: int = 3, seed: int = 0):
    """Rows of k-vectors whose element 1 is the score, and the plain frame of that score."""
    rng = np.random.default_rng(seed)
    raw = rng.dirichlet(np.ones(k), n).round(3)
    y = (rng.random(n) < raw[:, 1] ** 1.3).astype(np.int64)
    vec = pd.DataFrame({"probability": list(raw), "label": y})
    plain = pd.DataFrame({"probability": raw[:, 1], "label": y})
    return vec, plain


def as_arrow(vec: pd.DataFrame, fixed: bool) -> pa.Table:
    k = len(vec.probability.iloc[0])
    t = pa.list_(pa.float64(), k) if fixed else pa.list_(pa.float64())
    return pa.table({"probability": pa.array([list(v) for v in vec.probability], t),
                     "label": vec.label.to_numpy()})


@pytest.mark.parametrize("kind", ["numpy", "lists", "arrow", "fixed", "parquet"])
def test_fit_on_element_equals_fit_on_column(kind, tmp_path):
    vec, plain = vectors()
    ref = distcal.fit(plain, score_col="probability")
    iso = IsotonicRegression(out_of_bounds="clip").fit(plain.probability, plain.label)
    q = np.linspace(0, 1, 101)
    np.testing.assert_allclose(ref.predict(q), iso.predict(q), atol=1e-12)
    data = {"numpy": vec,
            "lists": vec.assign(probability=[list(v) for v in vec.probability]),
            "arrow": as_arrow(vec, fixed=False), "fixed": as_arrow(vec, fixed=True)}.get(kind)
    if kind == "parquet":
        data = tmp_path / "v.parquet"
        pq.write_table(as_arrow(vec, fixed=False), data, row_group_size=700)  # several batches
    assert distcal.fit(data, score_col="probability", score_index=1) == ref


def test_transform_threshold_evaluate_and_sigmoid():
    vec, plain = vectors(seed=1)
    model = distcal.fit(vec, score_col="probability", score_index=1)
    out = model.transform(vec, score_col="probability", score_index=1)
    np.testing.assert_array_equal(out.calibrated, model.predict(plain.probability))
    assert out.probability.iloc[5] is vec.probability.iloc[5]  # the vectors are kept
    arrow_out = model.transform(as_arrow(vec, True), score_col="probability", score_index=1)
    np.testing.assert_array_equal(arrow_out.column("calibrated").to_numpy(), out.calibrated)
    assert (distcal.optimal_threshold(vec, score_col="probability", score_index=1, cost_fn=4)
            == distcal.optimal_threshold(plain, score_col="probability", cost_fn=4))
    a = distcal.evaluate(vec, prob_col="probability", score_index=1)
    b = distcal.evaluate(plain, prob_col="probability")
    assert (a.brier, a.auc, a.ece) == pytest.approx((b.brier, b.auc, b.ece), rel=1e-12)
    both = distcal.fit_and_threshold(vec, method="sigmoid", score_col="probability",
                                     score_index=1)
    assert both == distcal.fit_and_threshold(plain, method="sigmoid", score_col="probability")


def test_unequal_lengths_and_index_out_of_range(tmp_path):
    vec, _ = vectors(n=50)
    rows = list(vec.probability)
    rows[3], rows[9], rows[11] = np.array([.5, .5]), np.array([1.0]), None
    bad = vec.assign(probability=rows)
    with pytest.raises(distcal.DataError) as err:
        distcal.fit(bad, score_col="probability", score_index=1)
    msg = str(err.value)
    assert "column 'probability' (score): 2 rows have vectors whose length is not 3" in msg
    assert "score_index 1 is out of range for 1 row (vectors of length 1)" in msg
    # counted over every row group of a Parquet input, also when dropping bad rows
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pandas(bad.assign(
        probability=[None if r is None else list(r) for r in rows])), path, row_group_size=10)
    with pytest.raises(distcal.DataError, match="2 rows have vectors whose length is not 3"):
        distcal.fit(path, score_col="probability", score_index=1, on_invalid="drop")
    with pytest.raises(distcal.DataError, match="score_index 3 is out of range for 50 rows"):
        distcal.fit(vec, score_col="probability", score_index=3)
    with pytest.raises(distcal.DataError, match="out of range for 1 row"):
        distcal.fit(bad, score_col="probability", score_index=1).transform(
            bad, score_col="probability", score_index=1)


def test_bad_types_and_values():
    vec, plain = vectors(n=20)
    with pytest.raises(distcal.DataError, match=r"column 'n' \(score\) has type int64; "
                       "expected vectors"):
        distcal.fit(vec.assign(n=vec.label), score_col="n", score_index=0)
    text = pa.table({"v": pa.array([["a", "b"]] * 4), "label": [0, 1, 0, 1]})
    with pytest.raises(distcal.DataError, match=r"column 'v' \(score\) has type list<item: "
                       "string>"):
        distcal.fit(text, score_col="v", score_index=0)
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises(ValueError, match="score_index must be"):
            distcal.fit(vec, score_col="probability", score_index=bad)
    # null vectors and null elements are null scores: counted, or dropped
    t = pa.table({"v": pa.array([[.1, .9], None, [.2, None], [.3, .7]]), "label": [1, 0, 1, 0]})
    with pytest.raises(distcal.DataError, match="column 'v': 2 rows are null or NaN"):
        distcal.fit(t, score_col="v", score_index=1)
    assert distcal.fit(t, score_col="v", score_index=1, on_invalid="drop").dropped_rows == 2


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(0, 1)),
                min_size=1, max_size=40), st.integers(0, 1))
def test_property_element_is_the_column(rows, index):
    pairs = np.array([(a, b) for a, b, _ in rows])
    y = [c for _, _, c in rows]
    vec = pd.DataFrame({"s": list(pairs), "label": y})
    plain = pd.DataFrame({"s": pairs[:, index], "label": y})
    assert (distcal.fit(vec, score_col="s", score_index=index, interpolation="step")
            == distcal.fit(plain, score_col="s", interpolation="step"))


def test_cli_score_index(tmp_path):
    vec, plain = vectors(n=400, seed=3)
    src = tmp_path / "v.parquet"
    pq.write_table(as_arrow(vec, fixed=False), src)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "distcal", *map(str, args)],
                              capture_output=True, text=True)

    r = cli("fit", "--input", src, "--output", tmp_path / "m", "--score-col", "probability",
            "--score-index", "1")
    assert r.returncode == 0, r.stderr
    assert distcal.load(tmp_path / "m") == distcal.fit(plain, score_col="probability")
    r = cli("apply", "--model", tmp_path / "m", "--input", src, "--output", tmp_path / "o.pq",
            "--score-col", "probability", "--score-index", "1")
    assert r.returncode == 0, r.stderr
    out = pd.read_parquet(tmp_path / "o.pq")
    np.testing.assert_array_equal(out.calibrated, distcal.load(tmp_path / "m").predict(
        plain.probability))
    r = cli("threshold", "--input", src, "--score-col", "probability", "--score-index", "1")
    assert json.loads(r.stdout)["threshold"] == distcal.optimal_threshold(
        plain, score_col="probability").threshold
    r = cli("fit", "--input", src, "--output", tmp_path / "m2", "--score-col", "probability",
            "--score-index", "5")
    assert r.returncode == 2
    assert "score_index 5 is out of range for 400 rows" in r.stderr
    assert not (tmp_path / "m2").exists()
    assert "--score-index" in cli("fit", "--help").stdout


# -- every engine ---------------------------------------------------------------------

def test_vectors_equal_the_plain_column(engine, tmp_path):
    vec, plain = vectors(n=4000, seed=4)
    ref = distcal.fit(plain, score_col="probability")
    assert distcal.fit(engine(vec, skewed=True), score_col="probability", score_index=1,
                       **engine.opts) == ref
    path = tmp_path / "v"
    path.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(vec)), 3)):
        pq.write_table(as_arrow(vec.iloc[part], fixed=False), path / f"part-{i}.parquet")
    from_parquet = engine.read_parquet(path)
    assert distcal.fit(from_parquet, score_col="probability", score_index=1) == ref
    assert (distcal.optimal_threshold(engine(vec), score_col="probability", score_index=1,
                                      cost_fn=3)
            == distcal.optimal_threshold(plain, score_col="probability", cost_fn=3))
    out = engine.collect(ref.transform(engine.frame(vec), score_col="probability",
                                       score_index=1))
    np.testing.assert_allclose(out.calibrated.to_numpy(), ref.predict(plain.probability),
                               rtol=1e-12)


def test_bad_vectors_same_errors_as_local(engine):
    vec, _ = vectors(n=60, seed=5)
    rows = list(vec.probability)
    rows[2], rows[40], rows[7] = np.array([.5]), np.array([.1, .2, .3, .4]), None
    bad = vec.assign(probability=rows)
    schema = "probability array<double>, label long"
    for index in (1, 2, 4):
        with pytest.raises(distcal.DataError) as local:
            distcal.fit(bad, score_col="probability", score_index=index)
        with pytest.raises(distcal.DataError) as other:
            distcal.fit(engine(bad, schema=schema), score_col="probability", score_index=index)
        assert str(other.value) == str(local.value)
        assert "column 'probability' (score)" in str(local.value)
    assert "2 rows have vectors whose length is not 3" in str(local.value)
    ints = bad.assign(n=bad.label)
    with pytest.raises(distcal.DataError, match=r"column 'n' \(score\) has type int"):
        distcal.fit(engine(ints, schema=f"{schema}, n int"), score_col="n", score_index=0)


def test_boolean_vectors_are_0_and_1(engine, tmp_path):
    """Vectors of booleans are scores 0 and 1 on every engine, as a boolean score column is:
    a vector score (multiclass) and one element of it (score_index, Spark's in the JVM)."""
    rng = np.random.default_rng(6)
    hits = rng.random((600, 3)) < [0.3, 0.5, 0.6]
    y = rng.integers(0, 3, 600)
    b = (rng.random(600) < 0.2 + 0.5 * hits[:, 1]).astype(np.int64)
    path = tmp_path / "bool.parquet"
    pq.write_table(pa.table({"v": pa.array(hits.tolist(), pa.list_(pa.bool_())), "y": y,
                             "b": b}), path, row_group_size=250)
    plain = pd.DataFrame({"v": list(hits.astype(np.float64)), "y": y, "b": b})
    data = engine.read_parquet(path)
    assert (distcal.fit(data, score_col="v", label_col="y", method="isotonic")
            == distcal.fit(plain, score_col="v", label_col="y", method="isotonic"))
    model = distcal.fit(data, score_col="v", label_col="b", score_index=1)
    assert model == distcal.fit(plain, score_col="v", label_col="b", score_index=1)
    out = engine.collect(model.transform(data, score_col="v", score_index=1))
    element = np.array([v[1] for v in out.v], dtype=np.float64)
    np.testing.assert_allclose(out.calibrated.to_numpy(), model.predict(element), rtol=1e-12)


# -- Spark only: pyspark.ml's VectorUDT and the Calibrator stage ------------------------

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


def test_spark_vector_udt_equals_the_plain_column(spark, predictions):
    from pyspark.sql import functions as F

    pred, plain = predictions
    ref = distcal.fit(plain, score_col="probability")
    assert distcal.fit(pred, score_col="probability", score_index=1) == ref
    got = distcal.optimal_threshold(pred, score_col="probability", score_index=1, cost_fn=3)
    assert got == distcal.optimal_threshold(plain, score_col="probability", cost_fn=3)
    # transform in the JVM keeps the vector column
    out = ref.transform(pred, score_col="probability", score_index=1)
    assert out.schema["probability"].dataType == pred.schema["probability"].dataType
    got = out.select(F.col("calibrated")).toPandas().calibrated.to_numpy()
    np.testing.assert_allclose(got, ref.predict(plain.probability), rtol=1e-12)


def test_spark_calibrator_stage_score_index(spark, predictions, tmp_path):
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
    # Without scoreIndex the vectors are refused at the fit (they fitted a multiclass
    # model that the stage could neither transform nor load back)
    with pytest.raises(distcal.DataError, match="column 'probability' \\(score\\) holds "
                       "vectors: set scoreIndex"):
        Pipeline(stages=[Calibrator(scoreCol="probability")]).fit(pred)


def test_spark_calibrator_stage_transforms_a_stream(spark, predictions, tmp_path):
    # A fitted stage is lazy as MLlib's are: transform() of a streaming DataFrame (a
    # vector element's score included) runs no job, and the stream's rows get
    # model.predict's values; a vector too short for scoreIndex fails its query.
    from pyspark.ml.functions import vector_to_array

    from distcal.spark import Calibrator

    pred, plain = predictions
    stage = Calibrator(scoreCol="probability", scoreIndex=1, outputCol="cal").fit(pred)
    src = tmp_path / "in"
    pred.select(vector_to_array("probability").alias("probability"), "label") \
        .write.parquet(str(src))
    short = tmp_path / "short"
    spark.createDataFrame([([0.5],)], "probability array<double>").write.parquet(str(short))
    schema = spark.read.parquet(str(src)).schema
    got = []
    query = (stage.transform(spark.readStream.schema(schema).parquet(str(src)))
             .writeStream.foreachBatch(lambda batch, _: got.append(batch.toPandas()))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    out = pd.concat(got)
    want = stage.model.predict(np.array([v[1] for v in out.probability]))
    np.testing.assert_allclose(out.cal.to_numpy(), want, rtol=1e-12)
    assert len(out) == len(plain)
    failing = (stage.transform(spark.readStream.schema(schema).parquet(str(short)))
               .writeStream.format("noop").trigger(availableNow=True).start())
    with pytest.raises(Exception, match="score_index 1 is out of range"):
        failing.awaitTermination()


def test_vectors_where_one_number_per_row_is_read_are_named_as_every_engine_names_them(
        tmp_path):
    """A pandas column of vectors read as a binary score: its type, as a Parquet file's
    (list<...>) and Spark's (array<double>) are named, not "pass it as score_col" (it
    was the score_col)."""
    df = pd.DataFrame({"score": [np.array([0.2, 0.8])] * 10, "label": [0, 1] * 5})
    with pytest.raises(distcal.DataError, match=r"column 'score' \(score\) has type vectors "
                       r"\(lists or arrays\); expected numbers"):
        distcal.optimal_threshold(df)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "v.parquet")
    with pytest.raises(distcal.DataError, match=r"column 'score' \(score\) has type "
                       r"list<.*>; expected numbers"):
        distcal.optimal_threshold(str(tmp_path / "v.parquet"))
