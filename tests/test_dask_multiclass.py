"""Multiclass calibration and evaluation on a real Dask distributed cluster.

Oracles: scikit-learn's CalibratedClassifierCV(FrozenEstimator(clf)) and
its log_loss / brier_score_loss / confusion_matrix on a dataset shipped
with scikit-learn, and the local engine (itself tested against
scikit-learn in test_multiclass.py), over skewed and empty partitions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_wine
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, confusion_matrix, log_loss
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import distcal
from distcal.errors import DataError

TOL = {"isotonic": 1e-9, "sigmoid": 1e-4, "temperature": 1e-6}
LIST = pd.ArrowDtype(pa.list_(pa.float64()))  # Dask turns object columns into strings


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(y))
    a, b = idx[: len(y) // 2], idx[len(y) // 2:]
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(X[a], y[a])
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(b))
    return clf, X[a], X[b], y[b], w


def _frames(S, y, w=None):
    """pandas (numpy vectors) for the local engine; Dask with a list<double> column,
    in skewed partitions with an empty one."""
    import dask.dataframe as dd

    pdf = pd.DataFrame({"s": list(np.asarray(S, dtype=np.float64)), "label": y})
    if w is not None:
        pdf["w"] = w
    arrow = pdf.assign(s=pd.Series([list(r) for r in np.asarray(S, dtype=np.float64)],
                                   dtype=LIST))
    n = len(pdf)
    cuts = [0, 5, 5, n // 2, n]  # sizes 5, 0, ..., ...
    ddf = dd.from_delayed([_part(arrow.iloc[a:b]) for a, b in zip(cuts[:-1], cuts[1:])],
                          meta=arrow.iloc[:0])
    return pdf, ddf


def _part(df):
    from dask import delayed

    return delayed(lambda d: d)(df)


def _sklearn(clf, method, X_cal, y_cal, X_eval, w=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FrozenEstimator takes no sample_weight: expected
        cal = CalibratedClassifierCV(FrozenEstimator(clf), method=method)
        cal.fit(X_cal, y_cal, sample_weight=w)
    return cal.predict_proba(X_eval)


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "histogram", "temperature"])
def test_fit_and_transform_equal_local_and_sklearn(client, wine, method):
    clf, Xa, Xb, yb, w = wine
    pdf, ddf = _frames(clf.decision_function(Xb), yb, w)
    kw = {"n_bins": 5, "strategy": "quantile"} if method == "histogram" else {}
    model = distcal.fit(ddf, method=method, score_col="s", weight_col="w", n_ranges=3, **kw)
    local = distcal.fit(pdf, method=method, score_col="s", weight_col="w", **kw)
    assert model == local
    X_eval = np.vstack([Xa, Xb])
    S_eval = clf.decision_function(X_eval)
    _, ddf_eval = _frames(S_eval, np.zeros(len(S_eval), dtype=np.int64))
    got = np.stack(model.transform(ddf_eval, score_col="s", output_col="p").compute()["p"]
                   .to_numpy())
    np.testing.assert_allclose(got, local.predict(S_eval), rtol=0, atol=1e-13)
    if method != "histogram":  # scikit-learn has no histogram calibration
        np.testing.assert_allclose(got, _sklearn(clf, method, Xb, yb, X_eval, w), rtol=0,
                                   atol=TOL[method])


def test_score_columns_and_bad_rows(client):
    import dask.dataframe as dd

    rng = np.random.default_rng(2)
    pdf = pd.DataFrame(rng.normal(size=(90, 4)), columns=["a", "b", "c", "d"])
    pdf["label"] = rng.integers(0, 4, 90)
    cols = ["a", "b", "c", "d"]
    model = distcal.fit(dd.from_pandas(pdf, npartitions=3), method="isotonic", score_cols=cols)
    assert model == distcal.fit(pdf, method="isotonic", score_cols=cols)
    bad = pdf.assign(label=pdf["label"].astype(float))
    bad.loc[[3, 40], "label"] = [4.0, 0.5]
    bad.loc[70, "b"] = np.nan
    with pytest.raises(DataError) as local_err:
        distcal.fit(bad, method="temperature", score_cols=cols)
    with pytest.raises(DataError) as dask_err:
        distcal.fit(dd.from_pandas(bad, npartitions=3), method="temperature", score_cols=cols)
    assert str(dask_err.value) == str(local_err.value)
    dropped = distcal.fit(dd.from_pandas(bad, npartitions=3), method="temperature",
                          score_cols=cols, on_invalid="drop")
    assert dropped.dropped_rows == 3
    assert dropped == distcal.fit(bad, method="temperature", score_cols=cols,
                                  on_invalid="drop")


def test_evaluate_equals_sklearn_and_local(client, wine):
    clf, _, Xb, yb, w = wine
    P = clf.predict_proba(Xb)
    pdf, ddf = _frames(P, yb, w)
    rep = distcal.evaluate(ddf, prob_col="s", weight_col="w")
    assert rep.log_loss == pytest.approx(log_loss(yb, P, sample_weight=w), rel=1e-12)
    assert rep.brier == pytest.approx(brier_score_loss(yb, P, sample_weight=w), rel=1e-12)
    np.testing.assert_allclose(rep.confusion_matrix,
                               confusion_matrix(yb, P.argmax(axis=1), sample_weight=w),
                               rtol=1e-12)
    local = distcal.evaluate(pdf, prob_col="s", weight_col="w")
    for name in ("log_loss", "brier", "accuracy", "ece", "classwise_ece"):
        assert getattr(rep, name) == pytest.approx(getattr(local, name), rel=1e-12)
    assert rep.n_rows == len(yb)



def test_evaluate_many_in_the_job_equals_local(client, wine, tmp_path):
    """The Dask job's evaluate of two multiclass predictions (a vector column and
    per-class columns; evaluate_many on the test cluster, over files of skewed sizes and
    an empty one) writes the report of the local engine (tested against scikit-learn and
    numpy in test_multiclass_evaluation.py); rows dropped in one prediction only are
    refused on Dask rather than reported over different rows."""
    import json

    import dask.dataframe as dd
    import pyarrow.parquet as pq

    from distcal.cli.dask import DaskBackend
    from distcal.cli.run import run

    clf, _, Xb, yb, w = wine
    P = clf.predict_proba(Xb)
    Q = np.sqrt(P) / np.sqrt(P).sum(axis=1, keepdims=True)
    src = tmp_path / "probs"
    src.mkdir()
    table = pa.table({"s": pa.array(list(P), type=pa.list_(pa.float64())), "label": yb,
                      "w": w, **{f"q{j}": Q[:, j] for j in range(3)}})
    for i, (a, b) in enumerate([(0, 7), (7, 7), (7, len(yb))]):
        pq.write_table(table.slice(a, b - a), src / f"part{i}.parquet")

    class SharedCluster(DaskBackend):
        def close(self):  # the session's cluster outlives this command
            pass

    code = run(["evaluate", "--input", str(src), "--prob-col", "s", "--prob-cols",
                "q0,q1,q2", "--weight-col", "w", "--output", str(tmp_path / "rep")],
               prog="dask_calibrate", entry_point="dask",
               backend_factory=lambda opts: SharedCluster(client))
    assert code == 0
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["provenance"]["engine"] == "dask" and doc["kind"] == "multiclass"
    local = distcal.evaluate_many(str(src), ["s", ["q0", "q1", "q2"]], weight_col="w")
    assert doc["columns"] == list(local) == ["s", "q0,q1,q2"]
    for name, rep in local.items():
        d = doc["reports"][name]
        for attr in ("n_rows", "log_loss", "brier", "accuracy", "ece", "classwise_ece"):
            assert d[attr] == pytest.approx(getattr(rep, attr), rel=1e-12), attr
        np.testing.assert_allclose(d["confusion_matrix"], rep.confusion_matrix, rtol=1e-12)
        for got, curve in zip([d["top_label_curve"], *d["class_curves"]],
                              [rep.top_label_curve, *rep.class_curves], strict=True):
            np.testing.assert_allclose(pd.DataFrame(got).to_numpy(), curve.to_numpy(),
                                       rtol=1e-12)
    assert doc["reports"]["s"]["log_loss"] == pytest.approx(
        log_loss(yb, P, sample_weight=w), rel=1e-12)

    bad = pd.DataFrame({"s": pd.Series([list(r) for r in P], dtype=LIST), "label": yb,
                        **{f"q{j}": Q[:, j] for j in range(3)}})
    bad.loc[3, "q1"] = np.nan
    # A row invalid in one prediction is left out of both, as locally.
    got = distcal.evaluate_many(dd.from_pandas(bad, npartitions=2), ["s", ["q0", "q1", "q2"]],
                                on_invalid="drop")
    want = distcal.evaluate_many(bad, ["s", ["q0", "q1", "q2"]], on_invalid="drop")
    for name, rep in want.items():
        assert rep.dropped_rows == 1 and got[name].dropped_rows == 1
        assert got[name].n_rows == rep.n_rows
        assert got[name].log_loss == pytest.approx(rep.log_loss, rel=1e-12)
