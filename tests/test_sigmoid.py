"""Platt scaling against scikit-learn's sigmoid calibration and scipy's optimiser."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores
from scipy.optimize import minimize
from sklearn.calibration import _sigmoid_calibration

import distcal


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("negative", [False, True])
def test_matches_sklearn(weights, negative):
    df = make_scores(20000, seed=7, ties=False, weights=weights, negative=negative)
    w = df["w"].to_numpy() if weights else None
    a_sk, b_sk = _sigmoid_calibration(df.score.to_numpy(), df.label.to_numpy(), w)
    model = distcal.fit(df, method="sigmoid", weight_col="w" if weights else None)
    assert model.params["a"] == pytest.approx(a_sk, rel=1e-4)
    assert model.params["b"] == pytest.approx(b_sk, rel=1e-4)
    q = np.linspace(df.score.min(), df.score.max(), 101)
    np.testing.assert_allclose(model.predict(q), 1 / (1 + np.exp(a_sk * q + b_sk)), atol=1e-5)


def test_full_precision_optimum():
    """Our optimum beats a tightly converged generic optimiser on Platt's objective."""
    df = make_scores(3000, seed=8, ties=False)
    s, y = df.score.to_numpy(), df.label.to_numpy()
    n1, n0 = y.sum(), len(y) - y.sum()
    t = np.where(y == 1, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))

    def nll(ab):
        z = ab[0] * s + ab[1]
        return np.sum(t * np.logaddexp(0, z) + (1 - t) * np.logaddexp(0, -z))

    ref = minimize(nll, [0.0, 0.0], method="Nelder-Mead",
                   options={"xatol": 1e-12, "fatol": 1e-14, "maxiter": 20000}).x
    model = distcal.fit(df, method="sigmoid")
    ours = np.array([model.params["a"], model.params["b"]])
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    assert nll(ours) <= nll(ref) + 1e-9


def test_single_distinct_score():
    df = pd.DataFrame({"score": [0.5] * 4, "label": [1, 0, 0, 0]})
    model = distcal.fit(df, method="sigmoid")
    # Only b is identified: p equals the mean smoothed target (1 * 2/3 + 3 * 1/5) / 4.
    assert model.params["a"] == 0.0
    assert model.predict([0.5])[0] == pytest.approx((2 / 3 + 3 / 5) / 4, rel=1e-12)


def test_infinite_scores_are_rejected():
    df = pd.DataFrame({"score": [0.1, np.inf, 0.3], "label": [0, 1, 1]})
    with pytest.raises(distcal.DataError, match=r"column 'score': 1 row is infinite"):
        distcal.fit(df, method="sigmoid")


def test_subnormal_scores_are_refused_for_what_they_are(engine):
    """Scores 1e-320 apart need a slope near 1e320: a DataError saying so, on every engine
    (it said the weights were too large; they were 1)."""
    df = pd.DataFrame({"score": [1e-320, 2e-320, 3e-320, 4e-320], "label": [0, 1, 0, 1]})
    with pytest.raises(distcal.DataError, match=r"the scores spread too little for a sigmoid"):
        distcal.fit(engine(df), method="sigmoid", **engine.opts)
    model = distcal.fit(engine(df.assign(score=df.score * 1e300)), method="sigmoid",
                        **engine.opts)
    assert np.isfinite(model.params["a"]) and np.isfinite(model.params["b"])
