"""Evaluation metrics against scikit-learn and textbook worked examples."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import calibration_curve
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score, roc_curve

import distcal
from distcal.metrics import classification_cost, compare_error_rates, wilson_interval


@pytest.fixture(params=[False, True], ids=["unit", "weighted"])
def probs(request):
    rng = np.random.default_rng(4)
    n = 20000
    p = np.round(rng.beta(2, 2, n), 3)
    p[:5] = [0.0, 1.0, 0.0, 1.0, 0.5]
    y = (rng.random(n) < p).astype(int)
    w = rng.uniform(0.1, 3.0, n) if request.param else None
    df = pd.DataFrame({"prob": p, "label": y})
    if w is not None:
        df["w"] = w
    return df, p, y, w


def test_against_sklearn(probs):
    df, p, y, w = probs
    rep = distcal.evaluate(df, weight_col=None if w is None else "w")
    assert rep.brier == pytest.approx(brier_score_loss(y, p, sample_weight=w), rel=1e-9)
    assert rep.log_loss == pytest.approx(log_loss(y, p, sample_weight=w), rel=1e-9)
    assert rep.auc == pytest.approx(roc_auc_score(y, p, sample_weight=w), rel=1e-9)
    fpr, tpr, thr = roc_curve(y, p, sample_weight=w, drop_intermediate=False)
    np.testing.assert_allclose(rep.roc["fpr"], fpr, atol=1e-9)
    np.testing.assert_allclose(rep.roc["tpr"], tpr, atol=1e-9)
    np.testing.assert_array_equal(rep.roc["threshold"], thr)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_calibration_curve_unweighted(strategy):
    rng = np.random.default_rng(3)
    p = np.round(rng.beta(2, 2, 20000), 3)
    y = (rng.random(20000) < p).astype(int)
    rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y}), n_bins=7, strategy=strategy)
    pt, pp = calibration_curve(y, p, n_bins=7, strategy=strategy)
    np.testing.assert_allclose(rep.calibration_curve["prob_true"], pt, atol=1e-9)
    np.testing.assert_allclose(rep.calibration_curve["prob_pred"], pp, atol=1e-9)


def test_quantile_edges_on_values_are_numpys_to_the_last_bit(engine):
    """With n = 6k + 1 rows every edge of 6 quantile bins lies on a value, where
    np.percentile's rounding decides its bin: the same edges, bit for bit, so the
    calibration curve and the histogram map bin every row as scikit-learn does (the
    quantile positions fall inside and between the engines' ranges)."""
    rng = np.random.default_rng(11)
    for n in (601, 607, 1201):
        p = rng.random(n)
        y = (rng.random(n) < p).astype(int)
        edges = np.percentile(p, np.linspace(0, 1, 7) * 100)
        rep = distcal.evaluate(engine(pd.DataFrame({"prob": p, "label": y})), n_bins=6,
                               strategy="quantile", **engine.opts)
        np.testing.assert_array_equal(rep.bin_edges, edges)
        pt, pp = calibration_curve(y, p, n_bins=6, strategy="quantile")
        np.testing.assert_allclose(rep.calibration_curve["prob_true"], pt, atol=1e-12)
        model = distcal.fit(engine(pd.DataFrame({"score": p, "label": y})),
                            method="histogram", n_bins=6, strategy="quantile", **engine.opts)
        np.testing.assert_array_equal(model.params["edges"], edges)
        ids = np.searchsorted(edges[1:-1], p)
        rate = np.bincount(ids, y, 6) / np.bincount(ids, None, 6)
        np.testing.assert_allclose(model.predict(p), rate[ids], atol=1e-12)


def test_calibration_curve_weighted_equals_repeated_rows():
    rng = np.random.default_rng(5)
    p = np.round(rng.random(3000), 2)
    y = (rng.random(3000) < p).astype(int)
    k = rng.integers(1, 4, 3000)
    a = distcal.evaluate(pd.DataFrame({"prob": p, "label": y, "w": k.astype(float)}),
                         weight_col="w", strategy="quantile", n_bins=9)
    pt, pp = calibration_curve(np.repeat(y, k), np.repeat(p, k), n_bins=9, strategy="quantile")
    np.testing.assert_allclose(a.calibration_curve["prob_true"], pt, atol=1e-9)
    np.testing.assert_allclose(a.calibration_curve["prob_pred"], pp, atol=1e-9)


def test_brier_decomposition_with_bin_forecasts():
    rng = np.random.default_rng(6)
    p = rng.choice([0.05, 0.15, 0.35, 0.65, 0.95], 10000)  # forecasts take one value per bin
    y = (rng.random(10000) < p * 0.9).astype(int)
    rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y}), n_bins=10)
    assert rep.brier == pytest.approx(rep.reliability - rep.resolution + rep.uncertainty,
                                      rel=1e-12)


def test_ece_mce_by_hand():
    p = np.array([0.1, 0.1, 0.3, 0.3, 0.9, 0.9, 0.9, 0.9])
    y = np.array([0, 1, 0, 0, 1, 1, 1, 0])
    rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y}), n_bins=5)
    gaps = np.array([abs(0.5 - 0.1), abs(0.0 - 0.3), abs(0.75 - 0.9)])
    shares = np.array([2, 2, 4]) / 8
    assert rep.ece == pytest.approx(float(np.sum(gaps * shares)), rel=1e-12)
    assert rep.mce == pytest.approx(0.4, rel=1e-12)


@pytest.mark.parametrize("n,lo,hi", [(50, 0.670, 0.888), (100, 0.711, 0.866),
                                     (500, 0.763, 0.833), (1000, 0.774, 0.824),
                                     (5000, 0.789, 0.811)])
def test_wilson_textbook(n, lo, hi):
    got = wilson_interval(0.8 * n, n)
    assert got[0] == pytest.approx(lo, abs=1.5e-3) and got[1] == pytest.approx(hi, abs=1.5e-3)


@pytest.mark.parametrize("n", [1e-300, 1e-200, 1e-160, 0.3, 50.0, 1e12, 1e300])
def test_wilson_interval_of_any_weight_total_is_wilsons_formula(n):
    """Weights of any scale (a weighted accuracy's n is the total weight): the interval
    is Wilson's formula computed in 700-digit decimals, never a ZeroDivisionError from
    n^2 underflowing."""
    from decimal import Decimal, getcontext

    from scipy.stats import norm

    getcontext().prec = 700  # centre - half cancels ~300 digits at n = 1e-300
    z, nn, p = Decimal(float(norm.ppf(0.975))), Decimal(n), Decimal(0.8)
    denom = 1 + z * z / nn
    centre = (p + z * z / (2 * nn)) / denom
    half = z * (p * (1 - p) / nn + z * z / (4 * nn * nn)).sqrt() / denom
    got = wilson_interval(0.8 * n, n)
    assert got[0] == pytest.approx(float(max(centre - half, Decimal(0))), rel=1e-12, abs=1e-300)
    assert got[1] == pytest.approx(float(min(centre + half, Decimal(1))), rel=1e-12)


def test_evaluate_of_tiny_weights_is_the_evaluation_of_unit_weights():
    """Down to a mean weight of 2^-500 (~3e-151) every metric is that of unit weights;
    below, products of two weights (AUC's pairs, Spiegelhalter's w^2) underflow: a
    DataError (AUC was 0.0 and z -inf at weights 1e-170)."""
    rng = np.random.default_rng(3)
    s = rng.random(500)
    df = pd.DataFrame({"prob": s, "label": (rng.random(500) < s).astype(int), "w": 1e-140})
    tiny, unit = distcal.evaluate(df, weight_col="w"), distcal.evaluate(df.drop(columns="w"))
    for name in ("ece", "mce", "brier", "log_loss", "accuracy", "auc", "spiegelhalter_z",
                 "citl_low", "citl_high", "smece", "smece_sigma"):
        assert getattr(tiny, name) == pytest.approx(getattr(unit, name), rel=1e-9), name
    for part in ("mu", "density"):  # the smoothed curve too (smECE was ~1e-135)
        np.testing.assert_allclose(tiny.smooth_curve[part], unit.smooth_curve[part], rtol=1e-9)
    for w in (1e-170, 1e-200, 5e-324):
        with pytest.raises(distcal.DataError, match="too small: products of two of them"):
            distcal.evaluate(df.assign(w=w), weight_col="w")
        with pytest.raises(distcal.DataError, match="too small"):
            distcal.evaluate(df.assign(w=w, g=1), weight_col="w", by="g")


def test_uncertainty_of_labels_that_are_rates_is_their_variance():
    """Murphy's uncertainty is the weighted variance of the labels; ybar (1 - ybar) only for
    0/1 labels (it was that for rates too, and brier != rel - res + unc)."""
    rng = np.random.default_rng(5)
    p, y, w = np.round(rng.random(3000), 2), rng.random(3000), rng.uniform(0.5, 2, 3000)
    rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y, "w": w}), weight_col="w")
    ybar = np.average(y, weights=w)
    assert rep.uncertainty == pytest.approx(np.average((y - ybar) ** 2, weights=w), rel=1e-9)
    assert rep.brier == pytest.approx(rep.reliability_exact - rep.resolution_exact
                                      + rep.uncertainty, rel=1e-9)


def test_compare_error_rates_textbook():
    d, lo, hi = compare_error_rates(0.15, 30, 0.25, 5000)
    assert d == pytest.approx(0.1)
    assert lo < 0 < hi  # not significantly different at 95%


def test_cost_matrix_textbook():
    costs = {"tp": -1, "fn": 100, "fp": 1, "tn": 0}
    assert classification_cost({"tp": 150, "fn": 40, "fp": 60, "tn": 250}, costs) == 3910
    assert classification_cost({"tp": 250, "fn": 45, "fp": 5, "tn": 200}, costs) == 4255


def test_roc_steps_diagonally_across_ties():
    # three tied scores holding 1 positive and 2 negatives: one diagonal step
    df = pd.DataFrame({"prob": [0.9, 0.5, 0.5, 0.5, 0.1], "label": [1, 1, 0, 0, 0]})
    rep = distcal.evaluate(df)
    np.testing.assert_allclose(rep.roc["fpr"], [0, 0, 2 / 3, 1])
    np.testing.assert_allclose(rep.roc["tpr"], [0, 0.5, 1, 1])
    assert rep.auc == pytest.approx(roc_auc_score(df.label, df.prob))


def monotone_chain_upper_hull(fpr, tpr):
    """Andrew's monotone chain (upper hull), brute force oracle for the ROC hull."""
    pts = sorted(set(zip([0.0, *fpr, 1.0], [0.0, *tpr, 1.0])))
    hull = []
    for x, y in pts:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append((x, y))
    return np.array(hull)


@pytest.mark.parametrize("seed", range(6))
def test_roc_hull_equals_monotone_chain(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    p = np.round(rng.random(n), int(rng.integers(1, 3)))  # ties and collinear runs
    y = (rng.random(n) < p).astype(int)
    if y.min() == y.max():
        y[0] = 1 - y[0]
    w = rng.choice([0.5, 1.0, 2.0], n)
    rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y, "w": w}), weight_col="w")
    expect = monotone_chain_upper_hull(rep.roc["fpr"].to_numpy(), rep.roc["tpr"].to_numpy())
    got = rep.roc_hull[["fpr", "tpr"]].to_numpy()
    np.testing.assert_allclose(got, expect, atol=1e-12)


def test_roc_hull_is_convex_and_dominates():
    rng = np.random.default_rng(7)
    p = rng.random(500)
    y = (rng.random(500) < p).astype(int)
    rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y}))
    hx, hy = rep.roc_hull["fpr"].to_numpy(), rep.roc_hull["tpr"].to_numpy()
    assert (hx[0], hy[0]) == (0, 0) and (hx[-1], hy[-1]) == (1, 1)
    with np.errstate(divide="ignore"):
        slopes = np.diff(hy) / np.diff(hx)  # a first vertical edge has slope +inf
    assert np.all(np.diff(slopes) < 0)  # strictly concave chain
    assert np.all(np.interp(rep.roc["fpr"], hx, hy) >= rep.roc["tpr"] - 1e-12)


def _orders(engine, df):
    """The rows in two orders as the engine's input; locally also frames in memory, and
    streamed three rows at a time."""
    orders = [df, df.iloc[::-1].reset_index(drop=True)]
    inputs = [(engine(order), engine.opts) for order in orders]
    if engine.name == "local":
        inputs += [(order, opts) for order in orders
                   for opts in ({}, {"memory_rows": 3, "batch_rows": 3})]
    return inputs


@pytest.mark.parametrize("roc_points", [None, 1000])
def test_roc_hull_of_weights_in_tenths_does_not_depend_on_row_order(engine, roc_points):
    # Probabilities 0.2 and 0.4 both have a positive rate of 1/6 in exact arithmetic: their
    # ROC points are collinear, one hull edge. The sums of weights in tenths differ in their
    # last bits by order; the oracle is the evaluation of the weights times 10 (whole
    # numbers: exact sums), which has the same hull.
    df = pd.DataFrame({"prob": [0.1, 0.2, 0.2, 0.2, 0.4, 0.4, 0.8],
                       "label": [0, 1, 0, 0, 1, 0, 1],
                       "w": [1.0, 0.1, 0.2, 0.3, 0.1, 0.5, 1.0]})
    whole = distcal.evaluate(df.assign(w=df["w"] * 10), weight_col="w",
                             roc_points=roc_points).roc_hull
    assert len(whole) == 4
    for data, opts in _orders(engine, df):
        hull = distcal.evaluate(data, weight_col="w", roc_points=roc_points, **opts).roc_hull
        np.testing.assert_allclose(hull[["fpr", "tpr"]], whole[["fpr", "tpr"]], rtol=0,
                                   atol=1e-12)


def test_segments_of_equal_ece_keep_key_order(engine):
    # Segments a and b hold the same rows (b's in reverse): their ECE is equal in exact
    # arithmetic and differs in the last bits by the order of the sums.
    base = pd.DataFrame({
        "prob": [0.9, 0.8, 0.2, 0.3, 0.9, 0.0, 0.8, 0.8, 0.5, 0.3, 0.3, 0.3, 0.4, 0.5],
        "label": [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 1],
        "w": [0.1, 0.7, 0.3, 0.1, 0.1, 0.2, 0.1, 0.1, 0.3, 0.7, 0.2, 0.7, 0.7, 0.7]})
    df = pd.concat([base.assign(seg="a"), base.iloc[::-1].assign(seg="b")], ignore_index=True)
    for data, opts in _orders(engine, df):
        report = distcal.evaluate(data, weight_col="w", by="seg", **opts)
        assert list(report.segments["seg"]) == ["a", "b"]
        assert report.segments["ece"].iloc[0] == pytest.approx(0.326, rel=1e-12)


@pytest.mark.parametrize("label", [0, 1])
def test_roc_and_hull_of_one_class_have_no_rate_of_the_other(label):
    # With one class only the other class's rate is 0/0: NaN on the curve and on its
    # hull alike (scikit-learn's roc_curve gives NaN there too), not an invented diagonal.
    df = pd.DataFrame({"prob": [0.2, 0.6, 0.9], "label": [label] * 3})
    with pytest.warns(UndefinedMetricWarning):
        fpr, tpr, _ = roc_curve(df.label, df.prob, drop_intermediate=False)
    for roc_points in (1000, None):  # the sampled curve's plan, the whole curve's
        rep = distcal.evaluate(df, roc_points=roc_points)
        for got, want in ((rep.roc["fpr"], fpr), (rep.roc["tpr"], tpr)):
            assert np.isnan(got).all() == np.isnan(want).all()
        hull = rep.roc_hull
        missing, known = ("fpr", "tpr") if label == 1 else ("tpr", "fpr")
        assert np.isnan(hull[missing]).all() and hull[known].tolist() == [0.0, 1.0]


def test_confusion_and_accuracy():
    df = pd.DataFrame({"prob": [0.2, 0.6, 0.5, 0.9, 0.4], "label": [0, 1, 0, 0, 1]})
    rep = distcal.evaluate(df, threshold=0.5)
    assert rep.confusion == {"tp": 1.0, "fp": 2.0, "tn": 1.0, "fn": 1.0}
    assert rep.accuracy == pytest.approx(0.4)
    assert rep.accuracy_interval == pytest.approx(wilson_interval(2, 5))
    d = rep.to_dict()
    import json

    json.dumps(d)  # JSON-safe
    assert d["roc"]["threshold"][0] is None  # +inf is not JSON


def test_bad_probabilities():
    df = pd.DataFrame({"prob": [0.2, 1.5, -0.1], "label": [0, 1, 0]})
    with pytest.raises(distcal.DataError, match=r"column 'prob': 2 rows are outside \[0, 1\]"):
        distcal.evaluate(df)


@pytest.mark.slow
def test_report_files(tmp_path):
    from PIL import Image

    from distcal.report import write_report

    rng = np.random.default_rng(8)
    p = rng.random(2000)
    y = (rng.random(2000) < p**2).astype(int)
    df = pd.DataFrame({"raw": p, "cal": p**2, "label": y})
    reps = [distcal.evaluate(df, prob_col=c) for c in ("raw", "cal")]
    write_report(reps, tmp_path / "rep")
    html = (tmp_path / "rep" / "report.html").read_text()
    assert html.count('src="data:image/png;base64,') == 3  # embedded, not linked
    assert 'src="reliability.png"' not in html
    for name in ("reliability.png", "roc.png", "cost.png"):
        img = Image.open(tmp_path / "rep" / name)
        img.load()
        assert img.size[0] >= 600 and img.size[1] >= 400
        px = np.asarray(img.convert("L"))
        assert px.std() > 10  # not blank


def test_evaluate_many_is_evaluate_per_column_on_common_rows():
    rng = np.random.default_rng(9)
    p = rng.random(3000)
    y = (rng.random(3000) < p).astype(int)
    df = pd.DataFrame({"raw": p, "cal": np.sqrt(p), "label": y})
    many = distcal.evaluate_many(df, ["raw", "cal"])
    assert list(many) == ["raw", "cal"]
    for c in ("raw", "cal"):
        one = distcal.evaluate(df, prob_col=c)
        assert many[c].brier == pytest.approx(one.brier, rel=1e-12)
        assert many[c].auc == pytest.approx(one.auc, rel=1e-12)
        pd.testing.assert_frame_equal(many[c].calibration_curve, one.calibration_curve)
    # a row invalid in one column is dropped for all; problems are named per column
    bad = df.copy()
    bad.loc[0, "raw"] = 1.5
    bad.loc[1, "cal"] = np.nan
    with pytest.raises(distcal.DataError) as err:
        distcal.evaluate_many(bad, ["raw", "cal"])
    assert str(err.value).startswith("column 'raw': 1 row is outside [0, 1]; column 'cal': "
                                     "1 row is null or NaN")
    dropped = distcal.evaluate_many(bad, ["raw", "cal"], on_invalid="drop")
    assert dropped["raw"].n_rows == dropped["cal"].n_rows == 2998
    assert dropped["cal"].brier == pytest.approx(
        distcal.evaluate(df.iloc[2:], prob_col="cal").brier, rel=1e-12)


def test_evaluate_many_by_segment_keeps_the_common_rows(engine):
    """With by=, every column is still evaluated on the rows valid in all of them, and
    each report's segments are evaluate(by=)'s of those rows (distcal evaluate --by
    --prob-col a --prob-col b compared the columns on different rows)."""
    rng = np.random.default_rng(10)
    p = rng.random(3000)
    df = pd.DataFrame({"raw": p, "cal": np.sqrt(p), "label": (rng.random(3000) < p) * 1,
                       "g": rng.choice(["x", "y", "z"], 3000)})
    bad = df.assign(cal=np.where(np.arange(3000) < 200, np.nan, df["cal"]))
    many = distcal.evaluate_many(engine(bad), ["raw", "cal"], by="g", on_invalid="drop")
    common = df.iloc[200:]
    for c in ("raw", "cal"):
        one = distcal.evaluate(common, prob_col=c, by="g")
        assert (many[c].n_rows, many[c].dropped_rows) == (2800, 200)
        assert many[c].brier == pytest.approx(one.brier, rel=1e-12)
        pd.testing.assert_frame_equal(many[c].segments, one.segments, rtol=1e-12)
    with pytest.raises(distcal.ParameterError, match="by column 'cal' is also a prob column"):
        distcal.evaluate_many(df, ["raw", "cal"], by="cal")


def test_precision_recall_f1_and_bin_intervals():
    from sklearn.metrics import f1_score, precision_score, recall_score

    rng = np.random.default_rng(12)
    p = rng.random(5000)
    y = (rng.random(5000) < p).astype(int)
    w = rng.uniform(0.5, 2, 5000)
    rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y, "w": w}), weight_col="w",
                           threshold=0.4)
    pred = (p >= 0.4).astype(int)
    assert rep.precision == pytest.approx(precision_score(y, pred, sample_weight=w), rel=1e-12)
    assert rep.recall == pytest.approx(recall_score(y, pred, sample_weight=w), rel=1e-12)
    assert rep.f1 == pytest.approx(f1_score(y, pred, sample_weight=w), rel=1e-12)
    cc = rep.calibration_curve
    for row in cc.itertuples():
        assert (row.ci_low, row.ci_high) == pytest.approx(
            wilson_interval(row.prob_true * row.weight, row.weight))
        assert row.ci_low <= row.prob_true <= row.ci_high


def test_huge_weights_give_the_same_metrics_or_a_data_error(engine):
    """Every metric is unchanged by scaling the weights. Scaled by 1e100 the report is
    the unscaled one (Spiegelhalter's z against numpy on the rows); from ~1e154 on,
    products of two weights (AUC's pairs, the sums of w^2) overflow: a DataError, not
    z = 0 and p = 1 (a miscalibrated model that never alerts) or a NaN AUC."""
    p = np.array([0.1, 0.4, 0.35, 0.8, 0.9, 0.05])
    y = np.array([0, 0, 1, 1, 0, 1])
    w = np.array([1, 2, 1, 3, 1, 2.0])
    z = np.sum(w * (y - p) * (1 - 2 * p)) / np.sqrt(np.sum(w**2 * (1 - 2 * p) ** 2 * p * (1 - p)))
    reports = [distcal.evaluate(engine(pd.DataFrame({"prob": p, "label": y, "w": w * c})),
                                weight_col="w", **engine.opts) for c in (1.0, 1e100)]
    for rep in reports:
        assert rep.spiegelhalter_z == pytest.approx(z, rel=1e-12)
        assert rep.auc == pytest.approx(roc_auc_score(y, p, sample_weight=w), rel=1e-12)
    for name in ("reliability_exact", "citl_low", "citl_high", "brier", "log_loss"):
        assert getattr(reports[1], name) == pytest.approx(getattr(reports[0], name), rel=1e-9)
    for c in (1e160, 1e300):
        with pytest.raises(distcal.DataError, match="overflow float64"):
            distcal.evaluate(engine(pd.DataFrame({"prob": p, "label": y, "w": w * c})),
                             weight_col="w", **engine.opts)


def test_full_roc_hull_ends_at_one_one_exactly():
    """roc_points=None: the hull's last vertex is (1, 1) exactly and no rate exceeds 1,
    as the curve's (weights whose pairwise and running sums round differently)."""
    rng = np.random.default_rng(9)
    for _ in range(17):
        n = int(rng.integers(20, 3000))
        p = np.round(rng.random(n), int(rng.integers(1, 5)))
        y = (rng.random(n) < p**2).astype(int)
        w = rng.random(n) * 2
        rep = distcal.evaluate(pd.DataFrame({"prob": p, "label": y, "w": w}), weight_col="w",
                               roc_points=None)
        assert rep.roc_hull.iloc[-1].tolist() == [1.0, 1.0]
        assert rep.roc.iloc[-1][["fpr", "tpr"]].tolist() == [1.0, 1.0]
        assert rep.roc_hull.to_numpy().max() == 1.0


@pytest.mark.parametrize("bins", [[0.0, np.nan, 1.0], [0.5], [1.0, 0.0], [[0.0, 1.0]],
                                  [-np.inf, 0.5, np.inf], ["a", "b"], [0.0, [0.5, 1.0]]])
def test_explicit_bins_are_checked_before_any_read(tmp_path, bins):
    """Edges with a NaN (which passed the order check: NaN compares false), infinite
    edges (the report could not draw them) and edges that are not numbers are refused
    with the other invalid edges, before the input is read (it does not exist here)."""
    with pytest.raises(distcal.ParameterError, match="bins must be at least two"):
        distcal.evaluate(str(tmp_path / "missing.parquet"), bins=bins)
