"""Multiclass evaluation (local engine) and shared passes, against independent oracles.

Oracles: scikit-learn's log_loss, brier_score_loss and confusion_matrix, a
brute-force top-label ECE in this file, and separate binary fits for the
lockstep runner.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.special import softmax
from sklearn.metrics import brier_score_loss, confusion_matrix, log_loss

import distcal
from distcal.core.distinct import pool_ties
from distcal.core.histogram import fit_histogram
from distcal.core.lockstep import run_in_lockstep
from distcal.core.sigmoid import fit_sigmoid
from distcal.errors import DataError


def _brute_top_label_ece(P, y, w, n_bins):
    conf, right = P.max(axis=1), (P.argmax(axis=1) == y)
    edges = np.linspace(0, 1, n_bins + 1)  # scikit-learn's calibration_curve edges
    total = 0.0
    for b in range(n_bins):
        lo, hi = edges[b], edges[b + 1]
        m = ((conf > lo) | (b == 0)) & ((conf <= hi) | (b == n_bins - 1))
        total += abs(w[m][right[m]].sum() - (w[m] * conf[m]).sum())
    return total / w.sum()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(3, 6), n=st.integers(6, 300),
       n_bins=st.integers(1, 15), weighted=st.booleans())
@example(seed=1105, k=3, n=35, n_bins=5, weighted=False)  # a confidence on the edge 0.6
def test_metrics_equal_sklearn_and_brute_force(seed, k, n, n_bins, weighted):
    rng = np.random.default_rng(seed)
    P = softmax(rng.normal(size=(n, k)) * rng.uniform(0.1, 4), axis=1)
    P[0] = np.round(P[0], 1)  # a probability on a bin edge
    P[0] /= P[0].sum()
    y = rng.integers(0, k, n)
    y[:k] = np.arange(k)  # every class present (scikit-learn infers K from y)
    w = rng.uniform(0, 3, n) if weighted else np.ones(n)
    df = pd.DataFrame({"p": list(P), "label": y, "w": w})
    rep = distcal.evaluate(df, prob_col="p", weight_col="w", n_bins=n_bins)
    assert rep.log_loss == pytest.approx(log_loss(y, P, sample_weight=w), rel=1e-12)
    assert rep.brier == pytest.approx(brier_score_loss(y, P, sample_weight=w), rel=1e-12)
    np.testing.assert_allclose(rep.confusion_matrix,
                               confusion_matrix(y, P.argmax(axis=1), sample_weight=w,
                                                labels=range(k)), rtol=1e-12, atol=1e-12)
    assert rep.accuracy == pytest.approx(np.average(P.argmax(axis=1) == y, weights=w))
    assert rep.ece == pytest.approx(_brute_top_label_ece(P, y, w, n_bins), rel=1e-9,
                                    abs=1e-15)
    one = [_brute_top_label_ece(np.column_stack([P[:, c], np.zeros(n)]), (y != c).astype(int),
                                w, n_bins) for c in range(k)]
    # the ECE of p_c against [y = c] is the top-label ECE of the pair (p_c, 0)
    # whose "right" answer is class 0, i.e. y = c
    np.testing.assert_allclose(rep.per_class_ece, one, rtol=1e-9, atol=1e-15)
    assert rep.classwise_ece == pytest.approx(np.mean(one), rel=1e-9, abs=1e-15)


def test_prob_columns_and_bad_probabilities():
    rng = np.random.default_rng(0)
    P = softmax(rng.normal(size=(50, 3)), axis=1)
    y = np.arange(50) % 3
    cols = pd.DataFrame(P, columns=["a", "b", "c"]).assign(label=y)
    rep = distcal.evaluate(cols, prob_cols=["a", "b", "c"])
    assert rep.log_loss == pytest.approx(log_loss(y, P), rel=1e-12)
    assert rep.to_dict()["confusion_matrix"] == rep.confusion_matrix.tolist()
    bad = cols.copy()
    bad.loc[0, "b"], bad.loc[1, "label"] = 1.5, 7
    with pytest.raises(DataError, match=r"column 'b': 1 row is outside \[0, 1\]; column "
                                        r"'label': 1 row is outside the class indices 0..2"):
        distcal.evaluate(bad, prob_cols=["a", "b", "c"])
    assert distcal.evaluate(bad, prob_cols=["a", "b", "c"], on_invalid="drop").dropped_rows == 2


def test_lockstep_shares_passes_and_equals_separate_fits():
    rng = np.random.default_rng(1)
    tables = {}
    for c in range(4):
        s = rng.normal(size=300)
        y = (rng.random(300) < 1 / (1 + np.exp(-(c + 1) * s))).astype(float)
        t = pool_ties(s, y)
        tables[c] = [t.slice(0, 100), t.slice(100, 220), t.slice(220, len(t))]
    passes = []

    def map_all(fns):
        passes.append(sorted(fns))
        return {c: [fn(t) for t in tables[c]] for c, fn in fns.items()}

    def separate(c):
        return lambda fn: [fn(t) for t in tables[c]]

    got = run_in_lockstep({c: (lambda m: fit_histogram(m, 5, "quantile")) for c in tables},
                          map_all)
    assert len(passes) == 3  # quantile edges (2 passes) + bin sums, for all classes at once
    for c in tables:
        expect = fit_histogram(separate(c), 5, "quantile")
        np.testing.assert_array_equal(got[c][0], expect[0])
        np.testing.assert_array_equal(got[c][1], expect[1])
    passes.clear()
    got = run_in_lockstep({c: fit_sigmoid for c in tables}, map_all)
    assert got == {c: fit_sigmoid(separate(c)) for c in tables}
    assert max(map(len, passes)) == 4 and len(passes) < 4 * 10


def test_lockstep_reraises_the_first_failure():
    def fail(m):
        m(len)
        raise ValueError("class 1 failed")

    def map_all(fns):
        return {c: [3] for c in fns}

    with pytest.raises(ValueError, match="class 1 failed"):
        run_in_lockstep({0: lambda m: m(len), 1: fail, 2: lambda m: [m(len) for _ in range(5)]},
                        map_all)
