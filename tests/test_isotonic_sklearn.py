"""Isotonic fits against scikit-learn's IsotonicRegression(out_of_bounds="clip")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores
from sklearn.isotonic import IsotonicRegression

import distcal


def sklearn_predict(df, q, weight_col=None, **kw):
    w = None if weight_col is None else df[weight_col].to_numpy()
    ir = IsotonicRegression(out_of_bounds="clip", **kw)
    ir.fit(df["score"].to_numpy(), df["label"].to_numpy().astype(float), sample_weight=w)
    return ir.predict(q)


@pytest.mark.parametrize("ties", [True, False])
@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("negative", [False, True])
def test_matches_sklearn(ties, weights, negative):
    df = make_scores(20000, seed=3, ties=ties, weights=weights, negative=negative)
    q = np.concatenate([np.linspace(df.score.min() - 1, df.score.max() + 1, 3001),
                        df.score.to_numpy()[:2000]])
    wc = "w" if weights else None
    model = distcal.fit(df, weight_col=wc)
    np.testing.assert_allclose(model.predict(q), sklearn_predict(df, q, wc), rtol=0, atol=1e-12)
    assert model.n_rows == (int((df[wc] > 0).sum()) if weights else len(df))


@pytest.mark.parametrize("increasing", [False, "auto"])
def test_decreasing_and_auto(increasing):
    df = make_scores(8000, seed=5, weights=True)
    df["score"] = -df["score"]  # decreasing relation: auto must pick decreasing
    df = df[df.w > 0]  # scikit-learn's "auto" also counts zero-weight rows
    q = np.linspace(-1.2, 0.2, 1501)
    model = distcal.fit(df, weight_col="w", increasing=increasing)
    expect = sklearn_predict(df, q, "w", increasing=increasing)
    np.testing.assert_allclose(model.predict(q), expect, rtol=0, atol=1e-12)
    assert model.params["increasing_"] is False
    assert np.all(np.diff(model.blocks["prob"]) < 0)


def test_auto_increasing_matches_sklearn_choice():
    df = make_scores(3000, seed=9)
    model = distcal.fit(df, increasing="auto")
    ir = IsotonicRegression(increasing="auto").fit(df.score, df.label)
    assert model.params["increasing_"] is bool(ir.increasing_) is True


def test_auto_with_fractional_labels():
    rng = np.random.default_rng(2)
    s = rng.random(2000)
    y = np.clip(1 - s + rng.normal(0, 0.2, 2000), 0, 1)
    df = pd.DataFrame({"score": s, "label": y})
    q = np.linspace(0, 1, 501)
    model = distcal.fit(df, increasing="auto")
    expect = IsotonicRegression(increasing="auto", out_of_bounds="clip").fit(s, y).predict(q)
    np.testing.assert_allclose(model.predict(q), expect, atol=1e-12)


@pytest.mark.parametrize("y_min,y_max", [(0.1, None), (None, 0.7), (0.2, 0.6)])
def test_y_bounds(y_min, y_max):
    df = make_scores(6000, seed=11)
    q = np.linspace(-0.1, 1.1, 1201)
    model = distcal.fit(df, y_min=y_min, y_max=y_max)
    expect = sklearn_predict(df, q, y_min=y_min, y_max=y_max)
    np.testing.assert_allclose(model.predict(q), expect, atol=1e-12)
    b = model.blocks
    assert np.all(np.diff(b["prob"]) != 0)  # clipped neighbours were merged
    lo = -np.inf if y_min is None else y_min
    hi = np.inf if y_max is None else y_max
    assert b["prob"].between(lo, hi).all()


def test_real_classifier_scores():
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.naive_bayes import GaussianNB

    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.5, random_state=0)
    s = GaussianNB().fit(Xtr, ytr).predict_proba(Xte)[:, 1]
    df = pd.DataFrame({"score": s, "label": yte})
    q = np.concatenate([s, np.linspace(0, 1, 1001)])
    model = distcal.fit(df)
    np.testing.assert_allclose(model.predict(q), sklearn_predict(df, q), atol=1e-12)


def test_blocks_are_weighted_label_means():
    df = make_scores(5000, seed=4, weights=True)
    b = distcal.fit(df, weight_col="w").blocks
    for row in b.itertuples():
        inside = df[(df.score >= row.score_min) & (df.score <= row.score_max) & (df.w > 0)]
        assert row.weight == pytest.approx(inside.w.sum(), rel=1e-12)
        assert row.positives == pytest.approx((inside.w * inside.label).sum(), rel=1e-12)
        assert row.prob == pytest.approx(row.positives / row.weight, rel=1e-12)


def test_infinite_scores():
    # Blocks: {-inf}: 0, {0.2, 0.4}: 1/2, {0.6, +inf}: 1. An infinite knot bounds
    # no segment: finite scores interpolate between finite knots only.
    df = pd.DataFrame({"score": [-np.inf, -np.inf, 0.2, 0.4, 0.6, np.inf],
                       "label": [0, 0, 1, 0, 1, 1]})
    model = distcal.fit(df)
    b = model.blocks
    assert list(b.score_min) == [-np.inf, 0.2, 0.6]
    assert list(b.score_max) == [-np.inf, 0.4, np.inf]
    assert list(b.prob) == [0.0, 0.5, 1.0]
    p = model.predict([-np.inf, -1e300, 0.2, 0.5, 0.6, 1e300, np.inf, np.nan])
    np.testing.assert_array_equal(p[:-1], [0.0, 0.5, 0.5, 0.75, 1.0, 1.0, 1.0])
    assert np.isnan(p[-1])
    step = distcal.fit(df, interpolation="step").predict([-np.inf, 0.1, 0.5, np.inf])
    np.testing.assert_array_equal(step, [0.0, 0.0, 0.5, 1.0])


def test_all_rows_at_one_score():
    df = pd.DataFrame({"score": [0.3] * 10, "label": [1, 0, 0, 1, 0, 0, 0, 0, 0, 1]})
    model = distcal.fit(df)
    assert len(model.blocks) == 1
    np.testing.assert_allclose(model.predict([0.0, 0.3, 1.0]), [0.3, 0.3, 0.3])


def test_nan_in_nan_out(scores_df):
    model = distcal.fit(scores_df)
    out = model.predict(np.array([np.nan, 0.5]))
    assert np.isnan(out[0]) and 0 <= out[1] <= 1


def test_probabilities_of_tiny_steps_are_not_chained_into_one_block(engine):
    """Neighbouring blocks within 2^-36 of each other are one block, but a run of such
    steps may not drift: 20,000 rates 0.3 + i 2e-12 (already increasing, so the fit is the
    rates themselves) were pooled into one block, 6.7e-8 from sklearn at the ends."""
    k = 20_000
    s = np.arange(k) / k
    p = 0.3 + np.arange(k) * 2e-12
    df = pd.DataFrame({"score": np.r_[s, s], "label": np.r_[np.ones(k), np.zeros(k)],
                       "w": np.r_[p, 1 - p]})
    want = sklearn_predict(df, s, weight_col="w")
    np.testing.assert_allclose(want, p, rtol=1e-12)
    for interpolation in ("step", "linear"):
        model = distcal.fit(engine(df), weight_col="w", interpolation=interpolation,
                            **engine.opts)
        np.testing.assert_allclose(model.predict(s), want, rtol=1e-10)
        assert len(model.blocks) > 1000
