"""Optimal thresholds against brute force and the paper's worked example."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distcal


def brute_force(s, y, w, cost_fp=1.0, cost_fn=1.0, z=None):
    """Try every candidate threshold (each distinct score and +inf), O(n^2)."""
    best_t, best_c = math.inf, None
    for t in sorted(set(s.tolist()) | {math.inf}, reverse=True):
        pos = s >= t
        if z is not None:
            c = float(np.sum(w[pos] * z[pos]))
        else:
            c = float(cost_fp * np.sum(w[pos] * (1 - y[pos])) + cost_fn * np.sum(w[~pos] * y[~pos]))
        if best_c is None or c < best_c - 1e-12:
            best_t, best_c = t, c
    return best_t, best_c


def achieved(s, y, w, t, cost_fp, cost_fn):
    pos = s >= t
    return float(cost_fp * np.sum(w[pos] * (1 - y[pos])) + cost_fn * np.sum(w[~pos] * y[~pos]))


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.integers(0, 10_000), st.sampled_from([(1, 1), (1, 5), (3, 1),
                                                                    (0.5, 0.25)]))
def test_matches_brute_force(n, seed, costs):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 6, n).astype(float) / 5  # many ties
    y = (rng.random(n) < s).astype(float)
    w = rng.choice([0.0, 0.5, 1.0, 2.0], n)
    if w.sum() == 0:
        w[0] = 1.0
    df = pd.DataFrame({"score": s, "label": y, "w": w})
    res = distcal.optimal_threshold(df, weight_col="w", cost_fp=costs[0], cost_fn=costs[1])
    t, c = brute_force(s[w > 0], y[w > 0], w[w > 0], *costs)
    assert res.cost == pytest.approx(c, abs=1e-9)
    assert achieved(s, y, w, res.threshold, *costs) == pytest.approx(c, abs=1e-9)
    assert res.threshold == t  # the largest threshold of minimal cost
    pos = s >= res.threshold
    assert res.n_positive_predicted == pytest.approx(w[pos].sum())
    assert res.tp + res.fp == pytest.approx(w[pos].sum())
    assert res.fn == pytest.approx(np.sum(w[~pos] * y[~pos]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(-9, 9), st.sampled_from([0.0, 1.0, 2.5])),
                min_size=1, max_size=30))
def test_per_row_loss_brute_force(rows):
    s = np.array([r[0] for r in rows], dtype=float)
    z = np.array([r[1] for r in rows], dtype=float)
    w = np.array([r[2] for r in rows])
    if w.sum() == 0:
        w[0] = 1.0
    df = pd.DataFrame({"score": s, "z": z, "w": w})
    res = distcal.optimal_threshold(df, loss_col="z", weight_col="w")
    t, c = brute_force(s[w > 0], None, w[w > 0], z=z[w > 0])
    assert res.cost == pytest.approx(c, abs=1e-9)
    assert res.threshold == t


def test_paper_example():
    pairs = [(1, 1), (8, -2), (5, 3), (4, -4), (6, 5), (3, -6), (7, 7), (2, -8)]
    df = pd.DataFrame(pairs, columns=["score", "z"])
    res = distcal.optimal_threshold(df, loss_col="z")
    assert res.threshold == 2 and res.cost == -5
    assert math.isnan(res.tp)  # no labels with a per-row loss


def test_nothing_positive_gives_inf():
    df = pd.DataFrame({"score": [0.1, 0.5, 0.9], "label": [0, 0, 0]})
    res = distcal.optimal_threshold(df)
    assert res.threshold == math.inf and res.cost == 0 and res.n_positive_predicted == 0


def test_everything_positive():
    df = pd.DataFrame({"score": [0.1, 0.5, 0.9], "label": [1, 1, 1]})
    res = distcal.optimal_threshold(df)
    assert res.threshold == 0.1 and res.cost == 0 and res.tp == 3


@pytest.mark.parametrize("cost_fp,cost_fn", [(1, 1), (1, 4), (4, 1), (2, 3)])
def test_cross_check_with_isotonic(cost_fp, cost_fn):
    """Thresholding the isotonic fit at c_fp / (c_fp + c_fn) reaches the optimal cost."""
    rng = np.random.default_rng(cost_fp * 10 + cost_fn)
    n = 5000
    s = np.round(rng.random(n), 3)
    y = (rng.random(n) < s**2).astype(float)
    w = rng.uniform(0.5, 2, n)
    df = pd.DataFrame({"score": s, "label": y, "w": w})
    res = distcal.optimal_threshold(df, weight_col="w", cost_fp=cost_fp, cost_fn=cost_fn)
    model = distcal.fit(df, weight_col="w", interpolation="step")
    pos = model.predict(s) >= cost_fp / (cost_fp + cost_fn)
    iso_cost = cost_fp * np.sum(w[pos] * (1 - y[pos])) + cost_fn * np.sum(w[~pos] * y[~pos])
    assert res.cost == pytest.approx(iso_cost, rel=1e-12)
