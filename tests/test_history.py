"""Calibration history: summaries, exact refits and evaluations from them, on every engine.

Oracles independent of distcal: scikit-learn's IsotonicRegression and metrics
on the raw rows, numpy's Spiegelhalter statistic and calibration-in-the-large,
brute-force thresholds; every engine against the fit on the raw rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import norm
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

import distcal
from distcal import DataError, ModelError
from distcal.errors import ParameterError
from distcal.storage import OutputExistsError

Q = np.linspace(-0.2, 1.2, 1401)


def days(n_days=3, n=1500, seed=0, drift=0.0):
    """Daily frames of scores in [0, 1] with ties, weights, a segment column and 0/1 labels."""
    rng = np.random.default_rng(seed)
    out = []
    for d in range(n_days):
        s = np.round(rng.beta(2.0, 3.0, n), 3)
        y = (rng.random(n) < np.clip(s + drift * d, 0, 1) ** 1.3).astype(np.int64)
        w = rng.uniform(0.0, 3.0, n)
        w[rng.random(n) < 0.03] = 0.0
        out.append(pd.DataFrame({"score": s, "label": y, "w": w,
                                 "g": rng.choice(["a", "b", "c"], n, p=[.5, .3, .2])}))
    return out


def predict(model, by):
    if by is None:
        return model.predict(Q)
    keys = np.array(["a", "b", "c", "zz"])[np.arange(Q.shape[0]) % 4]
    return model.predict(Q, segments=keys)


# -- refits from summaries ------------------------------------------------------------

@pytest.mark.parametrize("weighted,by", [(False, None), (True, "g")])
def test_fit_from_saved_summaries_equals_fit_on_the_rows(engine, tmp_path, weighted, by):
    name, frame = engine.name, engine.frame
    parts = days()
    wc = "w" if weighted else None
    paths = []
    for i, df in enumerate(parts):
        s = distcal.summarize(frame(df), weight_col=wc, by=by, period=f"2026-12-0{i + 1}")
        assert s.period == f"2026-12-0{i + 1}" and s.by == ([by] if by else [])
        # Equal to the summary made in memory: sums to their rounding, the rest exactly.
        local = distcal.summarize(df, weight_col=wc, by=by, period=f"2026-12-0{i + 1}")
        assert s == local
        if weighted:
            assert s != distcal.summarize(df.assign(w=df["w"] * (1 + 1e-7)), weight_col=wc,
                                          by=by, period=f"2026-12-0{i + 1}")
        s.save(tmp_path / f"day{i}")
        paths.append(str(tmp_path / f"day{i}"))
    rows = pd.concat(parts, ignore_index=True)
    methods = ["isotonic", "sigmoid", "histogram"] + ([] if weighted else ["modl"])
    for method in methods:
        want = distcal.fit(rows, method=method, weight_col=wc, by=by)
        got = distcal.fit(paths, method=method, engine=name)
        np.testing.assert_allclose(predict(got, by), predict(want, by), rtol=1e-9, atol=1e-12,
                                   err_msg=method)
        assert got.n_rows == want.n_rows
        if by is None:
            assert got == want
    # scikit-learn's isotonic regression on the raw rows (interpolated between scores)
    keep = rows["w"] > 0 if weighted else slice(None)
    ir = IsotonicRegression(out_of_bounds="clip").fit(
        rows["score"][keep], rows["label"][keep],
        sample_weight=rows["w"][keep] if weighted else None)
    got = distcal.fit(paths, engine=name)
    np.testing.assert_allclose(got.predict(Q) if by is None else got.global_model.predict(Q),
                               ir.predict(Q), rtol=1e-9, atol=1e-12)


def test_fit_of_one_summary_in_memory_and_refusals(engine, caplog):
    name, frame = engine.name, engine.frame
    df = days(1)[0]
    s = distcal.summarize(frame(df), weight_col="w")
    assert distcal.fit(s, method="sigmoid", engine=name) == distcal.fit(df, method="sigmoid",
                                                                         weight_col="w")
    with pytest.raises(ValueError, match="temperature"):
        distcal.fit(s, method="temperature")
    # Spearman's sign of fractional labels needs the rows' ranks: refused, not guessed
    frac = df.assign(label=df["label"] * 0.5)
    with pytest.raises(DataError, match="holds no rows"):
        distcal.fit(distcal.summarize(frame(frac)), increasing="auto", engine=name)
    assert "to the driver" not in caplog.text  # (nothing came: no such warning)
    assert distcal.fit(distcal.summarize(frame(frac)), increasing=True, engine=name) == \
        distcal.fit(frac)
    # infinite scores: summarised (isotonic takes them), refused by Platt scaling
    inf = df.assign(score=np.where(np.arange(len(df)) < 3, np.inf, df["score"]))
    si = distcal.summarize(frame(inf))
    assert distcal.fit(si, engine=name) == distcal.fit(inf)
    with pytest.raises(DataError, match=r"column 'score': 3 rows are infinite"):
        distcal.fit(si, method="sigmoid", engine=name)
    dropped = distcal.fit(si, method="sigmoid", engine=name, on_invalid="drop")
    assert dropped == distcal.fit(inf, method="sigmoid", on_invalid="drop")
    assert (dropped.n_rows, dropped.dropped_rows) == (len(df) - 3, 3)
    # 0/1-label methods say what the labels are, not that the rows are missing
    for method, needs in [("modl", "MODL calibration needs 0/1 labels"),
                          ("venn_abers", "Venn-Abers predictors take 0/1 labels")]:
        with pytest.raises(DataError, match=f"column 'label' \\(label\\): the summarised rows "
                                            f"hold labels other than 0 and 1; {needs}"):
            distcal.fit(distcal.summarize(frame(frac)), method=method, engine=name)


def test_columns_other_than_the_summaries_are_refused():
    """A summary holds its columns and segments only: asking fit, evaluate or
    optimal_threshold of it for others (weights, segments, another label) is a
    ParameterError, not a fit that ignores them; its own columns may be named."""
    df = days(1)[0].assign(c=lambda d: np.arange(len(d)) % 2)
    plain, own = distcal.summarize(df), distcal.summarize(df, weight_col="w", by="c")
    for call, arg in [(lambda: distcal.fit(plain, by="c"), "by=\\['c'\\]"),
                      (lambda: distcal.fit(plain, weight_col="w"), "weight_col='w'"),
                      (lambda: distcal.fit(plain, label_col="y"), "label_col='y'"),
                      (lambda: distcal.evaluate(plain, weight_col="w"), "weight_col='w'"),
                      (lambda: distcal.evaluate(plain, prob_col="p"), "prob_col='p'"),
                      (lambda: distcal.optimal_threshold(plain, by="c"), "by=\\['c'\\]")]:
        with pytest.raises(ParameterError, match=f"{arg}, but the summaries hold the "
                                                         "rows of score 'score'"):
            call()
    assert distcal.fit(own, weight_col="w", by="c") == distcal.fit(df, weight_col="w", by="c")
    assert distcal.evaluate(own, prob_col="score", by=["c"]).segments.equals(
        distcal.evaluate(df, prob_col="score", weight_col="w", by="c").segments)


def test_summarize_is_the_same_on_every_engine_and_counts_rows(engine):
    frame = engine.frame
    df = days(1)[0]
    df.loc[:4, "score"] = np.nan
    got = distcal.summarize(frame(df), weight_col="w", by="g", on_invalid="drop")
    want = distcal.summarize(df, weight_col="w", by="g", on_invalid="drop")
    assert got.dropped_rows == want.dropped_rows == 5
    assert got.n_rows == want.n_rows == int((df["w"] > 0).sum() - (df["w"][:5] > 0).sum())
    a, b = got.table, want.table
    assert a[["g", "score", "count", "nonbinary"]].equals(b[["g", "score", "count", "nonbinary"]])
    np.testing.assert_allclose(a[["weight", "positives", "wyy", "ww"]],
                               b[["weight", "positives", "wyy", "ww"]], rtol=1e-12)
    # the table's sums are the rows' (pandas groupby as the oracle)
    ok = df[df["score"].notna() & (df["w"] > 0)]
    grp = ok.assign(wy=ok["w"] * ok["label"], ww=ok["w"] ** 2).groupby("score")
    glob = b[b["g"].isna()].set_index("score")
    np.testing.assert_allclose(glob["weight"], grp["w"].sum(), rtol=1e-12)
    np.testing.assert_allclose(glob["positives"], grp["wy"].sum(), rtol=1e-12)
    np.testing.assert_allclose(glob["ww"], grp["ww"].sum(), rtol=1e-12)
    with pytest.raises(DataError, match=r"column 'label'.*2 rows"):
        distcal.summarize(frame(df.assign(label=np.r_[2, 7, df["label"][2:]])), by="g")


def test_decimals_give_the_summary_of_the_rounded_scores(engine):
    name, frame = engine.name, engine.frame
    df = days(1, seed=3)[0].assign(score=lambda d: d["score"] + 1e-4 * np.arange(len(d)) % 1)
    s = distcal.summarize(frame(df), weight_col="w", decimals=2)
    assert s.decimals == 2 and len(s) <= 101
    rounded = df.assign(score=np.round(df["score"], 2))
    want = distcal.summarize(rounded, weight_col="w")
    np.testing.assert_allclose(s.table[["score", "weight", "positives"]],
                               want.table[["score", "weight", "positives"]], rtol=1e-12)
    assert distcal.fit(s, engine=name) == distcal.fit(rounded, weight_col="w")
    with pytest.raises(ValueError, match="decimals"):
        distcal.summarize(df, decimals=-1)
    # Scores too large for s * 10^d (integers already) are kept, never made infinite
    big = pd.DataFrame({"score": [1e305, 0.123, 0.456, -1e305, 2.0**53 + 2],
                        "label": [1, 0, 1, 0, 1], "w": 1.0})
    got = distcal.summarize(frame(big), decimals=2).table.score.tolist()
    assert got == [-1e305, 0.12, 0.46, 2.0**53 + 2, 1e305]


# -- evaluation and thresholds from summaries -------------------------------------------

def spiegelhalter(p, y, w):
    z = np.sum(w * (y - p) * (1 - 2 * p)) / np.sqrt(np.sum(w**2 * (1 - 2 * p) ** 2 * p * (1 - p)))
    return z, 2 * norm.sf(abs(z))


def test_evaluate_a_summary_equals_the_rows_and_the_oracles(engine, tmp_path):
    name, frame = engine.name, engine.frame
    parts = days(2, seed=5)
    for i, df in enumerate(parts):
        distcal.summarize(frame(df), weight_col="w").save(tmp_path / str(i))
    rep = distcal.evaluate([str(tmp_path / "0"), str(tmp_path / "1")], engine=name,
                           roc_points=None)
    rows = pd.concat(parts, ignore_index=True)
    want = distcal.evaluate(rows, prob_col="score", weight_col="w", roc_points=None)
    for k in ("brier", "log_loss", "ece", "mce", "auc", "smece", "adaptive_ece",
              "reliability_exact", "spiegelhalter_z", "spiegelhalter_p", "citl", "citl_low",
              "citl_high", "accuracy"):
        assert getattr(rep, k) == pytest.approx(getattr(want, k), rel=1e-9, abs=1e-12), k
    ok = rows[rows["w"] > 0]
    p, y, w = ok["score"].to_numpy(), ok["label"].to_numpy(), ok["w"].to_numpy()
    assert rep.brier == pytest.approx(brier_score_loss(y, p, sample_weight=w), rel=1e-9)
    assert rep.log_loss == pytest.approx(log_loss(y, p, sample_weight=w), rel=1e-9)
    assert rep.auc == pytest.approx(roc_auc_score(y, p, sample_weight=w), rel=1e-9)
    z, pv = spiegelhalter(p, y, w)
    assert rep.spiegelhalter_z == pytest.approx(z, rel=1e-9)
    assert rep.spiegelhalter_p == pytest.approx(pv, rel=1e-9)
    citl = np.sum(w * p) / w.sum() - np.sum(w * y) / w.sum()
    half = 1.959963984540054 * np.sqrt(np.sum(w**2 * p * (1 - p))) / w.sum()
    assert (rep.citl, rep.citl_low, rep.citl_high) == pytest.approx(
        (citl, citl - half, citl + half), rel=1e-9)
    # scores outside [0, 1] are no probabilities to evaluate: refused, or dropped from
    # every segment as the rows would be (saved or in memory)
    wide = parts[0].assign(score=parts[0]["score"] * 1.6 - 0.3, g=parts[0].index % 3)
    logits = distcal.summarize(frame(wide), weight_col="w", by="g")
    logits.save(tmp_path / "wide")
    # (rows of weight 0 add nothing to a summary's table: they are in no count of it)
    outside = int(((wide["score"] < 0) | (wide["score"] > 1))[wide["w"] > 0].sum())
    with pytest.raises(DataError, match=f"column 'score': {outside} rows are outside "
                       r"\[0, 1\] \(evaluated as probabilities\) \(pass on_invalid='drop'"):
        distcal.evaluate(logits, engine=name)
    want = distcal.evaluate(wide[wide["w"] > 0], prob_col="score", weight_col="w", by="g",
                            on_invalid="drop")
    assert want.dropped_rows == outside > 0
    for summary in (logits, str(tmp_path / "wide")):
        got = distcal.evaluate(summary, on_invalid="drop", engine=name)
        assert (got.n_rows, got.dropped_rows) == (want.n_rows, want.dropped_rows)
        assert got.weight_total == pytest.approx(want.weight_total, rel=1e-12)
        for k in ("brier", "log_loss", "ece", "auc", "spiegelhalter_z"):
            assert getattr(got, k) == pytest.approx(getattr(want, k), rel=1e-9), k
        pd.testing.assert_frame_equal(got.segments, want.segments, rtol=1e-9)


def test_dropping_from_pieces_without_the_key_of_all_rows():
    """A summary read in pieces of a few rows: a piece may hold a segment's rows without
    the key of all rows (the table is written key by key); its rows with refused scores
    are dropped too (they were kept, and a range with a segment but no global key
    failed an assertion)."""
    rng = np.random.default_rng(1)
    s = np.round(rng.normal(0.5, 0.3, 600), 2)
    df = pd.DataFrame({"score": s, "label": (rng.random(600) < np.clip(s, 0, 1)) * 1,
                       "g": rng.choice(["a", "b"], 600)})
    want = distcal.evaluate(df, prob_col="score", by="g", on_invalid="drop")
    got = distcal.evaluate(distcal.summarize(df, by="g"), on_invalid="drop", batch_rows=7,
                           memory_rows=50)
    assert (got.n_rows, got.dropped_rows) == (want.n_rows, want.dropped_rows)
    assert got.dropped_rows > 0
    pd.testing.assert_frame_equal(got.segments, want.segments, rtol=1e-9)


def test_spiegelhalter_and_citl_on_every_evaluation(engine):
    frame = engine.frame
    df = days(1, seed=7)[0].rename(columns={"score": "prob"})
    for wc in (None, "w"):
        rep = distcal.evaluate(frame(df), weight_col=wc)
        w = np.ones(len(df)) if wc is None else df["w"].to_numpy()
        z, pv = spiegelhalter(df["prob"].to_numpy(), df["label"].to_numpy(), w)
        assert rep.spiegelhalter_z == pytest.approx(z, rel=1e-9)
        assert rep.spiegelhalter_p == pytest.approx(pv, rel=1e-9)
        d = rep.to_dict()
        assert d["spiegelhalter_z"] == rep.spiegelhalter_z and d["citl_low"] == rep.citl_low
        assert rep.citl_low < rep.citl < rep.citl_high


def brute_threshold(s, y, w, c_fp, c_fn):
    """Every candidate threshold's cost; the largest threshold of minimal cost."""
    ts = np.r_[np.unique(s), np.inf]
    costs = np.array([c_fp * np.sum(w * (1 - y) * (s >= t)) + c_fn * np.sum(w * y * (s < t))
                      for t in ts])
    best = costs.min()
    return best, ts[np.flatnonzero(costs <= best + 1e-9 * max(1.0, abs(best)))[-1]]


def test_optimal_threshold_of_summaries_equals_brute_force(engine):
    name, frame = engine.name, engine.frame
    parts = days(2, n=400, seed=11)
    s = distcal.merge_summaries([distcal.summarize(frame(df), weight_col="w") for df in parts])
    rows = pd.concat(parts, ignore_index=True)
    res = distcal.optimal_threshold(s, cost_fp=1.0, cost_fn=3.0, engine=name)
    cost, t = brute_threshold(rows["score"].to_numpy(), rows["label"].to_numpy(),
                              rows["w"].to_numpy(), 1.0, 3.0)
    assert res.threshold == t and res.cost == pytest.approx(cost, rel=1e-9)


def test_segments_of_a_summary_equal_the_rows_by_segment():
    rows = pd.concat(days(2, seed=13), ignore_index=True)
    s = distcal.summarize(rows, weight_col="w", by="g")
    got = distcal.evaluate(s)
    want = distcal.evaluate(rows, prob_col="score", weight_col="w", by="g")
    pd.testing.assert_frame_equal(got.segments, want.segments, rtol=1e-9)
    got = distcal.optimal_threshold(s, cost_fn=2.0)
    want = distcal.optimal_threshold(rows, weight_col="w", by="g", cost_fn=2.0)
    pd.testing.assert_frame_equal(got.segments, want.segments, rtol=1e-9)
    plain = distcal.summarize(rows, weight_col="w")
    model, best = distcal.fit_and_threshold(plain, cost_fn=2.0)
    assert model == distcal.fit(rows, weight_col="w")
    assert best.threshold == distcal.optimal_threshold(rows, weight_col="w",
                                                       cost_fn=2.0).threshold


def test_local_refit_streams_summaries_in_bounded_memory(tmp_path):
    """Small batches and a small in-memory budget: the summaries' rows spill as rows do."""
    parts = days(4, n=3000, seed=17)
    paths = []
    for i, df in enumerate(parts):
        distcal.summarize(df, weight_col="w", by="g").save(tmp_path / str(i))
        paths.append(str(tmp_path / str(i)))
    rows = pd.concat(parts, ignore_index=True)
    for method in ("isotonic", "sigmoid", "histogram"):
        got = distcal.fit(paths, method=method, memory_rows=500, batch_rows=300)
        want = distcal.fit(rows, method=method, weight_col="w", by="g")
        np.testing.assert_allclose(predict(got, "g"), predict(want, "g"), rtol=1e-9,
                                   atol=1e-12)


@pytest.mark.parametrize("name", ["spark", "dask"])
def test_cluster_refit_merges_saved_summaries_on_the_cluster(name, request, tmp_path):
    """Summaries larger than what the driver may receive: fit and evaluate read and merge
    them on the cluster, and the driver's Python heap (tracemalloc: numpy arrays, the
    rows and pickles a collect brings) stays far below the summaries' tables."""
    import tracemalloc

    request.getfixturevalue("spark" if name == "spark" else "client")
    rng = np.random.default_rng(7)
    parts, paths = [], []
    for i in range(3):  # all-distinct scores: a summary table as large as its rows
        s = rng.random(100_000)
        df = pd.DataFrame({"score": s, "label": (rng.random(s.shape[0]) < s).astype(int)})
        distcal.summarize(df).save(tmp_path / str(i))
        parts.append(df)
        paths.append(str(tmp_path / str(i)))
    tables = sum(distcal.load_summary(p).arrow.nbytes for p in paths)
    rows = pd.concat(parts, ignore_index=True)
    tracemalloc.start()
    try:
        model = distcal.fit(paths, engine=name)
        rep = distcal.evaluate(paths, engine=name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tables > 16e6 and peak < tables / 3, (peak, tables)
    ir = IsotonicRegression(out_of_bounds="clip").fit(rows["score"], rows["label"])
    np.testing.assert_allclose(model.predict(Q), ir.predict(Q), rtol=1e-9, atol=1e-12)
    assert rep.n_rows == len(rows)
    y, p = rows["label"].to_numpy(), rows["score"].to_numpy()
    assert rep.auc == pytest.approx(roc_auc_score(y, p), rel=1e-12)
    # unweighted summaries: the workers rebuild sum w and sum w^2 from the row counts
    assert rep.brier == pytest.approx(brier_score_loss(y, p), rel=1e-9)
    z, pv = spiegelhalter(p, y, np.ones_like(p))
    assert (rep.spiegelhalter_z, rep.spiegelhalter_p) == pytest.approx((z, pv), rel=1e-9)


def test_spark_refit_sets_its_ranges_from_the_samples_saved_summaries_carry(spark, tmp_path):
    """A saved summary's table file carries a sample of its sorted scores (Parquet
    metadata), from which the Spark refit sets its range bounds: it runs fewer Spark
    jobs than with summaries saved without one (older builds: Spark's range
    partitioner samples the summaries first). Both equal scikit-learn's isotonic
    regression on the rows, scores of any sign and infinite scores the local fit;
    a sample that is not sorted scores is a damaged summary."""
    import hashlib

    rng = np.random.default_rng(11)
    parts, paths, bare = [], [], []
    for i in range(3):
        s = rng.normal(size=20_000) + i
        df = pd.DataFrame({"score": s, "label": (rng.random(s.shape[0]) < norm.cdf(s))
                           .astype(int)})
        distcal.summarize(df).save(tmp_path / f"s{i}")
        sample = pq.read_schema(tmp_path / f"s{i}" / "table.parquet").metadata[
            b"distcal.score_sample"]
        got = np.frombuffer(sample, dtype="<f8")
        assert got.shape[0] == 256 and np.all(np.diff(got) >= 0)
        assert np.isin(got, s).all()
        parts.append(df)
        paths.append(str(tmp_path / f"s{i}"))
        root = tmp_path / f"bare{i}"  # the same summary without the sample
        distcal.summarize(df).save(root)
        t = pq.read_table(root / "table.parquet")
        pq.write_table(t.replace_schema_metadata(None), root / "table.parquet")
        digest = hashlib.sha256((root / "table.parquet").read_bytes()).hexdigest()
        _rewrite_json(root, lambda m, d=digest: m["tables"]["table"].update(sha256=d))
        bare.append(str(root))
    rows = pd.concat(parts, ignore_index=True)
    ir = IsotonicRegression(out_of_bounds="clip").fit(rows["score"], rows["label"])
    q = np.linspace(-4, 6, 2001)
    sc = spark.sparkContext
    jobs = {}
    for name, summaries in (("sampled", paths), ("bare", bare)):
        sc.setJobGroup(name, name)
        model = distcal.fit(summaries, engine="spark")
        jobs[name] = len(sc.statusTracker().getJobIdsForGroup(name))
        np.testing.assert_allclose(model.predict(q), ir.predict(q), rtol=1e-9, atol=1e-12)
    sc.setJobGroup("other", "other")
    assert 0 < jobs["sampled"] < jobs["bare"], jobs

    # infinite scores: bounds stay finite, and every range equals the local fit
    inf = rows.copy()
    inf.loc[:99, "score"] = np.inf
    inf.loc[100:199, "score"] = -np.inf
    distcal.summarize(inf).save(tmp_path / "inf")
    got = distcal.fit([str(tmp_path / "inf")] + paths[1:], engine="spark")
    want = distcal.fit(pd.concat([inf] + parts[1:], ignore_index=True))
    np.testing.assert_allclose(got.predict(q), want.predict(q), rtol=1e-12, atol=1e-12)

    root = tmp_path / "unsorted"
    distcal.summarize(parts[0]).save(root)
    t = pq.read_table(root / "table.parquet")
    meta = dict(t.schema.metadata)
    meta[b"distcal.score_sample"] = np.frombuffer(meta[b"distcal.score_sample"],
                                                  dtype="<f8")[::-1].tobytes()
    pq.write_table(t.replace_schema_metadata(meta), root / "table.parquet")
    digest = hashlib.sha256((root / "table.parquet").read_bytes()).hexdigest()
    _rewrite_json(root, lambda m: m["tables"]["table"].update(sha256=digest))
    with pytest.raises(ModelError, match="score sample"):
        distcal.load_summary(root)
    with pytest.raises(ModelError, match="score sample"):
        distcal.fit([str(root)] + paths[1:], engine="spark")


def test_summaries_on_a_remote_store_save_load_and_fit():
    """Summary directories on an fsspec store (as models are): saved, read back, and fitted
    and monitored from a list of their URLs."""
    import uuid

    root = f"memory://distcal-test-{uuid.uuid4().hex}"
    parts = days(2, seed=5)
    uris = []
    for i, df in enumerate(parts):
        s = distcal.summarize(df, weight_col="w", period=f"d{i}")
        s.save(f"{root}/s{i}")
        assert distcal.load_summary(f"{root}/s{i}") == s
        uris.append(f"{root}/s{i}")
    with pytest.raises(OutputExistsError):
        s.save(uris[-1])
    rows = pd.concat(parts, ignore_index=True)
    keep = rows["w"] > 0
    ir = IsotonicRegression(out_of_bounds="clip").fit(
        rows["score"][keep], rows["label"][keep], sample_weight=rows["w"][keep])
    np.testing.assert_allclose(distcal.fit(uris).predict(Q), ir.predict(Q), rtol=1e-9,
                               atol=1e-12)
    assert distcal.monitor(uris).table["period"].tolist() == ["d0", "d1"]
    with pytest.raises(ModelError):
        distcal.load_summary(f"{root}/missing")


# -- merging ---------------------------------------------------------------------------------

@st.composite
def row_sets(draw):
    def one():
        n = draw(st.integers(1, 30))
        s = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
        y = draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n))
        w = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n, max_size=n))
        g = draw(st.lists(st.sampled_from(["x", "y"]), min_size=n, max_size=n))
        return pd.DataFrame({"score": np.array(s) / 8, "label": y, "w": w, "g": g})
    return [one() for _ in range(3)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_sets())
def test_merge_is_associative_commutative_and_exact(parts):
    a, b, c = (distcal.summarize(df, weight_col="w", by="g") for df in parts)

    def same(u, v):
        assert u.n_rows == v.n_rows and len(u) == len(v)
        cu, cv = u.table, v.table
        assert cu[["g", "score", "count"]].equals(cv[["g", "score", "count"]])
        np.testing.assert_allclose(cu[["weight", "positives", "ww"]],
                                   cv[["weight", "positives", "ww"]], rtol=1e-12)

    same((a + b) + c, a + (b + c))
    same(a + b, b + a)
    rows = pd.concat(parts, ignore_index=True)
    same(distcal.merge_summaries([a, b, c]), distcal.summarize(rows, weight_col="w", by="g"))
    for method in ("isotonic", "histogram"):
        got = distcal.fit(a + b + c, method=method, n_bins=2) if method == "histogram" \
            else distcal.fit(a + b + c)
        want = distcal.fit(rows, method=method, weight_col="w", by="g",
                           **({"n_bins": 2} if method == "histogram" else {}))
        np.testing.assert_allclose(predict(got, "g"), predict(want, "g"), rtol=1e-9,
                                   atol=1e-12)


def test_summaries_of_other_columns_do_not_merge():
    df = days(1)[0]
    a = distcal.summarize(df)
    with pytest.raises(DataError, match="weight"):
        a + distcal.summarize(df, weight_col="w")
    with pytest.raises(DataError, match="by"):
        distcal.merge_summaries([a, distcal.summarize(df, by="g")])
    with pytest.raises(DataError, match="decimals"):
        a + distcal.summarize(df, decimals=2)
    assert (a + a).period is None and (a + a).n_rows == 2 * a.n_rows


def test_merged_sums_that_overflow_and_summaries_of_no_rows_are_data_errors():
    """A merge adds sums up: squared weights that overflow are the DataError summarize
    gives (the merge made a summary that evaluate called damaged and that saved but did
    not load); a summary of no rows cannot be made (monitor and fit failed on one)."""
    df = pd.DataFrame({"score": [0.1, 0.2, 0.3], "label": [0, 1, 1], "w": [1e153] * 3})
    s = distcal.summarize(df, weight_col="w")
    with pytest.raises(DataError, match=r"column 'w' \(weight\): 900 rows have weights "
                       "whose squares, summed per score, overflow"):
        distcal.merge_summaries([s] * 300)
    with pytest.raises(DataError, match="no rows"):
        distcal.Summary(s.arrow.slice(0, 0), columns=s.columns, by=[], n_rows=0,
                        weight_total=0.0)


def test_squares_that_underflow_are_counted_in_the_rows_they_lose(tmp_path):
    """A weight whose square underflows alone in its segment: the DataError counts that
    row (it counted the rows of all rows' sums at its score, where it is not lost: 0)."""
    df = pd.DataFrame({"score": [0.5, 0.5, 0.2], "label": [1, 0, 1], "w": [1e-170, 1.0, 1.0],
                       "g": ["a", "b", "b"]})
    assert distcal.summarize(df, weight_col="w").n_rows == 3  # 1 + 1e-340 is 1: nothing lost
    with pytest.raises(DataError, match=r"column 'w' \(weight\): 1 row has weights whose "
                       "squares, summed per score, underflow to 0"):
        distcal.summarize(df, weight_col="w", by="g")


def test_integer_keys_beyond_2_to_the_53_stay_distinct():
    """Summary.table showed int64 keys beside the key of all rows (null) as floats: 2^53 and
    2^53 + 1 one value; and a merge with double keys raised pyarrow's own error."""
    big = distcal.summarize(pd.DataFrame({"score": [.1, .2, .3, .4], "label": [0, 1, 0, 1],
                                          "g": [2**53, 2**53 + 1] * 2}), by="g")
    assert sorted({k for k in big.table["g"] if k is not None}) == [2**53, 2**53 + 1]
    small = distcal.summarize(pd.DataFrame({"score": [.1, .2], "label": [0, 1],
                                            "g": [1.0, 2.0]}), by="g")
    with pytest.raises(DataError, match=r"column 'g' \(segment\) has type double in some "
                       "summaries and int64 in others"):
        big + small


def test_a_list_of_summaries_with_other_items_is_a_parameter_error(tmp_path):
    df = pd.DataFrame({"score": [0.1, 0.4, 0.6], "label": [0, 1, 1]})
    s = distcal.summarize(df)
    s.save(tmp_path / "s")
    for call in (lambda: distcal.fit([str(tmp_path / "s"), df]),
                 lambda: distcal.evaluate([s, None]),
                 lambda: distcal.monitor([df]),
                 lambda: distcal.monitor([[s, s]])):
        with pytest.raises(ParameterError, match="every item must be a Summary or the path "
                           "of a saved summary, got (DataFrame|NoneType|list)"):
            call()


def test_a_summary_too_large_to_read_back_is_not_saved(tmp_path, monkeypatch):
    """load_summary reads at most MAX_TABLE_BYTES of table (untrusted input); save refuses
    a larger table, names the way out and writes nothing (it wrote a directory that
    could never be read back). Shown with the limit lowered to 20 KB."""
    import distcal.model
    import distcal.summary

    rng = np.random.default_rng(3)
    df = pd.DataFrame({"score": rng.random(4000), "label": rng.integers(0, 2, 4000)})
    small = distcal.summarize(df.iloc[:100])
    big = distcal.summarize(df)  # 4,000 distinct scores: about 100 KB of table
    for module in (distcal.model, distcal.summary):
        monkeypatch.setattr(module, "MAX_TABLE_BYTES", 20_000)
    small.save(tmp_path / "small")
    assert distcal.load_summary(tmp_path / "small") == small
    with pytest.raises(DataError, match="decimals="):
        big.save(tmp_path / "big")
    assert not (tmp_path / "big").exists()
    big_rounded = distcal.summarize(df, decimals=2)
    big_rounded.save(tmp_path / "rounded")
    assert distcal.load_summary(tmp_path / "rounded") == big_rounded


# -- saved summaries are untrusted input -----------------------------------------------------

def _rewrite_json(root: Path, change) -> None:
    from distcal.model_format import _json_checksum

    meta = json.loads((root / "summary.json").read_text())
    change(meta)
    meta["checksum"] = _json_checksum(meta)
    (root / "summary.json").write_text(json.dumps(meta))


def test_tampered_summary_directories_raise_model_error(tmp_path):
    s = distcal.summarize(days(1)[0], weight_col="w", by="g", period="2026-12-01")
    good = tmp_path / "good"
    s.save(good)
    assert distcal.load_summary(good) == s
    with pytest.raises(Exception, match="exists"):
        s.save(good)
    s.save(good, overwrite=True)

    def case(name, damage, read=distcal.fit):
        root = tmp_path / name
        s.save(root)
        damage(root)
        with pytest.raises(ModelError):
            distcal.load_summary(root)
        with pytest.raises(ModelError):
            read([str(good), str(root)])

    case("truncated", lambda r: (r / "table.parquet").write_bytes(
        (r / "table.parquet").read_bytes()[:-20]))
    case("json", lambda r: (r / "summary.json").write_text(
        (r / "summary.json").read_text().replace('"n_rows"', '"n_rowz"')))
    case("no-json", lambda r: os.remove(r / "summary.json"))
    case("deep", lambda r: (r / "summary.json").write_text("[" * 100000 + "]" * 100000))

    def symlink(r):
        os.rename(r / "table.parquet", tmp_path / "elsewhere.parquet")
        os.symlink(tmp_path / "elsewhere.parquet", r / "table.parquet")
    case("symlink", symlink)

    def table_case(name, change, read=distcal.fit):
        """The table changed, with consistent checksums (a crafted directory): refused by
        load_summary and when read by path (which the engines stream)."""
        def damage(r):
            import hashlib
            t = pq.read_table(r / "table.parquet")
            pq.write_table(change(t).replace_schema_metadata(t.schema.metadata),
                           r / "table.parquet")
            digest = hashlib.sha256((r / "table.parquet").read_bytes()).hexdigest()
            _rewrite_json(r, lambda m: m["tables"]["table"].update(sha256=digest))
        case(name, damage, read)

    def column(name, values, type=None):
        return lambda t: t.set_column(t.column_names.index(name), name,
                                      pa.array(values(t.column(name).to_numpy()), type))

    table_case("negative-weight", column("weight", lambda w: np.r_[-1.0, w[1:]]))
    table_case("count-as-double", column("count", lambda c: c + 0.5))
    table_case("score-as-text", column("score", lambda v: v.astype(str)))
    table_case("null-count", column("count", lambda c: [None, *c[1:].tolist()], pa.int64()))
    table_case("extra-column", lambda t: t.append_column("x", pa.array([1.0] * t.num_rows)))
    # Segments b and c renamed a: (a, score) pairs twice, which pooling would merge silently.
    table_case("pair-twice", column("by_0", lambda g: np.where(pd.isna(g), None, "a")))
    # Sums of squares that no rows have: sum w^2 < (sum w)^2 / rows, sum w y^2 != sum w y
    # for 0/1 labels (what evaluate and monitor read, a fit does not).
    table_case("ww-too-small", column("ww", lambda ww: ww * 1e-6), distcal.evaluate)
    table_case("wyy-not-positives", lambda t: t.set_column(
        t.column_names.index("wyy"), "wyy", pa.array(t.column("positives").to_numpy() / 2)),
        distcal.evaluate)
    case("rows", lambda r: _rewrite_json(r, lambda m: m.update(n_rows=m["n_rows"] + 1)))
    case("weight", lambda r: _rewrite_json(
        r, lambda m: m.update(weight_total=2 * m["weight_total"])))

    def no_rows(r):  # an empty table and totals of 0, consistent: not a summary either
        t = pq.read_table(r / "table.parquet")
        pq.write_table(t.slice(0, 0), r / "table.parquet")
        import hashlib
        digest = hashlib.sha256((r / "table.parquet").read_bytes()).hexdigest()
        _rewrite_json(r, lambda m: (m["tables"]["table"].update(sha256=digest, rows=0),
                                    m.update(n_rows=0, weight_total=0.0)))
    case("no-rows", no_rows)
    case("version", lambda r: _rewrite_json(r, lambda m: m.update(format_version=99)))
    case("path", lambda r: _rewrite_json(
        r, lambda m: m["tables"]["table"].update(file="../good/table.parquet")))
    with pytest.raises(ModelError):
        distcal.load_summary(tmp_path / "missing")
