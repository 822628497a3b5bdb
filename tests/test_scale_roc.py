"""evaluate(roc_points=...): a bounded ROC of exact points, the hull whole, the AUC exact.

The reference is the same data evaluated with ``roc_points=None`` (every
point, one per distinct probability), on one range and on many (a spilled
store gives the local engine several ranges, as a cluster has).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import distcal
from distcal.core.metrics import roc_hull

SPILL = {"memory_rows": 3_000, "batch_rows": 5_000, "chunk_rows": 5_000}


def frame(n: int, decimals: int | None, seed: int = 0, weighted: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = rng.beta(2.0, 5.0, n)
    if decimals is not None:
        p = np.round(p, decimals)
    df = pd.DataFrame({"prob": p, "label": (rng.random(n) < p).astype(int)})
    if weighted:
        df["w"] = rng.uniform(0.5, 2.0, n)
    return df


def check_sampled(full: distcal.EvaluationReport, rep: distcal.EvaluationReport,
                  roc_points: int) -> None:
    f, r = full.roc, rep.roc
    assert full.roc_complete and len(f) == full.n_distinct + 1
    # every returned point lies on the exact curve, at its own threshold
    at = {t: (x, y) for t, x, y in zip(f["threshold"], f["fpr"], f["tpr"])}
    for t, x, y in zip(r["threshold"], r["fpr"], r["tpr"]):
        fx, fy = at[t]
        assert abs(fx - x) <= 1e-12 and abs(fy - y) <= 1e-12
    # thresholds strictly descending from +inf, both ends there
    thr = r["threshold"].to_numpy()
    assert thr[0] == np.inf and np.all(np.diff(thr) < 0)
    assert (r["fpr"].iloc[0], r["tpr"].iloc[0]) == (0.0, 0.0)
    assert thr[-1] == f["threshold"].iloc[-1]
    assert abs(r["fpr"].iloc[-1] - 1) < 1e-12 and abs(r["tpr"].iloc[-1] - 1) < 1e-12
    # every hull vertex is a returned point, and the hull is the full one
    got = set(zip(np.round(r["fpr"], 12), np.round(r["tpr"], 12)))
    hull = full.roc_hull
    assert set(zip(np.round(hull["fpr"], 12), np.round(hull["tpr"], 12))) <= got
    assert rep.roc_hull.shape == hull.shape
    np.testing.assert_allclose(rep.roc_hull.to_numpy(), hull.to_numpy(), rtol=0, atol=1e-12)
    assert len(r) <= max(roc_points, len(hull))
    # the exact numbers do not depend on the ROC's size
    assert rep.auc == full.auc and rep.brier == full.brier
    assert rep.n_distinct == full.n_distinct


@pytest.mark.parametrize("decimals", [None, 5, 3])
@pytest.mark.parametrize("opts", [{}, SPILL], ids=["one range", "spilled ranges"])
def test_sampled_roc_is_exact_points_hull_and_ends(decimals, opts):
    df = frame(60_000, decimals)
    full = distcal.evaluate(df, roc_points=None, **opts)
    for k in (len(full.roc_hull) + 2, 200, 1000):
        rep = distcal.evaluate(df, roc_points=k, **opts)
        check_sampled(full, rep, k)
        assert len(rep.roc) <= k
        if full.n_distinct + 1 <= k:
            assert rep.roc_complete
            pd.testing.assert_frame_equal(rep.roc, full.roc, check_exact=False, rtol=1e-12)
        else:
            assert not rep.roc_complete
            assert len(rep.roc) >= min(k, full.n_distinct + 1) - len(full.roc_hull)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("opts", [{}, SPILL], ids=["one range", "spilled ranges"])
def test_sampled_roc_with_float_weights_ends_exactly_at_one(seed, opts):
    """With float weights the sampled curve still ends at (1, 1) exactly and stays within it.

    As scikit-learn's roc_curve (tps / tps[-1]); summing the ranges' totals
    apart from their cumulative sums left ends like 0.9999999999999921 and
    points at 1.0000000000000064.
    """
    df = frame(60_000, None, seed=seed, weighted=True)
    rep = distcal.evaluate(df, weight_col="w", roc_points=300, **opts)
    assert not rep.roc_complete
    fpr, tpr = rep.roc["fpr"].to_numpy(), rep.roc["tpr"].to_numpy()
    assert (fpr[-1], tpr[-1]) == (1.0, 1.0) and fpr.max() == tpr.max() == 1.0
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    hull = rep.roc_hull
    assert (hull["fpr"].iloc[-1], hull["tpr"].iloc[-1]) == (1.0, 1.0)
    full = distcal.evaluate(df, weight_col="w", roc_points=None, **opts)
    np.testing.assert_allclose(rep.roc_hull.to_numpy(), full.roc_hull.to_numpy(), rtol=0,
                               atol=1e-12)


def test_points_are_spread_evenly_in_rank():
    df = frame(50_000, None, seed=3)
    full = distcal.evaluate(df, roc_points=None, **SPILL)
    rep = distcal.evaluate(df, roc_points=500, **SPILL)
    rank = {t: i for i, t in enumerate(full.roc["threshold"])}
    ranks = np.array([rank[t] for t in rep.roc["threshold"]])
    gaps = np.diff(ranks)
    step = full.n_distinct / (500 - len(full.roc_hull) + 1)
    assert gaps.max() <= np.ceil(step) + 1


def test_default_is_1000_and_weights_and_evaluate_many():
    df = frame(30_000, None, seed=4, weighted=True)
    full = distcal.evaluate(df, weight_col="w", roc_points=None)
    rep = distcal.evaluate(df, weight_col="w")
    assert len(rep.roc) <= 1000 and not rep.roc_complete
    check_sampled(full, rep, 1000)
    df["other"] = np.round(df["prob"], 2)
    many = distcal.evaluate_many(df, ["prob", "other"], weight_col="w", roc_points=300)
    check_sampled(full, many["prob"], 300)
    assert many["other"].roc_complete and len(many["other"].roc) == many["other"].n_distinct + 1


def test_best_cost_and_report_metrics_survive_sampling():
    from distcal.core import calibration_metrics as cm

    df = frame(40_000, None, seed=5)
    full = distcal.evaluate(df, roc_points=None)
    rep = distcal.evaluate(df, roc_points=50)
    for c_fp, c_fn in ((1, 1), (1, 5), (3, 1)):
        a, b = cm.cost_curve(full, c_fp, c_fn), cm.cost_curve(rep, c_fp, c_fn)
        assert b["best_threshold"] == a["best_threshold"]
        assert abs(b["best_cost"] - a["best_cost"]) <= 1e-9 * max(1, a["best_cost"])
    ea, eb = cm.metrics_from_report(full), cm.metrics_from_report(rep)
    for k in ("reliability", "resolution", "uncertainty", "n_distinct"):
        assert abs(ea[k] - eb[k]) <= 1e-12, k


def test_degenerate_and_bad_values():
    df = pd.DataFrame({"prob": np.linspace(0, 1, 5000), "label": 1})
    rep = distcal.evaluate(df, roc_points=10)
    assert len(rep.roc) <= 10 and rep.roc["threshold"].iloc[0] == np.inf
    for bad in (1, 0, 2.5, True, "10"):
        with pytest.raises(ValueError, match="roc_points"):
            distcal.evaluate(df, roc_points=bad)


def test_roc_hull_unchanged():
    rng = np.random.default_rng(6)
    pos, neg = rng.integers(0, 4, 1000).astype(float), rng.integers(0, 4, 1000).astype(float)
    keep = pos + neg > 0
    pos, neg = pos[keep], neg[keep]
    x, y = roc_hull(pos, neg)
    # brute force upper hull of the curve
    fx = np.concatenate(([0.0], np.cumsum(neg[::-1]))) / neg.sum()
    fy = np.concatenate(([0.0], np.cumsum(pos[::-1]))) / pos.sum()
    for i in range(len(x) - 1):
        slope = (y[i + 1] - y[i]) / (x[i + 1] - x[i]) if x[i + 1] > x[i] else np.inf
        if np.isfinite(slope):
            assert np.all(fy <= y[i] + slope * (fx - x[i]) + 1e-12)
