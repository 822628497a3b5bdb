"""Centered isotonic regression (Oron & Flournoy): the same blocks, one point per block.

Oracle: scikit-learn's IsotonicRegression gives the blocks (its fitted
values on the distinct scores); the weighted mean score of each block's
rows and ``np.interp`` between the (mean, value) points are computed here
from the rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores
from sklearn.isotonic import IsotonicRegression

import distcal


def centered_oracle(df: pd.DataFrame, q: np.ndarray, weight_col: str | None) -> np.ndarray:
    w = np.ones(len(df)) if weight_col is None else df[weight_col].to_numpy()
    keep = w > 0
    s, y, w = df.score.to_numpy()[keep], df.label.to_numpy()[keep], w[keep]
    fitted = IsotonicRegression().fit(s, y, sample_weight=w).predict(s)
    order = np.argsort(s, kind="stable")
    s, w, fitted = s[order], w[order], fitted[order]
    # a block = a run of rows with one fitted value (adjacent equal values merged)
    starts = np.flatnonzero(np.concatenate(([True], np.diff(fitted) != 0)))
    means = np.add.reduceat(w * s, starts) / np.add.reduceat(w, starts)
    return np.interp(q, means, fitted[starts])


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("ties", [True, False])
def test_centered_matches_oracle(weights, ties):
    df = make_scores(20000, seed=21, ties=ties, weights=weights)
    wc = "w" if weights else None
    model = distcal.fit(df, weight_col=wc, interpolation="centered")
    q = np.concatenate([np.linspace(-0.5, 1.5, 4001), df.score.to_numpy()[:3000]])
    np.testing.assert_allclose(model.predict(q), centered_oracle(df, q, wc), rtol=0,
                               atol=1e-12)
    b = model.blocks
    assert list(b.columns) == ["score_min", "score_max", "prob", "weight", "positives",
                               "score_mean"]
    assert np.all((b.score_min <= b.score_mean) & (b.score_mean <= b.score_max))
    same_blocks = distcal.fit(df, weight_col=wc).blocks
    pd.testing.assert_frame_equal(b, same_blocks)  # the same blocks as linear and step


def test_centered_is_strictly_increasing_between_end_points_and_keeps_auc():
    df = make_scores(30000, seed=22, ties=False)
    new = make_scores(30000, seed=25, ties=False)  # held out: the AUC that matters
    model = distcal.fit(df, interpolation="centered")
    m = model.blocks.score_mean.to_numpy()
    inside = np.sort(new.score.to_numpy()[(new.score > m[0]) & (new.score < m[-1])])
    assert np.all(np.diff(model.predict(inside)) > 0)
    scored = pd.DataFrame({"label": new.label, "raw": new.score,
                           "step": distcal.fit(df, interpolation="step").predict(new.score),
                           "linear": distcal.fit(df).predict(new.score),
                           "centered": model.predict(new.score)})
    aucs = {c: distcal.evaluate(scored, prob_col=c).auc for c in scored if c != "label"}
    assert max(aucs["step"], aucs["linear"]) < aucs["centered"] <= aucs["raw"]


def test_centered_infinite_scores_and_nan():
    df = pd.DataFrame({"score": [-np.inf, -np.inf, 0.2, 0.4, 0.6, np.inf],
                       "label": [0, 0, 1, 0, 1, 1]})
    model = distcal.fit(df, interpolation="centered")
    got = model.predict([-np.inf, -1e300, 0.3, np.nan, 1e300, np.inf])
    b = model.blocks
    assert got[0] == b.prob.iloc[0] and got[-1] == b.prob.iloc[-1]
    assert np.isnan(got[3])
    assert np.all(np.isfinite(got[[0, 1, 2, 4, 5]]))


def test_centered_save_load_round_trip(tmp_path):
    df = make_scores(5000, seed=23, weights=True)
    model = distcal.fit(df, weight_col="w", interpolation="centered")
    model.save(tmp_path / "m")
    back = distcal.load(tmp_path / "m")
    assert back == model
    np.testing.assert_array_equal(back.blocks.score_mean, model.blocks.score_mean)
    q = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(back.predict(q), model.predict(q))


@pytest.mark.parametrize("interpolation", ["centered", "linear", "step"])
def test_one_block_of_minus_and_plus_infinity_saves_and_loads(tmp_path, interpolation):
    """Labels that pool every score, -inf and +inf among them, into one block: its mean
    score is NaN (no knot; the block's probability everywhere). The model a fit gives
    loads back equal, mean included (it was a damaged-model error for centered)."""
    df = pd.DataFrame({"score": [-np.inf, 0.2, 0.5, np.inf], "label": [1, 0, 1, 0]})
    model = distcal.fit(df, interpolation=interpolation)
    assert len(model.blocks) == 1 and np.isnan(model.blocks.score_mean.iloc[0])
    model.save(tmp_path / "m")
    back = distcal.load(tmp_path / "m")
    assert back == model and list(back.blocks.columns) == list(model.blocks.columns)
    q = [-np.inf, -1.0, 0.3, 2.0, np.inf]
    np.testing.assert_array_equal(back.predict(q), np.full(5, 0.5))


@pytest.mark.spark
def test_centered_on_spark_equals_local(spark):
    df = make_scores(20000, seed=24, weights=True)
    sdf = spark.createDataFrame(df).repartition(4)
    model = distcal.fit(sdf, weight_col="w", interpolation="centered")
    assert model == distcal.fit(df, weight_col="w", interpolation="centered")
    q = pd.DataFrame({"score": np.concatenate([np.linspace(-0.2, 1.2, 3001),
                                               [np.inf, -np.inf, np.nan]])})
    got = model.transform(spark.createDataFrame(q)).toPandas()["calibrated"].to_numpy()
    np.testing.assert_allclose(got, model.predict(q.score), rtol=0, atol=1e-15,
                               equal_nan=True)


@pytest.mark.parametrize("by", [None, "seg"])
def test_blocks_of_weights_that_are_not_whole_numbers_do_not_depend_on_their_order(engine, by):
    # Weights of 0.1: a block's sums depend on the order they are added in (per range,
    # per engine), so blocks of one rate differ in their last bits. Multiplying every
    # weight by 10 changes no isotonic fit, so the oracle is the fit of unit weights,
    # whose sums are exact (scikit-learn's blocks, centered here).
    rng = np.random.default_rng(1003)
    n = 1500
    s = np.round(rng.random(n), 2)
    df = pd.DataFrame({"score": s, "label": (rng.random(n) < s).astype(float), "w": 0.1,
                       "seg": rng.integers(0, 2, n).astype(float)})
    q = np.linspace(-0.1, 1.1, 1201)
    groups = [(None, df)] if by is None else list(df.groupby("seg"))
    for order in (df, df.iloc[::-1], df.sample(frac=1, random_state=3)):
        model = distcal.fit(engine(order.reset_index(drop=True)), weight_col="w", by=by,
                            interpolation="centered", **engine.opts)
        for name, rows in groups:
            fitted = model if by is None else model.segment(name)
            expect = centered_oracle(rows, q, None)
            unit = IsotonicRegression().fit(rows.score, rows.label).predict(np.unique(rows.score))
            assert len(fitted.blocks) == np.count_nonzero(np.diff(unit)) + 1
            np.testing.assert_allclose(fitted.predict(q), expect, rtol=0, atol=1e-12)
