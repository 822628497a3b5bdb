"""Exact Murphy decomposition, adaptive ECE, multiclass ECE: against plain numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import brier_score_loss

import distcal
from distcal.core import calibration_metrics as cm
from distcal.core.distinct import pool_ties
from distcal.errors import DataError


def _data(n: int, seed: int, ties: bool = True, weights: bool = False, fractional: bool = False):
    rng = np.random.default_rng(seed)
    f = rng.beta(2.0, 3.0, n)
    y = (rng.random(n) < f ** 1.5).astype(float)
    if ties:
        f = np.round(f, 2)
    if fractional:
        y = np.round(rng.random(n) * 0.5 + 0.5 * y, 3)
    w = rng.uniform(0.1, 3.0, n) if weights else None
    return f, y, w


def _ranges(t, cuts):
    parts = [t.slice(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    return lambda fn: [fn(p) for p in parts]


# -- Murphy --------------------------------------------------------------------

def _murphy_numpy(f, y, w):
    """Direct computation: group rows by distinct probability with numpy."""
    w = np.ones_like(f) if w is None else w
    uniq, inv = np.unique(f, return_inverse=True)
    wp = np.bincount(inv, weights=w)
    yp = np.bincount(inv, weights=w * y) / wp
    total = w.sum()
    ybar = np.sum(w * y) / total
    return {"brier": np.sum(w * (f - y) ** 2) / total,
            "reliability": np.sum(wp * (uniq - yp) ** 2) / total,
            "resolution": np.sum(wp * (yp - ybar) ** 2) / total,
            "uncertainty": np.sum(w * (y - ybar) ** 2) / total}


@pytest.mark.parametrize("ties,weights,fractional", [(True, False, False), (False, False, False),
                                                     (True, True, False), (True, True, True)])
def test_brier_decomposition_exact(ties, weights, fractional) -> None:
    f, y, w = _data(20_000, 3, ties, weights, fractional)
    t = pool_ties(f, y, w)
    sum_wyy = float(np.sum((np.ones_like(y) if w is None else w) * y * y))
    got = cm.combine_murphy([cm.murphy_partials(t)], None if not fractional else sum_wyy)
    # the identity, to 1e-12
    assert got["brier"] == pytest.approx(
        got["reliability"] - got["resolution"] + got["uncertainty"], abs=1e-12)
    want = _murphy_numpy(f, y, w)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-12), k
    if not fractional:
        assert got["uncertainty"] == pytest.approx(y.mean() * (1 - y.mean()) if w is None else
                                                   want["uncertainty"], abs=1e-14)
        assert got["brier"] == pytest.approx(brier_score_loss(y, f, sample_weight=w), abs=1e-12)


def test_murphy_mergeable() -> None:
    f, y, w = _data(5000, 4, weights=True)
    t = pool_ties(f, y, w)
    whole = cm.combine_murphy([cm.murphy_partials(t)])
    mr = _ranges(t, [0, 1, 7, 40, len(t) - 1, len(t)])
    split = cm.combine_murphy(mr(cm.murphy_partials))
    for k in ("brier", "reliability", "resolution", "uncertainty"):
        assert split[k] == pytest.approx(whole[k], abs=1e-13)
    assert split["n_distinct"] == len(t)


def test_reliability_zero_when_calibrated_per_distinct_value() -> None:
    # each distinct p gets exactly a fraction p of positives
    f = np.repeat([0.1, 0.5, 0.8], 10)
    y = np.array([1] + [0] * 9 + [1] * 5 + [0] * 5 + [1] * 8 + [0] * 2, dtype=float)
    got = cm.combine_murphy([cm.murphy_partials(pool_ties(f, y))])
    assert got["reliability"] == pytest.approx(0.0, abs=1e-15)


# -- adaptive ECE ----------------------------------------------------------------

def _adaptive_numpy_split(f, y, n_bins):
    order = np.argsort(f)
    return sum(len(b) / len(f) * abs(y[b].mean() - f[b].mean())
               for b in np.array_split(order, n_bins))


def _adaptive_numpy_overlap(f, y, w, n_bins):
    """Brute force: each row's interval [C_{i-1}, C_i) against each bin's, ties
    sharing the mean label of their probability."""
    w = np.ones_like(f) if w is None else w
    uniq, inv = np.unique(f, return_inverse=True)
    rate = (np.bincount(inv, weights=w * y) / np.bincount(inv, weights=w))[inv]
    order = np.argsort(f, kind="stable")
    fs, ws, rs = f[order], w[order], rate[order]
    hi = np.cumsum(ws)
    lo = hi - ws
    total = hi[-1]
    ece, mce = 0.0, 0.0
    for b in range(n_bins):
        a, c = b * total / n_bins, (b + 1) * total / n_bins
        ov = np.clip(np.minimum(hi, c) - np.maximum(lo, a), 0, None)
        gap = abs(np.sum(ov * rs) - np.sum(ov * fs))
        ece += gap / total
        mce = max(mce, gap / ov.sum())
    return ece, mce


@pytest.mark.parametrize("n,n_bins", [(1000, 10), (3000, 15), (20, 20)])
def test_adaptive_ece_equals_array_split(n, n_bins) -> None:
    f, y, _ = _data(n, 5, ties=False)
    got = cm.adaptive_ece(pool_ties(f, y), n_bins)
    assert got["adaptive_ece"] == pytest.approx(_adaptive_numpy_split(f, y, n_bins), abs=1e-12)
    assert np.allclose(got["adaptive_curve"]["weight"], n / n_bins)


@pytest.mark.parametrize("ties,weights,n_bins", [(True, False, 10), (True, True, 7),
                                                 (False, True, 10), (True, False, 1)])
def test_adaptive_ece_equals_overlap_oracle(ties, weights, n_bins) -> None:
    f, y, w = _data(4001, 6, ties, weights)
    got = cm.adaptive_ece(pool_ties(f, y, w), n_bins)
    ece, mce = _adaptive_numpy_overlap(f, y, w, n_bins)
    assert got["adaptive_ece"] == pytest.approx(ece, abs=1e-12)
    assert got["adaptive_mce"] == pytest.approx(mce, abs=1e-12)
    total = len(f) if w is None else w.sum()
    assert np.allclose(got["adaptive_curve"]["weight"], total / n_bins, rtol=1e-12)


def test_adaptive_ece_mergeable() -> None:
    f, y, w = _data(6000, 7, weights=True)
    t = pool_ties(f, y, w)
    whole = cm.adaptive_ece(t, 12)
    for cuts in ([0, 1, len(t)], [0, 10, 11, 50, len(t)], list(range(0, len(t) + 1, 3)) + [len(t)]):
        split = cm.adaptive_ece(_ranges(t, sorted(set(cuts))), 12)
        assert split["adaptive_ece"] == pytest.approx(whole["adaptive_ece"], abs=1e-12)
        assert split["adaptive_mce"] == pytest.approx(whole["adaptive_mce"], abs=1e-12)


def test_adaptive_ece_one_distinct_value() -> None:
    f = np.full(100, 0.3)
    y = np.r_[np.ones(40), np.zeros(60)]
    got = cm.adaptive_ece(pool_ties(f, y), 10)
    assert got["adaptive_ece"] == pytest.approx(0.1, abs=1e-14)
    with pytest.raises(ValueError):
        cm.adaptive_cuts(1.0, 0)


# -- all together, from ranges and from a report -------------------------------------

def test_extra_metrics_split_equals_whole_and_report() -> None:
    f, y, _ = _data(30_000, 8)
    t = pool_ties(f, y)
    whole = cm.calibration_metrics(t, n_bins=10)
    split = cm.calibration_metrics(_ranges(t, [0, 5, 6, 60, len(t)]), n_bins=10)
    for k in ("brier", "reliability", "resolution", "uncertainty", "adaptive_ece",
              "adaptive_mce", "smece", "smece_sigma"):
        assert split[k] == pytest.approx(whole[k], abs=1e-12), k
    report = distcal.evaluate(pd.DataFrame({"prob": f, "label": y}), n_bins=10)
    assert report.brier == pytest.approx(whole["brier"], abs=1e-12)
    again = cm.metrics_from_report(report)
    for k in ("brier", "reliability", "resolution", "uncertainty", "adaptive_ece", "smece"):
        assert again[k] == pytest.approx(whole[k], abs=1e-12), k


def test_table_from_report_weighted_and_fractional() -> None:
    f, y, w = _data(3000, 9, weights=True, fractional=True)
    report = distcal.evaluate(pd.DataFrame({"prob": f, "label": y, "w": w}), weight_col="w")
    t = cm.table_from_report(report)
    ref = pool_ties(f, y, w)
    assert np.array_equal(t.score, ref.score)
    assert np.allclose(t.weight, ref.weight, rtol=1e-12)
    assert np.allclose(t.positives, ref.positives, rtol=1e-9, atol=1e-9)
    got = cm.metrics_from_report(report)
    assert got["brier"] == pytest.approx(report.brier, abs=1e-12)
    want = _murphy_numpy(f, y, w)
    for k in ("reliability", "resolution", "uncertainty"):
        assert got[k] == pytest.approx(want[k], abs=1e-10), k


# -- multiclass ------------------------------------------------------------------

def _ece_uniform_numpy(conf, correct, n_bins):
    ids = np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], conf)
    return sum(abs(correct[ids == b].sum() - conf[ids == b].sum())
               for b in range(n_bins)) / len(conf)


def test_top_label_and_classwise_ece() -> None:
    rng = np.random.default_rng(10)
    logits = rng.normal(size=(2000, 4)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = np.array([rng.choice(4, p=p ** 1.3 / (p ** 1.3).sum()) for p in probs])
    conf, correct = probs.max(axis=1), (probs.argmax(axis=1) == labels).astype(float)
    df = pd.DataFrame({"p": list(probs), "label": labels})
    assert distcal.evaluate(df, prob_col="p", n_bins=15).ece == pytest.approx(
        _ece_uniform_numpy(conf, correct, 15), abs=1e-12)
    got = distcal.evaluate(df, prob_col="p", n_bins=10)
    per = [_ece_uniform_numpy(probs[:, k], (labels == k).astype(float), 10) for k in range(4)]
    assert got.per_class_ece == pytest.approx(per, abs=1e-12)
    assert got.classwise_ece == pytest.approx(np.mean(per), abs=1e-12)
    # adaptive top-label ECE: the adaptive ECE of the confidence against "argmax is right"
    top = distcal.evaluate(pd.DataFrame({"prob": conf, "label": correct}), n_bins=10)
    assert top.adaptive_ece == pytest.approx(
        _adaptive_numpy_overlap(conf, correct, None, 10)[0], abs=1e-12)
    ragged = df.assign(p=[probs[0, :3]] + list(probs[1:]))  # not an (n, C) array
    with pytest.raises(DataError, match="ragged"):
        distcal.evaluate(ragged, prob_col="p")
