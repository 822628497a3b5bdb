"""Histogram binning against a brute-force computation with numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores

import distcal


def brute(s, y, w, edges, q):
    ids = np.searchsorted(edges[1:-1], s)
    nb = len(edges) - 1
    rate = np.full(nb, np.nan)
    for b in range(nb):
        m = ids == b
        if w[m].sum() > 0:
            rate[b] = (w[m] * y[m]).sum() / w[m].sum()
    filled = rate.copy()
    for b in range(nb):  # nearest non-empty below, else above
        if np.isnan(filled[b]):
            below = [k for k in range(b, -1, -1) if not np.isnan(rate[k])]
            above = [k for k in range(b, nb) if not np.isnan(rate[k])]
            filled[b] = rate[below[0]] if below else rate[above[0]]
    return filled[np.searchsorted(edges[1:-1], q)]


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_unit_weights(strategy):
    df = make_scores(5000, seed=2)
    s, y = df.score.to_numpy(), df.label.to_numpy().astype(float)
    edges = (np.linspace(0, 1, 11) if strategy == "uniform"
             else np.percentile(s, np.linspace(0, 100, 11)))
    q = np.linspace(-0.1, 1.1, 1001)
    model = distcal.fit(df, method="histogram", n_bins=10, strategy=strategy)
    np.testing.assert_allclose(model.params["edges"], edges, rtol=0, atol=1e-15)
    np.testing.assert_allclose(model.predict(q), brute(s, y, np.ones_like(s), edges, q),
                               atol=1e-12)


def test_empty_bins_and_outside_unit_interval():
    # scores outside [0, 1]: bins over [min, max]; a gap leaves empty bins
    s = np.array([-2.0, -1.9, -1.5, 3.0, 3.5, 4.0])
    y = np.array([0, 1, 0, 1, 1, 0], dtype=float)
    df = pd.DataFrame({"score": s, "label": y})
    model = distcal.fit(df, method="histogram", n_bins=6)
    edges = np.linspace(-2.0, 4.0, 7)
    np.testing.assert_allclose(model.params["edges"], edges)
    q = np.linspace(-3, 5, 81)
    np.testing.assert_allclose(model.predict(q), brute(s, y, np.ones(6), edges, q), atol=1e-15)
    assert len(model.blocks) == 3  # non-empty bins only


def test_integer_weights_equal_repeated_rows():
    rng = np.random.default_rng(3)
    s = np.round(rng.random(500), 2)
    y = (rng.random(500) < s).astype(float)
    w = rng.integers(1, 4, 500).astype(float)
    weighted = distcal.fit(pd.DataFrame({"score": s, "label": y, "w": w}), method="histogram",
                           strategy="quantile", weight_col="w")
    rep = pd.DataFrame({"score": np.repeat(s, w.astype(int)),
                        "label": np.repeat(y, w.astype(int))})
    repeated = distcal.fit(rep, method="histogram", strategy="quantile")
    np.testing.assert_allclose(weighted.params["edges"], repeated.params["edges"], atol=1e-15)
    q = np.linspace(0, 1, 301)
    np.testing.assert_allclose(weighted.predict(q), repeated.predict(q), atol=1e-12)


def exact_quantile_edges(s, w, n_bins):
    """The quantile edges computed in exact fractions of the weights as written (tenths)."""
    from fractions import Fraction

    values = np.unique(s)
    weight = [sum((Fraction(str(x)) for x in w[s == v]), Fraction(0)) for v in values]
    cum, xp, fp = Fraction(0), [], []
    for v, wv in zip(values, weight):
        xp += [cum, max(cum, cum + wv - 1)]
        fp += [Fraction(float(v))] * 2
        cum += wv
    edges = []
    for k in range(n_bins + 1):
        pos = Fraction(k, n_bins) * max(cum - 1, Fraction(0))
        j = max(i for i in range(len(xp)) if xp[i] <= pos)
        j = min(j, len(xp) - 2)
        width = xp[j + 1] - xp[j]
        t = (pos - xp[j]) / width if width else Fraction(0)
        edges.append(float(fp[j] + (fp[j + 1] - fp[j]) * t))
    return np.array(edges)


@pytest.mark.parametrize("seed", [42, 287])
def test_quantile_bins_of_weights_that_are_not_whole_numbers_do_not_depend_on_their_order(
        engine, seed):
    # Weights in tenths: the positions of the quantiles are sums whose last bits depend on
    # the order of the rows (per range, per engine). Where a quantile falls exactly on a
    # value's position (exact fractions), every row of that value stays in one bin.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 300))
    s = np.round(rng.random(n), 1)
    y = (rng.random(n) < s).astype(float)
    w = rng.choice([0.1, 0.2, 0.3, 0.7], n)
    df = pd.DataFrame({"score": s, "label": y, "w": w})
    edges = exact_quantile_edges(s, w, 7)
    values = np.unique(s)
    expect = brute(s, y, w, edges, values)
    for order in (df, df.iloc[::-1], df.sample(frac=1, random_state=1)):
        model = distcal.fit(engine(order.reset_index(drop=True)), method="histogram",
                            strategy="quantile", n_bins=7, weight_col="w", **engine.opts)
        np.testing.assert_allclose(model.params["edges"], edges, rtol=0, atol=1e-12)
        np.testing.assert_allclose(model.predict(values), expect, rtol=0, atol=1e-12)
