"""Multiclass calibration and evaluation on Spark (local[2]) against independent oracles.

Oracles: scikit-learn's CalibratedClassifierCV(FrozenEstimator(clf)) and
its log_loss / brier_score_loss / confusion_matrix on datasets shipped
with scikit-learn, a brute-force top-label ECE written in this file, and
the local engine (itself tested against scikit-learn in test_multiclass.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_digits, load_wine
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, confusion_matrix, log_loss
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import distcal
from distcal.errors import DataError

TOL = {"isotonic": 1e-9, "sigmoid": 1e-4, "temperature": 1e-6}


def _split(loader):
    X, y = loader(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(y))
    half = len(y) // 2
    return X[idx[:half]], y[idx[:half]], X[idx[half:]], y[idx[half:]]


def _sklearn(clf, method, X_cal, y_cal, X_eval, w=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FrozenEstimator takes no sample_weight: expected
        cal = CalibratedClassifierCV(FrozenEstimator(clf), method=method)
        cal.fit(X_cal, y_cal, sample_weight=w)
    return cal.predict_proba(X_eval), cal


def _frames(spark, S, y, w=None, vector=False):
    """The same rows as pandas (numpy vectors) and Spark (array<double> or VectorUDT)."""
    pdf = pd.DataFrame({"s": list(np.asarray(S, dtype=np.float64)), "label": y})
    if w is not None:
        pdf["w"] = w
    if vector:
        from pyspark.ml.linalg import Vectors

        rows = [(Vectors.dense(r),) + tuple(x.item() for x in rest)
                for r, *rest in zip(S, y, *([w] if w is not None else []))]
        sdf = spark.createDataFrame(rows, ["s", "label"] + (["w"] if w is not None else []))
    else:
        sdf = spark.createDataFrame(pdf.assign(s=[list(map(float, r)) for r in S]))
    return pdf, sdf


def _collect(sdf, col="p"):
    return np.stack(sdf.toPandas()[col].map(np.asarray).to_numpy())


@pytest.fixture(scope="module")
def wine():
    Xa, ya, Xb, yb = _split(load_wine)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(Xa, ya)
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(yb))
    return clf, Xa, Xb, yb, w


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "histogram"])
def test_one_vs_rest_equals_local_and_sklearn(spark, wine, method):
    clf, Xa, Xb, yb, w = wine
    pdf, sdf = _frames(spark, clf.decision_function(Xb), yb, w)
    kw = {"n_bins": 5, "strategy": "quantile"} if method == "histogram" else {}
    model = distcal.fit(sdf, method=method, score_col="s", weight_col="w", n_ranges=3, **kw)
    local = distcal.fit(pdf, method=method, score_col="s", weight_col="w", **kw)
    assert model == local
    assert model.n_rows == len(yb) and model.weight_total == pytest.approx(w.sum(), rel=1e-12)
    X_eval = np.vstack([Xa, Xb])
    S_eval = clf.decision_function(X_eval)
    _, sdf_eval = _frames(spark, S_eval, np.zeros(len(S_eval), dtype=np.int64))
    out = model.transform(sdf_eval, score_col="s", output_col="p")
    assert dict(out.dtypes)["p"] == "array<double>"
    got = _collect(out)
    np.testing.assert_allclose(got, local.predict(S_eval), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
    if method != "histogram":  # scikit-learn has no histogram calibration
        expect, _ = _sklearn(clf, method, Xb, yb, X_eval, w)
        np.testing.assert_allclose(got, expect, rtol=0, atol=TOL[method])


def test_temperature_from_vector_udt_equals_local_and_sklearn(spark):
    Xa, ya, Xb, yb = _split(load_digits)  # K = 10
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300, C=0.05)).fit(Xa, ya)
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(yb))
    S = clf.decision_function(Xb)
    pdf, sdf = _frames(spark, S, yb, w, vector=True)
    assert type(sdf.schema["s"].dataType).__name__ == "VectorUDT"
    model = distcal.fit(sdf, method="temperature", score_col="s", weight_col="w")
    local = distcal.fit(pdf, method="temperature", score_col="s", weight_col="w")
    assert model == local  # beta to 1e-9 relative
    assert model.params["beta"] == pytest.approx(local.params["beta"], rel=1e-12)
    expect, cal = _sklearn(clf, "temperature", Xb, yb, Xa, w)
    beta_sk = float(cal.calibrated_classifiers_[0].calibrators[0].beta_)
    assert model.params["beta"] == pytest.approx(beta_sk, rel=1e-6)
    _, sdf_eval = _frames(spark, clf.decision_function(Xa), ya, vector=True)
    got = _collect(model.transform(sdf_eval, score_col="s", output_col="p"))
    np.testing.assert_allclose(got, expect, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, local.predict(clf.decision_function(Xa)), rtol=0,
                               atol=1e-13)


def test_temperature_on_probability_columns(spark, wine):
    _, Xa, Xb, yb, w = wine
    clf = GaussianNB().fit(Xa, _split(load_wine)[1])
    P = clf.predict_proba(Xb)
    cols = ["p0", "p1", "p2"]
    pdf = pd.DataFrame(P, columns=cols).assign(label=yb, w=w)
    sdf = spark.createDataFrame(pdf)
    model = distcal.fit(sdf, method="temperature", score_cols=cols, weight_col="w")
    assert model.params["input_"] == "probabilities"
    assert model == distcal.fit(pdf, method="temperature", score_cols=cols, weight_col="w")
    X_eval = np.vstack([Xa, Xb])
    expect, _ = _sklearn(clf, "temperature", Xb, yb, X_eval, w)
    eval_sdf = spark.createDataFrame(pd.DataFrame(clf.predict_proba(X_eval), columns=cols))
    got = _collect(model.transform(eval_sdf, score_cols=cols, output_col="p"))
    np.testing.assert_allclose(got, expect, rtol=0, atol=1e-6)


def test_binary_single_column_k2(spark):
    rng = np.random.default_rng(4)
    s = np.round(rng.normal(size=400), 2)
    y = (rng.random(400) < 1 / (1 + np.exp(-2 * s))).astype(np.int64)
    pdf = pd.DataFrame({"s": s, "label": y})
    sdf = spark.createDataFrame(pdf)
    for method in ("isotonic", "temperature"):
        model = distcal.fit(sdf, method=method, score_cols=["s"])
        assert model == distcal.fit(pdf, method=method, score_cols=["s"])
        got = _collect(model.transform(sdf, score_cols=["s"], output_col="p"))
        np.testing.assert_allclose(got, model.predict(s), rtol=0, atol=1e-13)
        if method == "isotonic":
            np.testing.assert_array_equal(got[:, 0], 1.0 - got[:, 1])  # p0 = 1 - p1


def test_bad_rows_same_error_and_drop_as_local(spark):
    rng = np.random.default_rng(5)
    S = [list(r) for r in rng.normal(size=(60, 3))]
    y = list(rng.integers(0, 3, 60).astype(float))
    S[3], S[7] = [0.1, 0.2], None  # ragged, null
    S[9] = [0.1, float("nan"), 0.3]
    y[4], y[5], y[6] = 3.0, 1.5, -1.0  # outside, fraction, outside
    pdf = pd.DataFrame({"s": S, "label": y})
    sdf = spark.createDataFrame(pdf, "s array<double>, label double")
    with pytest.raises(DataError) as local_err:
        distcal.fit(pdf, method="isotonic", score_col="s")
    with pytest.raises(DataError) as spark_err:
        distcal.fit(sdf, method="isotonic", score_col="s")
    assert str(spark_err.value) == str(local_err.value)
    assert "2 rows are outside the class indices 0..2" in str(spark_err.value)
    model = distcal.fit(sdf, method="isotonic", score_col="s", on_invalid="drop")
    assert model.dropped_rows == 6
    assert model == distcal.fit(pdf, method="isotonic", score_col="s", on_invalid="drop")


def _brute_ece(P, y, w, n_bins=10):
    """Top-label ECE by explicit loops over bins (right-closed inner edges)."""
    conf, right = P.max(axis=1), (P.argmax(axis=1) == y).astype(float)
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        lo_ok = conf > edges[b] if b > 0 else np.ones(len(conf), bool)
        hi_ok = conf <= edges[b + 1] if b < n_bins - 1 else np.ones(len(conf), bool)
        m = lo_ok & hi_ok
        total += abs(np.sum(w[m] * right[m]) - np.sum(w[m] * conf[m]))
    return total / w.sum()


def test_evaluate_equals_sklearn_and_local(spark, wine):
    clf, Xa, Xb, yb, w = wine
    P = clf.predict_proba(Xb)
    pdf, sdf = _frames(spark, P, yb, w)
    rep = distcal.evaluate(sdf, prob_col="s", weight_col="w")
    assert rep.log_loss == pytest.approx(log_loss(yb, P, sample_weight=w), rel=1e-12)
    assert rep.brier == pytest.approx(brier_score_loss(yb, P, sample_weight=w), rel=1e-12)
    np.testing.assert_allclose(rep.confusion_matrix,
                               confusion_matrix(yb, P.argmax(axis=1), sample_weight=w),
                               rtol=1e-12)
    assert rep.accuracy == pytest.approx(np.average(P.argmax(axis=1) == yb, weights=w))
    assert rep.ece == pytest.approx(_brute_ece(P, yb, w), rel=1e-12, abs=1e-15)
    per = [_class_ece(P[:, k], yb == k, w) for k in range(3)]
    np.testing.assert_allclose(rep.per_class_ece, per, rtol=1e-12, atol=1e-15)
    assert rep.classwise_ece == pytest.approx(np.mean(per), rel=1e-12)
    local = distcal.evaluate(pdf, prob_col="s", weight_col="w")
    for name in ("log_loss", "brier", "accuracy", "ece", "classwise_ece"):
        assert getattr(rep, name) == pytest.approx(getattr(local, name), rel=1e-12)


def _class_ece(p, hit, w, n_bins=10):
    """ECE of one class's probability against [y = k], by loops over the bins."""
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        m = ((p > edges[b]) | (b == 0)) & ((p <= edges[b + 1]) | (b == n_bins - 1))
        total += abs(np.sum(w[m] * hit[m]) - np.sum(w[m] * p[m]))
    return total / w.sum()


def test_one_shuffle_for_all_classes(spark, wine):
    """One-vs-rest is one keyed pass: the rows of all K classes take one shuffle."""
    from distcal.core.keyed import KeySpec
    from distcal.engines import get_engine

    clf, _, Xb, yb, _ = wine
    _, sdf = _frames(spark, clf.decision_function(Xb), yb)
    spec = KeySpec(score_col="s", multiclass=True)
    with get_engine("spark").open_keyed(sdf, spec, on_invalid="raise") as rows:
        plan = rows.ranged._jdf.queryExecution().executedPlan().toString()
        assert rows.n_classes == 3
    assert plan.count("Exchange") == 1


def _assert_report_json_equals(d, rep, rel=1e-12):
    """A report in report.json equals a multiclass report number by number."""
    for name in ("n_rows", "dropped_rows", "n_classes", "log_loss", "brier", "accuracy", "ece",
                 "classwise_ece", "weight_total"):
        assert d[name] == pytest.approx(getattr(rep, name), rel=rel), name
    np.testing.assert_allclose(d["per_class_ece"], rep.per_class_ece, rtol=rel, atol=1e-15)
    np.testing.assert_allclose(d["confusion_matrix"], rep.confusion_matrix, rtol=rel)
    for got, curve in zip([d["top_label_curve"], *d["class_curves"]],
                          [rep.top_label_curve, *rep.class_curves], strict=True):
        np.testing.assert_allclose(pd.DataFrame(got).to_numpy(), curve.to_numpy(), rtol=rel)


def test_evaluate_many_in_the_job_equals_local(spark, wine, tmp_path):
    """The Spark job's evaluate of two multiclass predictions (a vector column and
    per-class columns; evaluate_many on the test session) writes the report of the
    local engine (tested against scikit-learn and numpy in test_multiclass_evaluation.py)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from distcal.cli.run import run
    from distcal.cli.spark import SparkBackend

    clf, _, Xb, yb, w = wine
    P = clf.predict_proba(Xb)
    Q = np.sqrt(P) / np.sqrt(P).sum(axis=1, keepdims=True)
    path = tmp_path / "probs.parquet"
    pq.write_table(pa.table({"s": pa.array(list(P), type=pa.list_(pa.float64())),
                             "label": yb, "w": w, **{f"q{j}": Q[:, j] for j in range(3)}}),
                   path)
    code = run(["evaluate", "--input", str(path), "--prob-col", "s", "--prob-cols",
                "q0,q1,q2", "--weight-col", "w", "--output", str(tmp_path / "rep")],
               prog="spark_calibrate", entry_point="spark",
               backend_factory=lambda opts: SparkBackend(spark))
    assert code == 0
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["provenance"]["engine"] == "spark" and doc["kind"] == "multiclass"
    local = distcal.evaluate_many(str(path), ["s", ["q0", "q1", "q2"]], weight_col="w")
    assert doc["columns"] == list(local) == ["s", "q0,q1,q2"]
    for name, rep in local.items():
        _assert_report_json_equals(doc["reports"][name], rep)
    assert doc["reports"]["s"]["log_loss"] == pytest.approx(log_loss(yb, P, sample_weight=w),
                                                            rel=1e-12)
