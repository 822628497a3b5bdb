"""Invariants of the isotonic fit (hypothesis), checked against brute force."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

import distcal
from distcal.core.distinct import merge_tables, pool_ties
from distcal.core.isotonic import merge_blocks, pav_blocks

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def datasets(draw, min_size=1, max_size=60):
    n = draw(st.integers(min_size, max_size))
    grid = draw(st.sampled_from([3, 10, 1000]))  # few distinct values -> many ties
    scores = draw(st.lists(st.integers(-grid, grid), min_size=n, max_size=n))
    labels = draw(st.lists(st.sampled_from([0.0, 1.0, 0.25]), min_size=n, max_size=n))
    weights = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=n, max_size=n))
    if sum(weights) == 0:
        weights[0] = 1.0
    return pd.DataFrame({"score": np.array(scores, dtype=float) / grid,
                         "label": labels, "w": weights})


def blocks_equal(a, b):
    assert len(a) == len(b)
    for col in ("score_min", "score_max"):
        np.testing.assert_array_equal(a[col], b[col])
    for col in ("prob", "weight", "positives"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-12, atol=1e-12)


@SETTINGS
@given(datasets())
def test_monotone_and_block_means(df):
    model = distcal.fit(df, weight_col="w")
    b = model.blocks
    assert np.all(np.diff(b["prob"]) > 0)  # increasing, equal neighbours merged
    live = df[df.w > 0]
    for row in b.itertuples():
        inside = live[(live.score >= row.score_min) & (live.score <= row.score_max)]
        assert len(inside) > 0
        np.testing.assert_allclose(row.prob, (inside.w * inside.label).sum() / inside.w.sum(),
                                   rtol=1e-12)
    q = np.sort(np.concatenate([df.score.to_numpy(), np.linspace(-1.1, 1.1, 50)]))
    assert np.all(np.diff(model.predict(q)) >= 0)


@SETTINGS
@given(datasets())
def test_equals_sklearn(df):
    live = df[df.w > 0]
    ir = IsotonicRegression(out_of_bounds="clip").fit(live.score, live.label,
                                                      sample_weight=live.w)
    q = np.linspace(-1.1, 1.1, 221)
    np.testing.assert_allclose(distcal.fit(df, weight_col="w").predict(q), ir.predict(q),
                               atol=1e-12)


@SETTINGS
@given(datasets(min_size=2), st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=4))
def test_range_split_then_merge_equals_one_fit(df, cuts):
    """Fit contiguous score ranges separately, merge their blocks: same model."""
    live = df[df.w > 0]
    whole = pav_blocks(pool_ties(live.score.to_numpy(), live.label.to_numpy(),
                                 live.w.to_numpy()))
    edges = [-np.inf] + sorted(set(cuts)) + [np.inf]
    parts = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        part = live[(live.score >= lo) & (live.score < hi)]
        if len(part):
            parts.append(pav_blocks(pool_ties(part.score.to_numpy(), part.label.to_numpy(),
                                              part.w.to_numpy())))
    merged = merge_blocks(parts)
    to_df = distcal.CalibrationModel
    blocks_equal(to_df("isotonic", {}, merged).blocks, to_df("isotonic", {}, whole).blocks)


@SETTINGS
@given(datasets(), st.randoms(use_true_random=False))
def test_row_order_does_not_matter(df, rnd):
    perm = list(range(len(df)))
    rnd.shuffle(perm)
    a = distcal.fit(df, weight_col="w")
    b = distcal.fit(df.iloc[perm].reset_index(drop=True), weight_col="w")
    blocks_equal(a.blocks, b.blocks)


@SETTINGS
@given(datasets(), st.lists(st.integers(0, 60), max_size=5))
def test_distinct_tables_merge_in_any_split(df, cuts):
    """Pooling arbitrary row chunks and merging equals pooling everything."""
    live = df[df.w > 0]
    s, y, w = live.score.to_numpy(), live.label.to_numpy(), live.w.to_numpy()
    bounds = [0] + sorted(c for c in cuts if c < len(s)) + [len(s)]
    parts = [pool_ties(s[a:b], y[a:b], w[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    merged, whole = merge_tables(parts), pool_ties(s, y, w)
    np.testing.assert_array_equal(merged.score, whole.score)
    for f in ("weight", "positives", "label_sum"):
        np.testing.assert_allclose(getattr(merged, f), getattr(whole, f), rtol=1e-12)
    np.testing.assert_array_equal(merged.count, whole.count)


@SETTINGS
@given(datasets())
def test_pooling_paths_agree(df):
    s = df.score.to_numpy()
    y = np.round(df.label.to_numpy())  # 0/1 labels so every path applies
    ref = pool_ties(s, y, None, path="argsort")
    paths = ["hash", "split"] + (["key"] if s.min() >= 0 else [])
    for path in paths:
        t = pool_ties(s, y, None, path=path)
        np.testing.assert_array_equal(t.score, ref.score)
        np.testing.assert_array_equal(t.weight, ref.weight)
        np.testing.assert_array_equal(t.positives, ref.positives)
        np.testing.assert_array_equal(t.count, ref.count)
    w = df.w.to_numpy() + 0.5
    a, b = pool_ties(s, y, w, path="hash"), pool_ties(s, y, w, path="argsort")
    np.testing.assert_array_equal(a.score, b.score)
    np.testing.assert_allclose(a.weight, b.weight, rtol=1e-12)
    np.testing.assert_allclose(a.positives, b.positives, rtol=1e-12)


@SETTINGS
@given(datasets(), st.sampled_from([None, "hash", "argsort"]), st.booleans())
def test_pooling_other_label_sums_equals_pandas_groupby(df, path, weighted):
    """``label_sums`` (a per-row loss's |w z|) summed per score on its own, beside the
    weights and weighted labels; the oracle is pandas' groupby. Losses of either sign."""
    df = df[df.w > 0].assign(z=lambda d: d.label - 0.5, mag=lambda d: d.w * (d.label - 0.5).abs())
    w = df.w.to_numpy() if weighted else None
    t = pool_ties(df.score.to_numpy(), df.z.to_numpy(), w, path=path,
                  label_sums=df.mag.to_numpy() if weighted else df.z.abs().to_numpy())
    g = (df.assign(w=df.w if weighted else 1.0).assign(wz=lambda d: d.w * d.z,
                                                         mag=lambda d: d.w * d.z.abs())
         .groupby("score").agg(w=("w", "sum"), wz=("wz", "sum"), n=("z", "size"),
                               mag=("mag", "sum")))
    np.testing.assert_array_equal(t.score, g.index.to_numpy())
    np.testing.assert_array_equal(t.count, g.n.to_numpy())
    for got, want in ((t.weight, g.w), (t.positives, g.wz), (t.label_sum, g.mag)):
        np.testing.assert_allclose(got, want.to_numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("labels", ["mixed", "all positive", "all negative"])
def test_split_pooling_matches_argsort(labels):
    """The split path (positives and negatives sorted apart, then merged): -0.0 and 0.0
    one score, ties across the labels, infinities, and a label class that is empty."""
    rng = np.random.default_rng(5)
    s = np.concatenate([np.round(rng.normal(size=5000), 2), rng.normal(size=5000),
                        [-0.0, 0.0, -0.0, np.inf, -np.inf, np.inf]])
    y = {"mixed": (rng.random(s.shape[0]) < 0.3).astype(float),
         "all positive": np.ones(s.shape[0]), "all negative": np.zeros(s.shape[0])}[labels]
    ref, got = pool_ties(s, y, path="argsort"), pool_ties(s, y, path="split")
    for f in ("score", "weight", "positives", "count", "label_sum"):
        a, b = getattr(got, f), getattr(ref, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert not np.signbit(got.score[got.score == 0]).any()


@pytest.mark.slow
def test_large_pooling_paths_agree():
    """The threaded hash path and the key path on inputs past their size cut-offs."""
    rng = np.random.default_rng(0)
    n = 3_000_000
    s = np.round(rng.random(n), 4)
    s[:10] = [0.0, -0.0, 0.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]
    y = (rng.random(n) < s).astype(float)
    w = rng.random(n) + 0.1
    ref = pool_ties(s, y, w, path="argsort")
    got = pool_ties(s, y, w, path="hash")
    np.testing.assert_array_equal(got.score, ref.score)
    np.testing.assert_allclose(got.weight, ref.weight, rtol=1e-9)
    np.testing.assert_allclose(got.positives, ref.positives, rtol=1e-9)
    np.testing.assert_array_equal(got.count, ref.count)
    key = pool_ties(s, y, None, path="key")
    ref1 = pool_ties(s, y, None, path="argsort")
    np.testing.assert_array_equal(key.score, ref1.score)
    np.testing.assert_array_equal(key.positives, ref1.positives)
    assert key.score[0] == 0.0 and key.count[0] == ref1.count[0]
