"""Multiclass calibration (one-vs-rest and temperature scaling) against independent oracles.

Oracles: scikit-learn's CalibratedClassifierCV(FrozenEstimator(clf)) on
datasets shipped with scikit-learn, and a weighted multinomial log loss
minimised by scipy in this file.
"""

from __future__ import annotations

import doctest
import json
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.optimize import brentq, minimize_scalar
from scipy.special import logsumexp, softmax
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import distcal
from distcal import MulticlassCalibrationModel
from distcal import fit as fit_multiclass
from distcal.errors import DataError, ModelError

TOL = {"isotonic": 1e-9, "sigmoid": 1e-4, "temperature": 1e-6}
LOADERS = {"iris": load_iris, "wine": load_wine, "digits": load_digits}


def _split(name):
    X, y = LOADERS[name](return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    half = len(y) // 2
    return X[idx[:half]], y[idx[:half]], X[idx[half:]], y[idx[half:]]


def _sklearn_proba(clf, method, X_cal, y_cal, X_eval, w=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FrozenEstimator takes no sample_weight: expected
        cal = CalibratedClassifierCV(FrozenEstimator(clf), method=method)
        cal.fit(X_cal, y_cal, sample_weight=w)
    return cal.predict_proba(X_eval), cal


def _frame(S, y, w=None):
    cols = [f"s{k}" for k in range(S.shape[1])]
    df = pd.DataFrame(S, columns=cols)
    df["label"] = y
    if w is not None:
        df["w"] = w
    return df, cols


def _min_gap(S):
    """Smallest gap between distinct values of any column (isotonic near-ties)."""
    gaps = [np.diff(np.unique(c)).min() for c in np.asarray(S).T if len(np.unique(c)) > 1]
    return min(gaps)


@pytest.fixture(scope="module", params=list(LOADERS))
def fitted(request):
    Xa, ya, Xb, yb = _split(request.param)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(Xa, ya)
    return request.param, clf, Xa, Xb, yb


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "temperature"])
@pytest.mark.parametrize("weighted", [False, True])
def test_decision_function_matches_sklearn(fitted, method, weighted):
    name, clf, Xa, Xb, yb = fitted
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(yb)) if weighted else None
    S = clf.decision_function(Xb)
    if method == "isotonic":
        assert _min_gap(S) > 1e-12
    df, cols = _frame(S, yb, w)
    model = fit_multiclass(df, method=method, score_cols=cols,
                           weight_col="w" if weighted else None)
    X_eval = np.vstack([Xa, Xb])
    expect, cal = _sklearn_proba(clf, method, Xb, yb, X_eval, w)
    got = model.predict(clf.decision_function(X_eval))
    np.testing.assert_allclose(got, expect, rtol=0, atol=TOL[method])
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
    assert model.classes == list(range(len(np.unique(yb))))
    assert model.n_rows == len(yb)
    if method == "temperature":
        beta_sk = float(cal.calibrated_classifiers_[0].calibrators[0].beta_)
        assert model.params["beta"] == pytest.approx(beta_sk, rel=1e-6)
        assert model.params["temperature"] == pytest.approx(1 / model.params["beta"], rel=1e-15)
        assert model.params["input_"] == "logits"


@pytest.mark.parametrize("name", ["iris", "wine", "digits"])
@pytest.mark.parametrize("method", ["sigmoid", "temperature"])
def test_predict_proba_inputs_match_sklearn(name, method):
    # GaussianNB has no decision_function: scikit-learn calibrates predict_proba,
    # and temperature scaling takes log(p + 1e-12) of it.
    Xa, ya, Xb, yb = _split(name)
    clf = GaussianNB().fit(Xa, ya)
    w = np.random.default_rng(2).uniform(0.5, 2.0, len(yb))
    df, cols = _frame(clf.predict_proba(Xb), yb, w)
    model = fit_multiclass(df, method=method, score_cols=cols, weight_col="w")
    X_eval = np.vstack([Xa, Xb])
    expect, _ = _sklearn_proba(clf, method, Xb, yb, X_eval, w)
    np.testing.assert_allclose(model.predict(clf.predict_proba(X_eval)), expect, rtol=0,
                               atol=TOL[method])
    if method == "temperature":
        assert model.params["input_"] == "probabilities"


def test_isotonic_on_probabilities_matches_sklearn():
    Xa, ya, Xb, yb = _split("iris")
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(Xa, ya)

    class ProbaOnly(FrozenEstimator):  # hides decision_function: predict_proba is used
        def __getattr__(self, name):
            if name == "decision_function":
                raise AttributeError(name)
            return super().__getattr__(name)

    P = clf.predict_proba(Xb)
    assert _min_gap(P) > 1e-12
    df, cols = _frame(P, yb)
    model = fit_multiclass(df, method="isotonic", score_cols=cols)
    cal = CalibratedClassifierCV(ProbaOnly(clf), method="isotonic").fit(Xb, yb)
    X_eval = np.vstack([Xa, Xb])
    np.testing.assert_allclose(model.predict(clf.predict_proba(X_eval)),
                               cal.predict_proba(X_eval), rtol=0, atol=1e-9)


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "temperature"])
@pytest.mark.parametrize("form", ["one_col", "vector1", "proba2"])
def test_binary_matches_sklearn(method, form):
    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(3)
    idx = rng.permutation(len(y))
    a, b = idx[:280], idx[280:]
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(X[a], y[a])
    w = rng.uniform(0.5, 2.0, len(b))
    if form == "proba2":
        # predict_proba only: scikit-learn calibrates P(class 1) (OvR) or the pair
        # (1 - p, p) as probabilities (temperature).
        class ProbaOnly(FrozenEstimator):
            def __getattr__(self, name):
                if name == "decision_function":
                    raise AttributeError(name)
                return super().__getattr__(name)

        p1 = clf.predict_proba(X[b])[:, 1]
        df = pd.DataFrame({"s0": 1 - p1, "s1": p1, "label": y[b], "w": w})
        model = fit_multiclass(df, method=method, score_cols=["s0", "s1"], weight_col="w")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal = CalibratedClassifierCV(ProbaOnly(clf), method=method).fit(X[b], y[b],
                                                                           sample_weight=w)
        q = clf.predict_proba(X)[:, 1]
        got = model.predict(np.column_stack([1 - q, q]))
    else:
        s = clf.decision_function(X[b])
        if form == "one_col":
            df = pd.DataFrame({"s": s, "label": y[b], "w": w})
            model = fit_multiclass(df, method=method, score_cols=["s"], weight_col="w")
        else:
            df = pd.DataFrame({"s": [np.array([v]) for v in s], "label": y[b], "w": w})
            model = fit_multiclass(df, method=method, score_col="s", weight_col="w")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cal = CalibratedClassifierCV(FrozenEstimator(clf), method=method).fit(
                X[b], y[b], sample_weight=w)
        got = model.predict(clf.decision_function(X))
    np.testing.assert_allclose(got, cal.predict_proba(X), rtol=0, atol=TOL[method])
    assert model.classes == [0, 1]
    if method != "temperature":
        np.testing.assert_array_equal(got[:, 0], 1.0 - got[:, 1])
        with pytest.raises(ValueError, match="only class 1"):
            model.class_model(0)
        assert model.class_model(1).method == method


# -- temperature: the optimum against scipy --------------------------------------

def _test_loss(beta, z, y, w):
    a = beta * z
    return float(np.sum(w * (logsumexp(a, axis=1) - a[np.arange(len(y)), y])))


def _test_grad(beta, z, y, w):
    p = softmax(beta * z, axis=1)
    return float(np.sum(w * ((p * z).sum(axis=1) - z[np.arange(len(y)), y])))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_temperature_beta_is_the_weighted_log_loss_optimum(seed):
    rng = np.random.default_rng(seed)
    n, k = 3000, 5
    z = rng.normal(0, 2.0, (n, k))
    y = np.array([rng.choice(k, p=softmax(0.4 * row)) for row in z])  # over-confident z
    w = rng.uniform(0.0, 3.0, n)
    df = pd.DataFrame({"z": list(z), "y": y, "w": w})
    model = fit_multiclass(df, method="temperature", score_col="z", label_col="y",
                           weight_col="w")
    beta = model.params["beta"]
    # scipy, loss only (bounded Brent in log beta, as tight as a loss allows) ...
    res = minimize_scalar(lambda lb: _test_loss(np.exp(lb), z, y, w), bounds=(-5, 5),
                          method="bounded", options={"xatol": 1e-14})
    assert beta == pytest.approx(np.exp(res.x), rel=1e-6)
    # ... and the stationary point of the loss, bracketed to full precision.
    ref = brentq(lambda b: _test_grad(b, z, y, w), 1e-3, 1e3, xtol=1e-16, rtol=1e-15)
    assert beta == pytest.approx(ref, rel=1e-9)
    scale = np.sum(w * np.abs(z).max(axis=1))
    assert abs(_test_grad(beta, z, y, w)) <= 1e-12 * scale
    assert _test_loss(beta, z, y, w) <= min(_test_loss(beta * (1 + 1e-6), z, y, w),
                                            _test_loss(beta * (1 - 1e-6), z, y, w))
    np.testing.assert_allclose(model.predict(z), softmax(beta * z, axis=1), atol=1e-14)


def test_temperature_of_one_logit_column(engine):
    """A score column of numbers with method="temperature": one logit s per row, the pair
    (-s, s) as in scikit-learn, so p1 = sigmoid(2 beta s); beta minimises the weighted log
    loss (scipy), and the model is that of score_cols=[score_col]."""
    from scipy.special import expit

    rng = np.random.default_rng(21)
    s = np.round(rng.normal(size=1500), 3)
    y = (rng.random(1500) < expit(0.8 * s)).astype(np.int64)
    w = rng.uniform(0.5, 2.0, 1500)
    df = pd.DataFrame({"score": s, "label": y, "w": w})
    model = distcal.fit(engine(df), method="temperature", weight_col="w")
    assert model == distcal.fit(df, method="temperature", score_cols=["score"], weight_col="w")

    def loss(log_beta):
        p1 = expit(2 * np.exp(log_beta) * s)
        return -np.sum(w * np.where(y == 1, np.log(p1), np.log1p(-p1)))

    res = minimize_scalar(loss, bounds=(-5, 5), method="bounded", options={"xatol": 1e-12})
    assert model.params["beta"] == pytest.approx(np.exp(res.x), rel=1e-6)
    np.testing.assert_allclose(model.predict(s)[:, 1], expit(2 * model.params["beta"] * s),
                               rtol=1e-12)
    # transformed by the column it was fitted on, named or not, or by another column
    want = model.predict(s)
    for kw in ({}, {"score_col": "score"}, {"score_col": "t"}):
        got = engine.collect(model.transform(engine.frame(df.assign(t=s)), **kw))
        np.testing.assert_allclose(np.stack(got["calibrated"]), want, rtol=1e-12)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_temperature_bounds_like_sklearn(sign):
    # Perfectly separated logits: the loss falls as beta grows (or, reversed, as
    # beta shrinks); the optimum within scikit-learn's bounds (log beta in
    # [-10, 10]) is the bound. scikit-learn's bounded search stops anywhere on the
    # flat loss (e.g. beta = 10.6 here), with the same probabilities to rounding.
    from sklearn.calibration import _TemperatureScaling

    z = sign * np.array([[2.0, 0.0, 0.5], [0.0, 2.0, 0.5], [0.5, 0.0, 2.0]] * 5)
    y = np.array([0, 1, 2] * 5)
    df = pd.DataFrame({"z": list(z), "y": y})
    model = fit_multiclass(df, method="temperature", score_col="z", label_col="y")
    assert model.params["beta"] == pytest.approx(np.exp(10.0 * sign), rel=1e-12)
    ref = _TemperatureScaling().fit(z, y)
    np.testing.assert_allclose(model.predict(z), ref.predict(z), atol=1e-6)


def test_temperature_partition_sums_add_up():
    from distcal.core.temperature import temperature_sums

    rng = np.random.default_rng(5)
    z, y, w = rng.normal(size=(1000, 4)), rng.integers(0, 4, 1000), rng.random(1000)
    whole = temperature_sums(z, y, w, 0.7)
    parts = sum(temperature_sums(z[i:i + 137], y[i:i + 137], w[i:i + 137], 0.7)
                for i in range(0, 1000, 137))
    np.testing.assert_allclose(parts, whole, rtol=1e-12)
    assert whole[0] == pytest.approx(_test_loss(0.7, z, y, w), rel=1e-12)
    assert whole[1] == pytest.approx(_test_grad(0.7, z, y, w), rel=1e-10)
    h = 1e-5
    fd = (_test_grad(0.7 + h, z, y, w) - _test_grad(0.7 - h, z, y, w)) / (2 * h)
    assert whole[2] == pytest.approx(fd, rel=1e-6)


# -- input forms -----------------------------------------------------------------

def _data():
    rng = np.random.default_rng(7)
    n, k = 600, 4
    S = rng.normal(size=(n, k))
    y = np.array([rng.choice(k, p=softmax(r)) for r in S])
    w = rng.uniform(0.5, 2, n)
    return S, y, w


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "histogram", "temperature"])
def test_input_forms_agree(tmp_path, method):
    S, y, w = _data()
    cols_df, cols = _frame(S, y, w)
    base = fit_multiclass(cols_df, method=method, score_cols=cols, weight_col="w")
    forms = {
        "numpy": pd.DataFrame({"v": list(S), "label": y, "w": w}),
        "lists": pd.DataFrame({"v": [list(r) for r in S], "label": y, "w": w}),
        "arrow_list": pa.table({"v": pa.array(list(S), type=pa.list_(pa.float64())),
                                "label": y, "w": w}),
        "arrow_fixed": pa.table({"v": pa.array(list(S), type=pa.list_(pa.float64(), 4)),
                                 "label": y, "w": w}),
    }
    pq.write_table(forms["arrow_list"], tmp_path / "d.parquet")
    forms["parquet"] = str(tmp_path / "d.parquet")
    q = np.random.default_rng(8).normal(size=(200, 4))
    for name, data in forms.items():
        m = fit_multiclass(data, method=method, score_col="v", weight_col="w")
        np.testing.assert_allclose(m.predict(q), base.predict(q), rtol=0, atol=1e-15,
                                   err_msg=name)
    # score_cols from a pyarrow table too
    m = fit_multiclass(pa.Table.from_pandas(cols_df), method=method, score_cols=cols,
                       weight_col="w")
    assert m == base


def test_class_models_are_binary_fits():
    S, y, w = _data()
    df, cols = _frame(S, y, w)
    model = fit_multiclass(df, method="isotonic", score_cols=cols, weight_col="w",
                           interpolation="step")
    for k in range(4):
        binary = distcal.fit(pd.DataFrame({"s": S[:, k], "l": (y == k).astype(int), "w": w}),
                             score_col="s", label_col="l", weight_col="w", interpolation="step")
        q = np.linspace(-3, 3, 101)
        np.testing.assert_array_equal(model.class_model(k).predict(q), binary.predict(q))
    assert model.params["interpolation"] == "step"
    text = model.describe()
    assert all(f"class {k}:" in text for k in range(4))
    with pytest.raises(ValueError, match="class must be one of"):
        model.class_model(4)


def test_temperature_has_no_class_models():
    S, y, _ = _data()
    df, cols = _frame(S, y)
    model = fit_multiclass(df, method="temperature", score_cols=cols)
    with pytest.raises(ValueError, match="no per-class models"):
        model.class_model(0)
    assert "beta" in model.describe()
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        fit_multiclass(df, method="temperature", score_cols=cols, n_bins=3)


def test_zero_sum_rows_are_uniform():
    # Isotonic gives 0 for every class at these scores: the row becomes 1/K.
    df = pd.DataFrame({"a": [1.0, 0.0, 0.0], "b": [0.0, 1.0, 0.0],
                       "c": [0.0, 0.0, 1.0], "label": [0, 1, 2]})
    model = fit_multiclass(df, method="isotonic", score_cols=["a", "b", "c"])
    p = model.predict([[-1.0, -1.0, -1.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(p[0], [1 / 3] * 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


# -- bad data ------------------------------------------------------------------

@pytest.mark.parametrize("labels, problem", [
    ([0, 1, 3, 2, 5, 1], "2 rows are outside the class indices 0..2"),
    ([0, 1, 0.5, 2, 1.5, 1], "2 rows are not whole numbers"),
    ([0, 1, np.nan, 2, 1, 1], "1 row is null or NaN"),
    ([0, 1, -1, 2, 1, 1], "1 row is outside the class indices 0..2"),
    (["0", "1", "x", "2", "1", "1"], "6 rows are text, not numbers"),  # "0" is text too
])
def test_bad_labels(labels, problem):
    S = np.random.default_rng(0).normal(size=(6, 3))
    df = pd.DataFrame({"v": list(S), "cls": labels})
    for method in ("isotonic", "temperature"):
        with pytest.raises(DataError) as exc:
            fit_multiclass(df, method=method, score_col="v", label_col="cls")
        assert "column 'cls'" in str(exc.value) and problem in str(exc.value)


def test_ragged_and_null_vectors():
    df = pd.DataFrame({"v": [[0.1, 0.2, 0.7], [0.3, 0.7], [0.2, 0.2, 0.6], None,
                             [0.5, 0.5, 0.0, 0.0], [0.1, np.nan, 0.9]],
                       "label": [0, 1, 2, 0, 1, 2]})
    with pytest.raises(DataError) as exc:
        fit_multiclass(df, score_col="v")
    msg = str(exc.value)
    assert "column 'v': 2 rows have a length other than 3 (ragged vectors)" in msg
    assert "column 'v': 1 row is null" in msg
    assert "column 'v': 1 row contain" in msg or "1 row contains" in msg or "contain NaN" in msg
    m = fit_multiclass(df, score_col="v", on_invalid="drop")
    assert m.dropped_rows == 4 and m.n_rows == 2


def test_arrow_ragged_vectors():
    t = pa.table({"v": pa.array([[0.1, 0.9], [0.5, 0.5], [1.0], [0.2, 0.8]]),
                  "label": [0, 1, 1, 0]})
    with pytest.raises(DataError, match="column 'v': 1 row has a length other than 2"):
        fit_multiclass(t, score_col="v")


def test_k_mismatch():
    S, y, _ = _data()
    df, cols = _frame(S, y)
    # label 3 with only 3 score columns: K mismatch
    with pytest.raises(DataError, match=r"column 'label': \d+ rows are outside the class "
                                        r"indices 0..2"):
        fit_multiclass(df, score_cols=cols[:3])
    model = fit_multiclass(df, score_cols=cols)
    with pytest.raises(DataError, match="3 columns; the model has K = 4"):
        model.predict(S[:, :3])


def test_other_bad_inputs():
    S, y, w = _data()
    df, cols = _frame(S, y, w)
    df.loc[[3, 5], "w"] = -1.0
    df.loc[7, "s1"] = np.inf
    with pytest.raises(DataError) as exc:
        fit_multiclass(df, method="sigmoid", score_cols=cols, weight_col="w")
    assert "column 'w': 2 rows are negative" in str(exc.value)
    assert "column 's1': 1 row is infinite" in str(exc.value)
    fit_multiclass(df.drop(index=[3, 5]), method="isotonic", score_cols=cols, weight_col="w")
    with pytest.raises(DataError, match="column 'nope' .*not found"):
        fit_multiclass(df, score_cols=cols, label_col="nope")
    with pytest.raises(DataError, match="column 'score'"):  # no score column given or found
        fit_multiclass(df)


# -- model: transform, save/load ---------------------------------------------------

def test_transform_pandas_and_arrow(tmp_path):
    S, y, _ = _data()
    df = pd.DataFrame({"v": list(S), "label": y})
    model = fit_multiclass(df, method="sigmoid", score_col="v")
    out = model.transform(df)
    np.testing.assert_array_equal(np.stack(out["calibrated"].to_numpy()), model.predict(S))
    t = model.transform(pa.Table.from_pandas(df), output_col="p")
    assert t.schema.field("p").type == pa.list_(pa.float64())
    np.testing.assert_array_equal(np.array(t.column("p").to_pylist()), model.predict(S))
    cols_df, cols = _frame(S, y)
    out2 = model.transform(cols_df, score_cols=cols)
    np.testing.assert_array_equal(np.stack(out2["calibrated"].to_numpy()), model.predict(S))
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "x.parquet")
    out3 = model.transform(str(tmp_path / "x.parquet"))
    np.testing.assert_array_equal(np.stack(out3["calibrated"].to_numpy()), model.predict(S))


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "histogram", "temperature"])
@pytest.mark.parametrize("k", [2, 4])
def test_save_load_round_trip(tmp_path, method, k):
    S, y, w = _data()
    if k == 2:
        S, y = S[:, :1], (y > 1).astype(int)
    df, cols = _frame(S, y, w)
    model = fit_multiclass(df, method=method, score_cols=cols, weight_col="w")
    model.save(tmp_path / "m")
    back = distcal.load(tmp_path / "m")
    assert isinstance(back, MulticlassCalibrationModel) and back == model
    np.testing.assert_array_equal(back.predict(S), model.predict(S))
    with pytest.raises(FileExistsError):
        model.save(tmp_path / "m")
    model.save(tmp_path / "m", overwrite=True)
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["format"] == "distcal-keyed-model" and meta["n_classes"] == k
    t = pq.read_table(tmp_path / "m" / "maps.parquet")
    assert set(t.column("class").to_pylist()) == (
        {None} if method == "temperature" else {1} if k == 2 else set(range(k)))


def test_damaged_models(tmp_path):
    S, y, _ = _data()
    df, cols = _frame(S, y)
    model = fit_multiclass(df, method="isotonic", score_cols=cols)
    model.save(tmp_path / "m")
    root = tmp_path / "m"
    meta = json.loads((root / "model.json").read_text())

    def write(m):
        (root / "model.json").write_text(json.dumps(m))

    m2 = dict(meta, n_classes=5)
    write(m2)  # edited without fixing the checksum
    with pytest.raises(ModelError, match="checksum"):
        distcal.load(root)
    from distcal.model_format import _json_checksum

    m3 = dict(meta, n_classes=5)
    m3["checksum"] = _json_checksum(m3)
    write(m3)  # consistent checksum, inconsistent content
    with pytest.raises(ModelError, match="damaged"):
        distcal.load(root)
    write(meta)
    assert distcal.load(root) == model
    data = bytearray((root / "blocks.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (root / "blocks.parquet").write_bytes(bytes(data))
    with pytest.raises(ModelError, match="damaged"):
        distcal.load(root)
    (root / "blocks.parquet").unlink()
    with pytest.raises(ModelError, match="missing"):
        distcal.load(root)
    (root / "model.json").write_text("{not json")
    with pytest.raises(ModelError):
        distcal.load(root)
    with pytest.raises(ModelError, match="does not exist"):
        distcal.load(tmp_path / "nothing")
    # a binary model directory is read as the binary model it is, not as a multiclass one
    distcal.fit(pd.DataFrame({"score": [0.1, 0.9], "label": [0, 1]})).save(tmp_path / "b")
    assert type(distcal.load(tmp_path / "b")) is distcal.CalibrationModel


def test_equality():
    S, y, w = _data()
    df, cols = _frame(S, y, w)
    a = fit_multiclass(df, method="sigmoid", score_cols=cols, weight_col="w")
    b = fit_multiclass(df.iloc[::-1], method="sigmoid", score_cols=cols, weight_col="w")
    assert a == b
    c = fit_multiclass(df, method="sigmoid", score_cols=cols)
    assert a != c


def test_docstring_examples_run():
    import distcal.core.multiclass as cm
    import distcal.core.temperature as ct
    import distcal.keyed_model as mc
    import distcal.sklearn as sk

    for mod in (cm, ct, mc, sk):
        result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0 and result.attempted > 0, mod.__name__


# -- every engine: the local engine's model and scikit-learn's ---------------------------

@pytest.fixture(scope="module")
def wine():
    Xa, ya, Xb, yb = _split("wine")
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(Xa, ya)
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(yb))
    return clf, Xa, Xb, yb, w


def _vectors(S):
    return list(np.asarray(S, dtype=np.float64))


def _stack(column):
    return np.stack(column.map(np.asarray).to_numpy())


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "histogram", "temperature"])
def test_fit_and_transform_equal_local_and_sklearn(engine, wine, method):
    """A vector column over several ranges (Dask: skewed partitions, one empty)."""
    clf, Xa, Xb, yb, w = wine
    df = pd.DataFrame({"s": _vectors(clf.decision_function(Xb)), "label": yb, "w": w})
    kw = {"n_bins": 5, "strategy": "quantile"} if method == "histogram" else {}
    model = distcal.fit(engine(df, skewed=True), method=method, score_col="s", weight_col="w",
                        **engine.opts, **kw)
    local = distcal.fit(df, method=method, score_col="s", weight_col="w", **kw)
    assert model == local
    assert model.n_rows == len(yb) and model.weight_total == pytest.approx(w.sum(), rel=1e-12)
    X_eval = np.vstack([Xa, Xb])
    S_eval = clf.decision_function(X_eval)
    out = model.transform(engine.frame(pd.DataFrame({"s": _vectors(S_eval)})), score_col="s",
                          output_col="p")
    # The contract's array column: Spark's array<double>; in pandas and Dask a column of
    # arrays that Arrow (Parquet) takes as list<double>. (Not pandas' ArrowDtype list:
    # pandas 2 cannot read that back from the Parquet files it writes.)
    if engine.name == "spark":
        assert out.schema["p"].dataType.simpleString() == "array<double>"
    else:
        assert pa.Table.from_pandas(engine.collect(out)).schema.field("p").type \
            == pa.list_(pa.float64())
    got = _stack(engine.collect(out)["p"])
    np.testing.assert_allclose(got, local.predict(S_eval), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
    if method != "histogram":  # scikit-learn has no histogram calibration
        expect, _ = _sklearn_proba(clf, method, Xb, yb, X_eval, w)
        np.testing.assert_allclose(got, expect, rtol=0, atol=TOL[method])


def test_temperature_predicts_each_row_alone(engine, wine):
    """Temperature scaling reads the scores as the fit read them (its ``input_``): a row's
    probabilities are softmax(beta log(p + 1e-12)) of that row, whatever other rows share
    its batch or partition (a NaN row, a row of logits, seven partitions), with and
    without segments; NaN in gives NaN out for that row only."""
    clf, Xa, Xb, yb, _ = wine
    P = clf.predict_proba(Xb)
    df = pd.DataFrame({"s": _vectors(P), "label": yb, "g": np.where(np.arange(len(yb)) % 3,
                                                                   "a", "b")})
    for by in (None, "g"):
        model = distcal.fit(engine(df), method="temperature", score_col="s", by=by,
                            **engine.opts)
        assert model.params["input_"] == "probabilities"
        beta = {g: model.segment(g).params["beta"] for g in "ab"} if by else \
            {g: model.params["beta"] for g in "ab"}
        odd = P.copy()
        odd[0] = np.nan
        odd[1] = [3.0, -1.0, 0.5]  # logits among probabilities: log of a negative, NaN
        test = pd.DataFrame({"s": _vectors(odd), "g": df.g, "i": np.arange(len(df))})
        out = model.transform(engine.frame(test, npartitions=7), score_col="s",
                              output_col="p")
        got = _stack(engine.collect(out).sort_values("i")["p"])
        z = np.log(odd + 1e-12)
        want = np.vstack([softmax(beta[g] * z[i][None, :])[0] for i, g in enumerate(df.g)])
        assert np.isnan(got[:2]).all() and np.isnan(want[:2]).all()
        np.testing.assert_allclose(got[2:], want[2:], rtol=0, atol=1e-12)
        alone = model.predict(odd[2:3], segments=["a"] if by else None)
        np.testing.assert_array_equal(alone, got[2:3])


@pytest.mark.parametrize("method", ["isotonic", "temperature"])
def test_a_part_of_null_vectors_only_gives_nan_rows(engine, wine, method, tmp_path):
    """A null score vector is a NaN row wherever it lies: also in a partition, batch or
    row group that holds no other vector (K = 3, so its width is not guessed)."""
    clf, _, Xb, yb, _ = wine
    S = clf.decision_function(Xb)
    model = distcal.fit(pd.DataFrame({"s": _vectors(S), "label": yb}), method=method,
                        score_col="s")
    col = [list(S[0]), list(S[1]), None, None]
    test = pd.DataFrame({"s": pd.Series(col, dtype=object), "i": range(4)})
    got = engine.collect(model.transform(engine.frame(test, npartitions=2), score_col="s",
                                         output_col="p")).sort_values("i")
    p = _stack(got["p"])
    np.testing.assert_array_equal(p[:2], model.predict(S[:2]))
    assert np.isnan(p[2:]).all()
    if engine.name == "local":  # a Parquet file of row groups of two rows: the same
        from distcal.apply import apply_to_parquet

        pq.write_table(pa.Table.from_pandas(test, preserve_index=False), tmp_path / "in.parquet",
                       row_group_size=2)
        apply_to_parquet(model, str(tmp_path / "in.parquet"), str(tmp_path / "out.parquet"),
                         score_col="s", output_col="p", batch_rows=2)
        out = pd.read_parquet(tmp_path / "out.parquet")
        np.testing.assert_array_equal(_stack(out["p"]), p)


def test_bad_rows_same_error_and_drop_as_local(engine):
    rng = np.random.default_rng(5)
    # per-class columns: a label outside the classes, a fraction, a NaN score
    cols = ["a", "b", "c", "d"]
    df = pd.DataFrame(rng.normal(size=(90, 4)), columns=cols)
    df["label"] = rng.integers(0, 4, 90).astype(float)
    df.loc[[3, 40], "label"] = [4.0, 0.5]
    df.loc[70, "b"] = np.nan
    # a vector column: ragged, null and NaN vectors; labels outside, fractional
    S = [list(r) for r in rng.normal(size=(60, 3))]
    y = list(rng.integers(0, 3, 60).astype(float))
    S[3], S[7], S[9] = [0.1, 0.2], None, [0.1, float("nan"), 0.3]
    y[4], y[5], y[6] = 3.0, 1.5, -1.0
    vec = pd.DataFrame({"s": [None if v is None else np.array(v) for v in S], "label": y})
    for data, kw, n_bad in [(df, {"score_cols": cols, "method": "temperature"}, 3),
                            (vec, {"score_col": "s", "method": "isotonic"}, 6)]:
        schema = "s array<double>, label double" if "score_col" in kw else None
        with pytest.raises(DataError) as local_err:
            distcal.fit(data, **kw)
        with pytest.raises(DataError) as engine_err:
            distcal.fit(engine(data, schema=schema), **kw)
        assert str(engine_err.value) == str(local_err.value)
        dropped = distcal.fit(engine(data, schema=schema), on_invalid="drop", **kw)
        assert dropped.dropped_rows == n_bad
        assert dropped == distcal.fit(data, on_invalid="drop", **kw)
    assert "2 rows are outside the class indices 0..2" in str(engine_err.value)


def test_transform_of_bad_scores_is_the_local_data_error(engine):
    """A transform's text scores, and a multiclass model's scores that are not vectors:
    the local reader's DataError on every engine (Spark raises them from the schema, and
    counts the text rows, before the lazy transform has a job)."""
    rng = np.random.default_rng(6)
    S = rng.dirichlet(np.ones(3), 80)
    y = rng.integers(0, 3, 80)
    model = distcal.fit(pd.DataFrame({"s": list(S), "label": y}), score_col="s")
    binary = distcal.fit(pd.DataFrame({"score": S[:, 1], "label": (y == 1).astype(int)}))
    text = pd.DataFrame({"score": ["0.5", "x", None, "0.2"]})
    for m, data, kw, problem in [
            (binary, text, {}, "column 'score': 3 rows are text, not numbers"),
            (model, pd.DataFrame({"s": S[:, 0]}), {"score_col": "s"},
             "column 's' has type (double|float64); expected a vector \\(list\\) of numbers")]:
        with pytest.raises(DataError, match=problem):
            m.transform(data, **kw)
        with pytest.raises(DataError, match=problem):
            # one partition: Dask's partitions are read lazily, each counting its own rows
            engine.collect(m.transform(engine.frame(data, npartitions=1), **kw))


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


def _class_ece(p, hit, w, n_bins=10):
    """ECE of one class's probability against [y = k], by loops over the bins."""
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        m = ((p > edges[b]) | (b == 0)) & ((p <= edges[b + 1]) | (b == n_bins - 1))
        total += abs(np.sum(w[m] * hit[m]) - np.sum(w[m] * p[m]))
    return total / w.sum()


def test_evaluate_equals_sklearn_brute_force_and_local(engine, wine):
    from sklearn.metrics import brier_score_loss, confusion_matrix, log_loss

    clf, _, Xb, yb, w = wine
    P = clf.predict_proba(Xb)
    df = pd.DataFrame({"s": _vectors(P), "label": yb, "w": w})
    rep = distcal.evaluate(engine(df, skewed=True), prob_col="s", weight_col="w")
    assert rep.n_rows == len(yb)
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
    local = distcal.evaluate(df, prob_col="s", weight_col="w")
    for name in ("log_loss", "brier", "accuracy", "ece", "classwise_ece"):
        assert getattr(rep, name) == pytest.approx(getattr(local, name), rel=1e-12)


@pytest.mark.parametrize("engine", ["dask", "spark"], indirect=True)
def test_evaluate_many_in_the_job_equals_local(engine, wine, tmp_path):
    """The job's evaluate of two multiclass predictions (a vector column and per-class
    columns; evaluate_many on the test session or cluster, over files of skewed sizes and
    an empty one) writes the report of the local engine (tested against scikit-learn and
    numpy in test_multiclass_evaluation.py); a row invalid in one prediction is left out
    of both, as locally."""
    from sklearn.metrics import log_loss

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
    if engine.name == "spark":
        from distcal.cli.spark import SparkBackend

        backend = SparkBackend(engine.spark)
    else:
        from distributed import get_client

        from distcal.cli.dask import DaskBackend

        class SharedCluster(DaskBackend):
            def close(self):  # the session's cluster outlives this command
                pass

        backend = SharedCluster(get_client())
    code = run(["evaluate", "--input", str(src), "--prob-col", "s", "--prob-cols",
                "q0,q1,q2", "--weight-col", "w", "--output", str(tmp_path / "rep")],
               prog=f"{engine.name}_calibrate", entry_point=engine.name,
               backend_factory=lambda opts: backend)
    assert code == 0
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["provenance"]["engine"] == engine.name and doc["kind"] == "multiclass"
    local = distcal.evaluate_many(str(src), ["s", ["q0", "q1", "q2"]], weight_col="w")
    assert doc["columns"] == list(local) == ["s", "q0,q1,q2"]
    for name, rep in local.items():
        d = doc["reports"][name]
        for attr in ("n_rows", "dropped_rows", "n_classes", "log_loss", "brier", "accuracy",
                     "ece", "classwise_ece", "weight_total"):
            assert d[attr] == pytest.approx(getattr(rep, attr), rel=1e-12), attr
        np.testing.assert_allclose(d["per_class_ece"], rep.per_class_ece, rtol=1e-12,
                                   atol=1e-15)
        np.testing.assert_allclose(d["confusion_matrix"], rep.confusion_matrix, rtol=1e-12)
        for got, curve in zip([d["top_label_curve"], *d["class_curves"]],
                              [rep.top_label_curve, *rep.class_curves], strict=True):
            np.testing.assert_allclose(pd.DataFrame(got).to_numpy(), curve.to_numpy(),
                                       rtol=1e-12)
    assert doc["reports"]["s"]["log_loss"] == pytest.approx(
        log_loss(yb, P, sample_weight=w), rel=1e-12)

    bad = pd.DataFrame({"s": _vectors(P), "label": yb, **{f"q{j}": Q[:, j] for j in range(3)}})
    bad.loc[3, "q1"] = np.nan
    got = distcal.evaluate_many(engine(bad), ["s", ["q0", "q1", "q2"]], on_invalid="drop")
    want = distcal.evaluate_many(bad, ["s", ["q0", "q1", "q2"]], on_invalid="drop")
    for name, rep in want.items():
        assert rep.dropped_rows == 1 and got[name].dropped_rows == 1
        assert got[name].n_rows == rep.n_rows
        assert got[name].log_loss == pytest.approx(rep.log_loss, rel=1e-12)


# -- Spark only: vectors of Spark ML, probability columns, the plan -----------------------

def test_spark_temperature_from_vector_udt_equals_local_and_sklearn(spark):
    from pyspark.ml.linalg import Vectors

    Xa, ya, Xb, yb = _split("digits")  # K = 10
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300, C=0.05)).fit(Xa, ya)
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(yb))
    S = clf.decision_function(Xb)
    pdf = pd.DataFrame({"s": _vectors(S), "label": yb, "w": w})
    sdf = spark.createDataFrame([(Vectors.dense(r), int(c), float(x)) for r, c, x in zip(S, yb, w)],
                                ["s", "label", "w"])
    assert type(sdf.schema["s"].dataType).__name__ == "VectorUDT"
    model = distcal.fit(sdf, method="temperature", score_col="s", weight_col="w")
    local = distcal.fit(pdf, method="temperature", score_col="s", weight_col="w")
    assert model == local  # beta to 1e-9 relative
    assert model.params["beta"] == pytest.approx(local.params["beta"], rel=1e-12)
    expect, cal = _sklearn_proba(clf, "temperature", Xb, yb, Xa, w)
    beta_sk = float(cal.calibrated_classifiers_[0].calibrators[0].beta_)
    assert model.params["beta"] == pytest.approx(beta_sk, rel=1e-6)
    S_eval = clf.decision_function(Xa)
    out = model.transform(spark.createDataFrame([(Vectors.dense(r),) for r in S_eval], ["s"]),
                          score_col="s", output_col="p")
    assert dict(out.dtypes)["p"] == "array<double>"
    got = _stack(out.toPandas()["p"])
    np.testing.assert_allclose(got, expect, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, local.predict(S_eval), rtol=0, atol=1e-13)


def test_spark_temperature_on_probability_columns_and_one_column(spark, wine):
    _, Xa, Xb, yb, w = wine
    clf = GaussianNB().fit(Xa, _split("wine")[1])
    P = clf.predict_proba(Xb)
    cols = ["p0", "p1", "p2"]
    pdf = pd.DataFrame(P, columns=cols).assign(label=yb, w=w)
    model = distcal.fit(spark.createDataFrame(pdf), method="temperature", score_cols=cols,
                        weight_col="w")
    assert model.params["input_"] == "probabilities"
    assert model == distcal.fit(pdf, method="temperature", score_cols=cols, weight_col="w")
    X_eval = np.vstack([Xa, Xb])
    expect, _ = _sklearn_proba(clf, "temperature", Xb, yb, X_eval, w)
    eval_sdf = spark.createDataFrame(pd.DataFrame(clf.predict_proba(X_eval), columns=cols))
    got = _stack(model.transform(eval_sdf, score_cols=cols, output_col="p").toPandas()["p"])
    np.testing.assert_allclose(got, expect, rtol=0, atol=1e-6)
    # one score column with score_cols: K = 2, p0 = 1 - p1
    rng = np.random.default_rng(4)
    s = np.round(rng.normal(size=400), 2)
    one = pd.DataFrame({"s": s, "label": (rng.random(400) < 1 / (1 + np.exp(-2 * s)))
                        .astype(np.int64)})
    sdf = spark.createDataFrame(one)
    for method in ("isotonic", "temperature"):
        model = distcal.fit(sdf, method=method, score_cols=["s"])
        assert model == distcal.fit(one, method=method, score_cols=["s"])
        got = _stack(model.transform(sdf, score_cols=["s"], output_col="p").toPandas()["p"])
        np.testing.assert_allclose(got, model.predict(s), rtol=0, atol=1e-13)
        if method == "isotonic":
            np.testing.assert_array_equal(got[:, 0], 1.0 - got[:, 1])


def test_spark_one_shuffle_for_all_classes(spark, wine):
    """One-vs-rest is one keyed pass: the rows of all K classes take one shuffle."""
    from distcal.core.keyed import KeySpec
    from distcal.engines import get_engine

    clf, _, Xb, yb, _ = wine
    sdf = spark.createDataFrame(pd.DataFrame({"s": [list(map(float, r)) for r in
                                                    clf.decision_function(Xb)], "label": yb}))
    spec = KeySpec(score_col="s", multiclass=True)
    with get_engine("spark").open_keyed(sdf, spec, on_invalid="raise") as rows:
        plan = rows.ranged._jdf.queryExecution().executedPlan().toString()
        assert rows.n_classes == 3
    assert plan.count("Exchange") == 1


def test_temperature_predicts_the_limit_of_infinite_logits():
    """+inf logits take their limit, probability 1 shared by their classes (a large
    finite logit's answer), not a NaN row; a row of -inf only has no limit: NaN."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(300, 3))
    y = np.array([rng.choice(3, p=np.exp(r) / np.exp(r).sum()) for r in z])
    model = fit_multiclass(pd.DataFrame({"z": list(z), "label": y}), score_col="z",
                           method="temperature")
    got = model.predict(np.array([[np.inf, 0.0, 1.0], [np.inf, np.inf, 0.0],
                                  [-np.inf, -np.inf, -np.inf]]))
    np.testing.assert_array_equal(got[:2], [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    np.testing.assert_array_equal(got[0], model.predict(np.array([[1e300, 0.0, 1.0]]))[0])
    assert np.isnan(got[2]).all()
