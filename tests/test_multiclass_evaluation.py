"""Multiclass evaluation (local engine) and shared passes, against independent oracles.

Oracles: scikit-learn's log_loss, brier_score_loss and confusion_matrix, a
brute-force top-label ECE in this file, and separate binary fits for the
plans that run many keys in lock step.
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
from distcal.core.sigmoid import fit_sigmoid
from distcal.errors import DataError, ParameterError


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


def test_weights_whose_sums_overflow_are_a_data_error():
    """As for binary probabilities: NaN metrics with every ECE 0.0, and a report that
    could not be drawn, before."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(3), 1000)
    df = pd.DataFrame({"p": list(p), "label": p.argmax(1), "w": 1e306})
    with pytest.raises(DataError, match="too large: their sums overflow"):
        distcal.evaluate(df, prob_col="p", weight_col="w")


@pytest.mark.parametrize("option", [{"strategy": "quantile"}, {"bins": [0, 0.9, 1]},
                                    {"threshold": 0.3}, {"confidence": 0.9},
                                    {"roc_points": 10}])
def test_binary_only_options_are_refused_for_multiclass(option):
    # A multiclass report has uniform bins of n_bins and no threshold, interval or ROC:
    # an option it cannot honour is an error naming it, not silently the default.
    rng = np.random.default_rng(1)
    P = softmax(rng.normal(size=(40, 3)), axis=1)
    cols = pd.DataFrame(P, columns=["a", "b", "c"]).assign(label=np.arange(40) % 3)
    name = next(iter(option))
    with pytest.raises(ParameterError, match=rf"^{name}: binary evaluation only"):
        distcal.evaluate(cols, prob_cols=["a", "b", "c"], **option)
    vectors = pd.DataFrame({"p": list(P), "label": cols.label})
    with pytest.raises(ParameterError, match=rf"^{name}: binary evaluation only"):
        distcal.evaluate(vectors, prob_col="p", **option)
    with pytest.raises(ParameterError, match=rf"^{name}: binary evaluation only"):
        distcal.evaluate_many(cols, [["a", "b", "c"]], **option)
    assert distcal.evaluate(cols, prob_cols=["a", "b", "c"]).ece == \
        distcal.evaluate(cols, prob_cols=["a", "b", "c"], n_bins=10).ece


def _keyed_ranges(tables):
    """Range i of every key, as one keyed table per range (keys (None, c))."""
    from distcal.core.keyed import KeyedTable, merge_keyed

    return [merge_keyed([KeyedTable.single(tables[c][i], (None, c)) for c in tables])
            for i in range(3)]


def test_plans_share_passes_and_equal_separate_fits():
    from distcal.core.histogram import histogram_plan
    from distcal.core.plans import run_plans
    from distcal.core.sigmoid import sigmoid_plan

    rng = np.random.default_rng(1)
    tables = {}
    for c in range(4):
        s = rng.normal(size=300)
        y = (rng.random(300) < 1 / (1 + np.exp(-(c + 1) * s))).astype(float)
        t = pool_ties(s, y)
        tables[c] = [t.slice(0, 100), t.slice(100, 220), t.slice(220, len(t))]
    ranges = _keyed_ranges(tables)
    passes = []

    def map_parts(fn):
        passes.append(fn)
        return [fn(r) for r in ranges]

    def separate(c):
        return lambda fn: [fn(t) for t in tables[c]]

    got = run_plans(lambda key: histogram_plan(5, "quantile"), map_parts)
    assert len(passes) == 3  # quantile edges (2 passes) + bin sums, for all keys at once
    for c in tables:
        expect = fit_histogram(separate(c), 5, "quantile")
        np.testing.assert_array_equal(got[(None, c)][0], expect[0])
        np.testing.assert_array_equal(got[(None, c)][1], expect[1])
    passes.clear()
    got = run_plans(lambda key: sigmoid_plan(), map_parts)
    assert got == {(None, c): fit_sigmoid(separate(c)) for c in tables}
    assert len(passes) < 4 * 10  # the slowest key's passes, not the sum over keys


def test_plans_name_the_key_that_failed():
    from distcal.core.plans import KeyFailed, run_plans

    def plan(key):
        parts = yield lambda t: len(t)
        if sum(parts) > 150:
            raise ValueError("too many rows")
        return sum(parts)

    rng = np.random.default_rng(2)
    tables = {c: [pool_ties(rng.normal(size=n), np.zeros(n)) for n in (40 * (c + 1),) * 3]
              for c in range(3)}
    with pytest.raises(KeyFailed) as failed:
        run_plans(plan, lambda fn: [fn(r) for r in _keyed_ranges(tables)])
    assert failed.value.key in {(None, 1), (None, 2)}
    assert "too many rows" in str(failed.value.error)


# ---------------------------------------------------------------------------
# Per-class reliability curves, evaluate_many and the report
# ---------------------------------------------------------------------------

def _numpy_one_vs_rest_curve(p, hit, w, n_bins):
    """Reliability curve of p against hit: (mean p, frequency of hit, weight) per
    non-empty uniform bin, by an explicit loop over the bins (right-closed inner edges)."""
    edges = np.linspace(0, 1, n_bins + 1)
    out = []
    for b in range(n_bins):
        m = ((p > edges[b]) | (b == 0)) & ((p <= edges[b + 1]) | (b == n_bins - 1))
        if w[m].sum() > 0:
            out.append((np.sum(w[m] * p[m]) / w[m].sum(), np.sum(w[m] * hit[m]) / w[m].sum(),
                        w[m].sum()))
    return np.array(out).reshape(-1, 3)


def _probs(seed, n, k):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    z = rng.normal(size=(n, k))
    z[np.arange(n), y] += 1.0
    return softmax(2.0 * z, axis=1), y, rng.uniform(0.2, 3.0, n)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(3, 7), n_bins=st.integers(1, 12))
def test_class_curves_equal_numpy_and_sklearn(seed, k, n_bins):
    from sklearn.calibration import calibration_curve

    P, y, w = _probs(seed, 200, k)
    weighted = distcal.evaluate(pd.DataFrame({"p": list(P), "label": y, "w": w}),
                                prob_col="p", weight_col="w", n_bins=n_bins)
    plain = distcal.evaluate(pd.DataFrame({"p": list(P), "label": y}), prob_col="p",
                             n_bins=n_bins)
    assert len(weighted.class_curves) == k
    for c in range(k):
        hit = (y == c).astype(float)
        got = weighted.class_curves[c][["prob_pred", "prob_true", "weight"]].to_numpy()
        np.testing.assert_allclose(got, _numpy_one_vs_rest_curve(P[:, c], hit, w, n_bins),
                                   rtol=1e-12, atol=1e-15)
        true, pred = calibration_curve(hit, P[:, c], n_bins=n_bins, strategy="uniform")
        np.testing.assert_allclose(plain.class_curves[c]["prob_true"], true, rtol=1e-12)
        np.testing.assert_allclose(plain.class_curves[c]["prob_pred"], pred, rtol=1e-12)
    top = weighted.top_label_curve[["prob_pred", "prob_true", "weight"]].to_numpy()
    np.testing.assert_allclose(
        top, _numpy_one_vs_rest_curve(P.max(axis=1), (P.argmax(axis=1) == y).astype(float), w,
                                      n_bins), rtol=1e-12, atol=1e-15)


def test_evaluate_many_multiclass_same_rows_as_separate_calls():
    P, y, w = _probs(7, 300, 3)
    Q = softmax(np.log(P) / 2.0, axis=1)  # a softer model
    df = pd.DataFrame({"a": list(P), "label": y, "w": w,
                       **{f"q{j}": Q[:, j] for j in range(3)}})
    reps = distcal.evaluate_many(df, ["a", ["q0", "q1", "q2"]], weight_col="w")
    assert list(reps) == ["a", "q0,q1,q2"]
    assert reps["q0,q1,q2"].prob_cols == ["q0", "q1", "q2"]
    assert reps["a"].log_loss == pytest.approx(log_loss(y, P, sample_weight=w), rel=1e-12)
    assert reps["q0,q1,q2"].log_loss == pytest.approx(log_loss(y, Q, sample_weight=w),
                                                      rel=1e-12)
    one = distcal.evaluate(df, prob_cols=["q0", "q1", "q2"], weight_col="w")
    assert reps["q0,q1,q2"].to_dict() == one.to_dict()
    # a row bad in one prediction only is left out of both reports
    bad = df.copy()
    bad["a"] = [np.array([0.5, 0.7, -0.2]) if i == 5 else v for i, v in enumerate(bad["a"])]
    bad.at[9, "q1"] = np.nan
    with pytest.raises(DataError, match=r"column 'a': 1 row contains values outside \[0, 1\]; "
                                        r"column 'q1': 1 row is null or NaN"):
        distcal.evaluate_many(bad, ["a", ["q0", "q1", "q2"]], weight_col="w")
    dropped = distcal.evaluate_many(bad, ["a", ["q0", "q1", "q2"]], weight_col="w",
                                    on_invalid="drop")
    clean = df.drop(index=[5, 9])
    for r in dropped.values():
        assert r.dropped_rows == 2 and r.n_rows == 298
    assert dropped["a"].brier == pytest.approx(
        brier_score_loss(clean["label"], np.stack(clean["a"]), sample_weight=clean["w"]),
        rel=1e-12)
    assert dropped["q0,q1,q2"].log_loss == pytest.approx(
        log_loss(clean["label"], clean[["q0", "q1", "q2"]], sample_weight=clean["w"]),
        rel=1e-12)
    with pytest.raises(ValueError, match=r"mixes multiclass predictions .* \['w'\]"):
        distcal.evaluate_many(df, ["a", "w"])
    # Two predictions of one name: one report would replace the other.
    named = df.assign(**{"q0,q1": df["q0"], "q1,q2": df["q1"]})
    with pytest.raises(distcal.ParameterError, match=r"\['q0', 'q1,q2'\] and \['q0,q1', 'q2'\] "
                                                   r"are both named 'q0,q1,q2'"):
        distcal.evaluate_many(named, [["q0", "q1,q2"], ["q0,q1", "q2"]])


def _report_frame(k, n=400, seed=11):
    P, y, _ = _probs(seed, n, k)
    return pd.DataFrame({"p": list(P), "label": y}), P, y


@pytest.mark.slow
def test_multiclass_report_files_json_and_html(tmp_path):
    import base64
    import json

    from distcal.report import write_report

    df, P, y = _report_frame(4)
    Q = softmax(np.log(P) * 0.5, axis=1)
    df["q"] = list(Q)
    reps = distcal.evaluate_many(df, ["p", "q"], n_bins=8)
    write_report(reps, tmp_path / "rep", provenance={"input": "frame"})
    files = {f.name for f in (tmp_path / "rep").iterdir()}
    assert files == {"report.json", "report.html", "reliability.png",
                     "reliability_classes.png", "confusion.png"}
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["kind"] == "multiclass" and doc["columns"] == ["p", "q"]
    assert doc["provenance"]["n_classes"] == 4 and doc["provenance"]["input"] == "frame"
    for name, M in (("p", P), ("q", Q)):
        r = doc["reports"][name]
        np.testing.assert_allclose(r["confusion_matrix"],
                                   confusion_matrix(y, M.argmax(axis=1), labels=range(4)))
        assert len(r["class_curves"]) == 4
        for c in range(4):
            expect = _numpy_one_vs_rest_curve(M[:, c], (y == c).astype(float), np.ones(len(y)),
                                              8)
            got = np.array([[b["prob_pred"], b["prob_true"], b["weight"]]
                            for b in r["class_curves"][c]])
            np.testing.assert_allclose(got, expect, rtol=1e-12)
        assert r["log_loss"] == pytest.approx(log_loss(y, M), rel=1e-12)
    rows = {row["key"]: row["values"] for row in doc["table"]}
    assert rows["classwise_ece"]["q"] == reps["q"].classwise_ece
    assert rows["ece_class_3"]["p"] == reps["p"].per_class_ece[3]
    page = (tmp_path / "rep" / "report.html").read_text()
    for stem in ("reliability", "reliability_classes", "confusion"):
        png = (tmp_path / "rep" / f"{stem}.png").read_bytes()
        assert png.startswith(b"\x89PNG")
        assert base64.b64encode(png).decode() in page  # embedded, self-contained
    # the confusion table shows every cell of both matrices
    for name, M in (("p", P), ("q", Q)):
        cm = confusion_matrix(y, M.argmax(axis=1), labels=range(4))
        table = page.split(f'data-col="{name}"><thead>')[1].split("</table>")[0]
        for i in range(4):
            for j in range(4):
                assert f'data-true="{i}" data-pred="{j}">{cm[i, j]:,}</td>' in table
    assert "top-label ECE" in page and "class-wise ECE" in page and "ECE of class 3" in page
    html = reps["p"]._repr_html_()
    assert html.startswith('<div class="distcal-report">') and 'class="confusion"' in html


def test_multiclass_report_records_the_model_checksum(tmp_path):
    """A multiclass report given the model directory names the checksum of its model.json,
    as a binary report does."""
    import json

    from distcal.report import build_document

    df, _, _ = _report_frame(3)
    model = distcal.fit(df, score_col="p", method="isotonic")
    model.save(tmp_path / "m")
    rep = distcal.evaluate(df.assign(c=list(model.predict(np.stack(df.p)))), prob_col="c")
    doc = build_document(rep, provenance={"model_dir": str(tmp_path / "m")})["json"]
    saved = json.loads((tmp_path / "m" / "model.json").read_text())["checksum"]
    assert doc["kind"] == "multiclass" and doc["provenance"]["model_checksum"] == saved


def test_multiclass_plots_draw_the_report():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from distcal.plots_multiclass import MAX_OVERLAID_CLASSES

    df, P, y = _report_frame(3)
    rep = distcal.evaluate(df, prob_col="p")
    ax = rep.plot("classes")
    for c in range(3):  # one marker series per class at its curve's points
        sc = next(a for a in ax.collections if a.get_gid() == f"class:p:{c}")
        np.testing.assert_allclose(sc.get_offsets(),
                                   rep.class_curves[c][["prob_pred", "prob_true"]].to_numpy())
    assert len(ax.get_legend().get_texts()) == 3 + 1  # the classes and the diagonal
    top = rep.plot("reliability")
    sc = next(a for a in top.collections if a.get_gid() == "top:p")
    np.testing.assert_allclose(sc.get_offsets(),
                               rep.top_label_curve[["prob_pred", "prob_true"]].to_numpy())
    heat = rep.plot("confusion")
    im = next(a for a in heat.images if a.get_gid() == "confusion:p")
    m = confusion_matrix(y, P.argmax(axis=1))
    np.testing.assert_allclose(im.get_array(), m / m.sum(axis=1, keepdims=True))
    with pytest.raises(ValueError, match="kind must be"):
        rep.plot("roc")
    many, _, _ = _report_frame(MAX_OVERLAID_CLASSES + 2)
    big = distcal.evaluate(many, prob_col="p")
    ax = big.plot("classes")  # small multiples: one panel per class
    assert sum(a.axison for a in ax.figure.axes) == MAX_OVERLAID_CLASSES + 2
    plt.close("all")


def test_a_report_of_many_classes_stays_bounded(tmp_path):
    """K = 60: the per-class figure draws the 24 classes of highest ECE (a panel per class
    took minutes at K = 400 and failed past matplotlib's pixel limit near K = 950), and the
    page says where the 3,600-cell confusion matrix is instead of tabulating it."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from distcal.plots_multiclass import MAX_CLASS_PANELS
    from distcal.report import write_report

    df, _, _ = _report_frame(60, n=3000)
    rep = distcal.evaluate(df, prob_col="p")
    ax = rep.plot("classes")
    titles = sorted(int(a.get_title().split()[1]) for a in ax.figure.axes if a.axison)
    worst = np.argsort(-np.asarray(rep.per_class_ece), kind="stable")[:MAX_CLASS_PANELS]
    assert titles == sorted(worst.tolist()) and len(titles) == 24
    assert "the 24 of 60 classes of highest ECE" in ax.figure.get_suptitle()
    plt.close("all")
    write_report(rep, tmp_path / "rep")
    page = (tmp_path / "rep" / "report.html").read_text()
    assert 'class="confusion"' not in page and "60 classes: the matrix (60² cells)" in page
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    np.testing.assert_array_equal(doc["reports"]["p"]["confusion_matrix"],
                                  rep.confusion_matrix)
