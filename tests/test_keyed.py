"""Segments and classes together: `by=` with multiclass scores, for every method.

Oracles: scikit-learn's IsotonicRegression per (segment, class) with
scikit-learn's one-vs-rest normalisation, scipy's minimiser of the
multinomial log loss per segment (temperature scaling), and pandas groupby.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import log_loss

import distcal
from distcal import DataError, KeyedModel

K = 3


def frame(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, K))
    y = np.array([rng.choice(K, p=p) for p in softmax(1.7 * z, axis=1)])
    g = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    df = pd.DataFrame({f"s{k}": np.round(z[:, k], 2) for k in range(K)})
    df["y"], df["g"] = y, g
    return df


COLS = [f"s{k}" for k in range(K)]


def _ovr_isotonic(S, y, S_new):
    q = np.zeros((S_new.shape[0], K))
    for k in range(K):
        ir = IsotonicRegression(out_of_bounds="clip").fit(S[:, k], (y == k).astype(float))
        q[:, k] = ir.predict(S_new[:, k])
    total = q.sum(axis=1, keepdims=True)
    return np.where(total > 0, q / np.where(total > 0, total, 1), 1 / K)


def test_isotonic_by_segment_and_class_equals_sklearn_per_segment(engine):
    df = frame()
    model = distcal.fit(engine(df), score_cols=COLS, label_col="y", by="g")
    assert isinstance(model, KeyedModel) and model.classes == [0, 1, 2]
    probe = frame(500, seed=1)
    got = model.predict(probe[COLS].to_numpy(), segments=probe.g)
    for g in "abc":
        rows = df[df.g == g]
        mask = probe.g.to_numpy() == g
        want = _ovr_isotonic(rows[COLS].to_numpy(), rows.y.to_numpy(),
                             probe.loc[mask, COLS].to_numpy())
        np.testing.assert_allclose(got[mask], want, rtol=1e-9, atol=1e-12)
        seg = model.segment(g)
        np.testing.assert_allclose(seg.predict(probe.loc[mask, COLS].to_numpy()), want,
                                   rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        model.global_model.predict(probe[COLS].to_numpy()),
        _ovr_isotonic(df[COLS].to_numpy(), df.y.to_numpy(), probe[COLS].to_numpy()),
        rtol=1e-9, atol=1e-12)


def _beta(S, y):
    def loss(log_b):
        return -np.mean(log_softmax(np.exp(log_b) * S, axis=1)[np.arange(len(y)), y])
    return float(np.exp(minimize_scalar(loss, bounds=(-10, 10), method="bounded",
                                        options={"xatol": 1e-12}).x))


def test_temperature_one_beta_per_segment(engine):
    df = frame()
    model = distcal.fit(engine(df), method="temperature", score_cols=COLS, label_col="y",
                        by="g")
    for g in "abc":
        rows = df[df.g == g]
        assert model.segment(g).beta == pytest.approx(_beta(rows[COLS].to_numpy(),
                                                            rows.y.to_numpy()), rel=1e-6)
    assert model.global_model.beta == pytest.approx(_beta(df[COLS].to_numpy(),
                                                          df.y.to_numpy()), rel=1e-6)
    probe = frame(50, seed=2)
    got = model.predict(probe[COLS].to_numpy(), segments=probe.g)
    want = np.stack([softmax(model.segment(g).beta * s) for g, s in
                     zip(probe.g, probe[COLS].to_numpy())])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_temperature_decides_probabilities_or_logits_per_segment_silently(engine):
    """Segment "a" holds probabilities (log(p + 1e-12) taken), the others logits: each
    beta is the oracle's on its own rows read so, and the logits' log is never taken (it
    warned 'invalid value encountered in log')."""
    import warnings

    df = frame()
    S = df[COLS].to_numpy()
    a = (df.g == "a").to_numpy()
    S[a] = softmax(S[a], axis=1)
    mixed = pd.DataFrame({"s": list(S), "y": df.y, "g": df.g})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = distcal.fit(engine(mixed), method="temperature", score_col="s", label_col="y",
                            by="g")
    for g in "abc":
        rows = (df.g == g).to_numpy()
        z = np.log(S[rows] + 1e-12) if g == "a" else S[rows]
        assert model.segment(g).beta == pytest.approx(_beta(z, df.y[rows].to_numpy()),
                                                      rel=1e-6)


@pytest.mark.parametrize("method", ["isotonic", "sigmoid", "histogram", "modl", "temperature"])
def test_every_method_by_segment_and_class_saves_and_loads(tmp_path, method, engine):
    df = frame(2000)
    model = distcal.fit(engine(df), method=method, score_cols=COLS, label_col="y", by="g",
                        min_segment_weight=500)
    assert model == distcal.fit(df, method=method, score_cols=COLS, label_col="y", by="g",
                                min_segment_weight=500)  # the same model on every engine
    seg = model.segments.set_index("g")
    assert seg.loc["c", "fallback"] and not seg.loc["a", "fallback"]
    counts = df.g.value_counts()
    assert seg["n_rows"].to_dict() == counts.to_dict()
    model.save(tmp_path / "m")
    back = distcal.load(tmp_path / "m")
    assert back == model
    probe = frame(300, seed=3)
    keys = probe.g.where(probe.index % 7 != 0, None)  # some null keys: the global maps
    np.testing.assert_array_equal(back.predict(probe[COLS].to_numpy(), segments=keys),
                                  model.predict(probe[COLS].to_numpy(), segments=keys))
    np.testing.assert_allclose(model.predict(probe[COLS].to_numpy(), segments=keys).sum(1), 1.0)
    # A fallen-back segment predicts with the global maps.
    c_rows = probe[probe.g == "c"]
    np.testing.assert_array_equal(
        model.predict(c_rows[COLS].to_numpy(), segments=c_rows.g),
        model.global_model.predict(c_rows[COLS].to_numpy()))


def test_transform_adds_an_array_column_per_row(engine):
    df = frame(1500)
    model = distcal.fit(df, score_cols=COLS, label_col="y", by="g")
    want = model.predict(df[COLS].to_numpy(), segments=df.g)
    out = engine.collect(model.transform(engine.frame(df)))
    np.testing.assert_array_equal(np.stack(out["calibrated"].map(np.asarray).to_numpy()), want)
    if engine.name != "local":
        return
    table = model.transform(pa.Table.from_pandas(df, preserve_index=False), output_col="p")
    assert table.schema.field("p").type == pa.list_(pa.float64())
    np.testing.assert_array_equal(np.array(table.column("p").to_pylist()), want)
    with pytest.raises(DataError, match="'g'"):
        model.transform(df.drop(columns="g"))


def test_vector_column_with_segments(engine):
    df = frame(1500)
    # A list column (Arrow's list type: Dask turns plain object columns into text).
    vec = df.assign(v=pd.Series(list(df[COLS].to_numpy()), index=df.index,
                                dtype=pd.ArrowDtype(pa.list_(pa.float64())))).drop(columns=COLS)
    a = distcal.fit(engine(vec), score_col="v", label_col="y", by="g", method="sigmoid")
    b = distcal.fit(df, score_cols=COLS, label_col="y", by="g", method="sigmoid")
    probe = df[COLS].to_numpy()[:200]
    np.testing.assert_allclose(a.predict(probe, segments=df.g[:200]),
                               b.predict(probe, segments=df.g[:200]), rtol=1e-12)


def test_a_segment_that_cannot_be_fitted_is_named():
    df = frame(600)
    df.loc[df.g == "b", "y"] = 7  # not a class index: a row problem, named by column
    with pytest.raises(DataError, match="column 'y'"):
        distcal.fit(df, score_cols=COLS, label_col="y", by="g")
    df = frame(600)
    df["w"] = 1.5
    with pytest.raises(DataError, match="MODL counts rows"):
        distcal.fit(df, method="modl", score_cols=COLS, label_col="y", by="g", weight_col="w")


def test_pooled_keyed_rows_equal_pandas_groupby():
    from distcal.core.keyed import KeySpec, explode, pool_keyed
    from distcal.core.rows import read_rows

    df = frame(2000)
    df.loc[df.index % 11 == 0, "g"] = None
    spec = KeySpec(score_col=None, score_cols=tuple(COLS), label_col="y", by=("g",),
                   multiclass=True)
    rows, stats = read_rows(df, spec)
    kt = pool_keyed(*explode(rows.score, rows.label, rows.weight, rows.segments,
                             spec.classes(K)))
    got = {}
    for i, key in enumerate(kt.keys):
        t = kt.key_table(i)
        for s, w, p in zip(t.score, t.weight, t.positives):
            got[(key, s)] = (w, p)
    want = {}
    for k in range(K):
        for seg, part in [(None, df), *((((g,),), df[df.g == g]) for g in "abc")]:
            seg_key = seg[0] if seg is not None else None
            grouped = part.groupby(f"s{k}").agg(w=("y", "size"),
                                                p=("y", lambda v, k=k: float((v == k).sum())))
            for s, r in grouped.iterrows():
                want[((seg_key, k), float(s))] = (float(r.w), float(r.p))
    assert got == want
    assert stats["n_rows"] == len(df)


@pytest.mark.subprocess
@pytest.mark.parametrize("scores", ["vector", "columns"])
def test_command_line_fits_and_applies_multiclass_by_segment(tmp_path, scores):
    import json
    import subprocess
    import sys

    df = frame(1200)
    if scores == "vector":
        data = df.assign(v=list(df[COLS].to_numpy())).drop(columns=COLS)
        opts = ["--score-col", "v"]
    else:
        data, opts = df, ["--score-cols", ",".join(COLS)]
    data.to_parquet(tmp_path / "in.parquet")
    cli = [sys.executable, "-m", "distcal"]
    fit = subprocess.run([*cli, "fit", "--input", str(tmp_path / "in.parquet"), "--output",
                          str(tmp_path / "m"), "--label-col", "y", "--by", "g", "--method",
                          "temperature", *opts], capture_output=True, text=True, timeout=300)
    assert fit.returncode == 0, fit.stderr
    line = json.loads(fit.stdout)
    assert line["classes"] == K and line["segments"] == 3
    api = distcal.fit(df, method="temperature", score_cols=COLS, label_col="y", by="g")
    model = distcal.load(tmp_path / "m")
    assert model.global_model.beta == pytest.approx(api.global_model.beta, rel=1e-9)
    app = subprocess.run([*cli, "apply", "--model", str(tmp_path / "m"), "--input",
                          str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out.parquet"),
                          "--report", str(tmp_path / "rep"), "--label-col", "y", *opts],
                         capture_output=True, text=True, timeout=300)
    assert app.returncode == 0, app.stderr
    out = pd.read_parquet(tmp_path / "out.parquet")
    want = api.predict(df[COLS].to_numpy(), segments=df.g)
    np.testing.assert_allclose(np.stack(out["calibrated"].to_numpy()), want, rtol=1e-9)
    # --report: the multiclass report of the written probabilities
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["kind"] == "multiclass" and doc["columns"] == ["calibrated"]
    assert doc["log_loss"] == pytest.approx(log_loss(df.y, want, labels=range(K)), rel=1e-9)


def test_isotonic_auto_with_fractional_labels_decides_per_key(engine):
    """increasing="auto" with rates as labels: each segment's direction is the sign of its
    own Spearman's rho (scipy), and its map scikit-learn's IsotonicRegression("auto")."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(12)
    n = 1500
    g = rng.integers(0, 3, n)
    s = np.round(rng.random(n), 3)
    trend = np.where(g == 1, 1.0 - s, s)  # segment 1 decreasing, the others increasing
    y = np.clip(trend + rng.normal(0, 0.3, n), 0, 1).round(2)
    df = pd.DataFrame({"score": s, "label": y, "g": g})
    model = distcal.fit(engine(df), increasing="auto", by="g")
    q = np.linspace(0, 1, 101)
    for key in (0, 1, 2):
        rows = df[df.g == key]
        seg = model.segment((key,))
        assert seg.params["increasing_"] == bool(spearmanr(rows.score, rows.label)[0] >= 0)
        iso = IsotonicRegression(increasing="auto", out_of_bounds="clip").fit(rows.score,
                                                                                rows.label)
        np.testing.assert_allclose(seg.predict(q), iso.predict(q), atol=1e-12)
    assert model.segment((1,)).params["increasing_"] is False
    assert model.global_model.params["increasing_"] == bool(spearmanr(s, y)[0] >= 0)
