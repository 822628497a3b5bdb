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
