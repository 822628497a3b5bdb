"""Numbers at the edges: exact results where they exist, never NaN or inf in a model."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import distcal


def _df(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    return pd.DataFrame({"score": s, "label": (rng.random(n) < s).astype(int)})


def test_sigmoid_scores_near_the_largest_double_are_exact():
    df = _df()
    ref = distcal.fit(df, method="sigmoid").params
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        huge = distcal.fit(df.assign(score=(df.score - 0.5) * 2 * 1.7e308), method="sigmoid")
    a, b = huge.params["a"], huge.params["b"]
    assert math.isfinite(a) and math.isfinite(b)
    # s = (x - 0.5) * 3.4e308  =>  a_s = a_x / 3.4e308, b_s = b_x + a_x / 2
    assert a * 1.7e308 * 2 == pytest.approx(ref["a"], rel=1e-9)
    assert b == pytest.approx(ref["b"] + ref["a"] / 2, rel=1e-9)
    p = huge.predict([-1.7e308, 0.0, 1.7e308])
    assert np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1))


def test_sigmoid_large_weights_are_exact():
    df = _df()
    ref = distcal.fit(df, method="sigmoid").params
    w = distcal.fit(df.assign(w=2.0**1000), method="sigmoid", weight_col="w").params
    # Platt's targets use the weight totals (2^1000 N), so the fit is that of huge counts:
    # compare with the same totals in ordinary magnitudes.
    big = distcal.fit(df.assign(w=1e12), method="sigmoid", weight_col="w").params
    assert w["a"] == pytest.approx(big["a"], rel=1e-6) and w["b"] == pytest.approx(big["b"],
                                                                                   rel=1e-6)
    assert w["a"] != ref["a"]


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_histogram_scores_near_the_largest_double(strategy):
    df = _df().assign(score=lambda d: (d.score - 0.5) * 2 * 1.7e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = distcal.fit(df, method="histogram", strategy=strategy, n_bins=10)
    edges = np.asarray(model.params["edges"])
    assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) >= 0)
    assert edges[0] == df.score.min() and edges[-1] == df.score.max()
    p = model.predict(df.score)
    assert np.all((p >= 0) & (p <= 1))


def _inf_rows(label):
    df = _df(200)
    return pd.concat([df.assign(label=0), pd.DataFrame({"score": [math.inf] * 5,
                                                        "label": [label] * 5})])


def test_threshold_inf_predicts_the_inf_rows():
    df = _inf_rows(1)
    res = distcal.optimal_threshold(df)
    assert res.threshold == math.inf and not res.predict_none
    assert (res.tp, res.fp, res.n_positive_predicted, res.cost) == (5, 0, 5, 0)
    # cost consistent with the rule "score >= +inf"
    predicted = df.score >= res.threshold
    assert res.cost == ((predicted & (df.label == 0)).sum() + (~predicted & (df.label == 1)).sum())
    tracker = distcal.ThresholdTracker()
    tracker.update_many(df.score.to_numpy(), df.label.to_numpy())
    assert tracker.result() == res and not tracker.predict_none


def test_threshold_predict_none_with_inf_scores():
    df = _inf_rows(0)
    res = distcal.optimal_threshold(df)
    assert res.threshold == math.inf and res.predict_none
    assert (res.tp, res.fp, res.n_positive_predicted, res.cost) == (0, 0, 0, 0)
    tracker = distcal.ThresholdTracker()
    for s, y in zip(df.score, df.label):
        tracker.update(s, y)
    assert tracker.predict_none and tracker.result() == res


def test_threshold_finite_is_not_predict_none():
    res = distcal.optimal_threshold(_df())
    assert math.isfinite(res.threshold) and not res.predict_none


def test_fit_and_threshold_refuse_overflow():
    df = _df().assign(w=1e308)
    with pytest.raises(distcal.DataError, match="overflow"):
        distcal.fit_and_threshold(df, weight_col="w")


@pytest.mark.parametrize("call", [
    lambda df: distcal.fit(df, method="histogram", weight_col="w"),
    lambda df: distcal.fit(df, method="sigmoid", weight_col="w", by="g"),
    lambda df: distcal.optimal_threshold(df, weight_col="w"),
    lambda df: distcal.evaluate(df, "score", weight_col="w", by="g"),
    lambda df: distcal.summarize(df, weight_col="w")])
def test_weights_whose_total_overflows_are_refused_by_name_without_numpy_warnings(call):
    """Each weight is finite, their sum is not: one DataError naming the weight column
    and its rows, before any method's sums overflow (numpy's RuntimeWarnings leaked)."""
    n = 1000
    df = pd.DataFrame({"score": np.linspace(0, 1, n), "label": np.arange(n) % 2,
                       "w": np.full(n, 1e306), "g": np.arange(n) % 3})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(distcal.DataError, match=r"^column 'w' \(weight\): the weights of 1000 "
                           r"rows are too large: their sums overflow float64"):
            call(df)


def test_output_name_at_the_limit_works(tmp_path):
    """A 255-byte name is fine: the temporary siblings shorten their part of it."""
    model = distcal.fit(_df(300))
    target = tmp_path / ("n" * 255)
    model.save(target)
    model.save(target, overwrite=True)
    assert distcal.load(target) == model
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_failed_output_leaves_no_directories(tmp_path):
    with pytest.raises(distcal.DataError):
        distcal.fit(tmp_path / "missing.parquet")
    model = distcal.fit(_df(300))

    def boom(path):
        raise RuntimeError("disk full")

    from distcal.storage import filesystem_for, publish_dir

    target = str(tmp_path / "a" / "b" / "model")
    with pytest.raises(RuntimeError):
        publish_dir(filesystem_for(target), target, boom)
    assert list(tmp_path.iterdir()) == []
    model.save(target)
    assert distcal.load(target) == model


@pytest.mark.parametrize("score", [0.1, 0.3, 0.4, 0.7, 2.0])
def test_sigmoid_of_one_distinct_score_is_its_mean_target(score):
    """One distinct score identifies only b: p is Platt's mean target, everywhere. (The
    mean of 0.4 repeated is not 0.4 in floats: its rounding error was taken for a spread,
    and the map became a step, decreasing for some scores.)"""
    df = pd.DataFrame({"score": [score] * 3, "label": [0, 1, 1], "g": ["a"] * 3})
    # Platt's targets: (N+ + 1) / (N+ + 2) = 3/4 for the positives, 1 / (N- + 2) = 1/3
    want = (2 * 0.75 + 1 / 3) / 3
    for model in (distcal.fit(df, method="sigmoid"),
                  distcal.fit(df, method="sigmoid", by="g").segment("a")):
        assert model.params["a"] == 0.0
        np.testing.assert_allclose(model.predict([score - 0.01, score, score + 0.01]), want,
                                   rtol=1e-12)


def test_sigmoid_and_beta_at_the_smallest_scales_are_those_of_ordinary_ones():
    """Scores or weights below 2^-500 are scaled by powers of two as those above 2^500
    are: squares and sums of them underflowed (sigmoid of scores 1e-300 was the constant
    1/2; weights 1e-310 were called too large)."""
    df = pd.DataFrame({"score": np.array([.1, .2, .3, .4, .5, .6, .7, .8]),
                       "label": [0, 0, 1, 0, 1, 0, 1, 1]})
    ref = distcal.fit(df, method="sigmoid")
    tiny = distcal.fit(df.assign(score=df.score * 1e-300), method="sigmoid")
    np.testing.assert_allclose(tiny.predict(df.score * 1e-300), ref.predict(df.score),
                               rtol=1e-9)
    ref = distcal.fit(df, method="beta")
    for w in (1e-200, 1e-310, 5e-324):
        light = distcal.fit(df.assign(w=w), method="beta", weight_col="w")
        np.testing.assert_allclose(light.predict(df.score), ref.predict(df.score), rtol=1e-9)
        # Platt's targets are (W+ + 1) / (W+ + 2): weights this light make them 1/2 each,
        # so the map is flat at 1/2 (no error)
        flat = distcal.fit(df.assign(w=w), method="sigmoid", weight_col="w")
        np.testing.assert_allclose(flat.predict(df.score), 0.5, atol=1e-9)


def test_quantile_edges_of_scores_spanning_more_than_the_largest_double(tmp_path):
    """The median of -M and M is 0 (numpy's percentile gives -inf: b - a overflows);
    a model of such an edge could not be saved."""
    m = np.finfo(float).max
    model = distcal.fit(pd.DataFrame({"score": [-m, m], "label": [0, 1]}), method="histogram",
                        n_bins=2, strategy="quantile")
    assert model.params["edges"] == [-m, 0.0, m]
    np.testing.assert_array_equal(model.predict([-m, m]), [0.0, 1.0])
    model.save(tmp_path / "m")
    assert distcal.load(tmp_path / "m") == model


def test_beta_models_refitted_to_a_negative_parameter_load(tmp_path):
    """The refit rule (betacal's) leaves the parameter it refits unchecked: such a model
    saved, then could not be loaded ("a and b must be >= 0")."""
    from betacal import BetaCalibration

    df = pd.DataFrame({"score": [.1, .2, .3, .7, .8, .9], "label": [1, 1, 0, 1, 0, 0]})
    model = distcal.fit(df, method="beta")
    assert model.params["a"] == 0.0 and model.params["b"] < 0.0
    ref = BetaCalibration(parameters="abm").fit(df.score.to_numpy(), df.label.to_numpy())
    np.testing.assert_allclose(model.predict(df.score), ref.predict(df.score), atol=1e-4)
    model.save(tmp_path / "m")
    assert distcal.load(tmp_path / "m") == model


def test_sigmoid_of_scores_near_the_largest_double_in_ranges():
    """The largest |score| is the largest over the ranges: two ranges' 1e308 were added
    (inf), nothing was scaled, and every partitioned fit (a file in ranges, Dask, Spark)
    refused what the fit in memory fits."""
    df = pd.DataFrame({"score": [1e308, -1e308, .5, .2, .1, .7] * 20,
                       "label": [1, 0, 1, 0, 0, 1] * 20})
    want = distcal.fit(df, method="sigmoid")
    got = distcal.fit(df, method="sigmoid", memory_rows=10, batch_rows=10)
    assert got.params == pytest.approx(want.params, rel=1e-12)
    assert math.isfinite(got.params["a"]) and got.params["a"] < 0
