"""Per-segment calibration (``fit(..., by=...)``) on the local engine, against oracles.

Every segment's map must equal a separate fit of that group's rows:
scikit-learn's IsotonicRegression and sigmoid calibration, brute-force
histogram rates, and pandas group counts for the segments table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.calibration import _sigmoid_calibration
from sklearn.isotonic import IsotonicRegression

import distcal
from distcal import DataError, ModelError, ParameterError, SegmentedCalibrationModel


def assert_segments_equal_sklearn(model, df: pd.DataFrame, by: str = "seg") -> None:
    """Each segment's map equals scikit-learn's IsotonicRegression on the segment's rows
    (about 100 segments checked, evenly spread)."""
    from sklearn.isotonic import IsotonicRegression

    q = np.linspace(-0.1, 1.1, 41)
    groups = list(df.dropna().groupby(by))
    for name, group in groups[:: max(1, len(groups) // 100)]:
        ir = IsotonicRegression(out_of_bounds="clip").fit(group.score, group.label,
                                                          sample_weight=group.w)
        np.testing.assert_allclose(model.segment(name).predict(q), ir.predict(q), rtol=1e-9,
                                   atol=1e-12)


def segmented_frame(n: int, n_segments: int, seed: int = 0, weights: bool = True,
                    zipf: bool = False) -> pd.DataFrame:
    """Scores whose calibration differs by segment (shifted in opposite directions)."""
    rng = np.random.default_rng(seed)
    if zipf:
        g = np.minimum(rng.zipf(1.3, n), n_segments) - 1
    else:
        g = np.concatenate([np.arange(n_segments), rng.integers(0, n_segments,
                                                                n - n_segments)])
    shift = np.linspace(-0.3, 0.3, n_segments)[g]
    s = np.round(rng.random(n), 3)
    y = (rng.random(n) < np.clip(s + shift, 0, 1)).astype(np.int64)
    df = pd.DataFrame({"score": s, "label": y, "seg": [f"s{i}" for i in g]})
    if weights:
        df["w"] = rng.uniform(0.1, 2.0, n)
    return df


def sklearn_isotonic(group: pd.DataFrame, weight_col: str | None) -> IsotonicRegression:
    w = None if weight_col is None else group[weight_col].to_numpy()
    return IsotonicRegression(out_of_bounds="clip").fit(group.score, group.label,
                                                        sample_weight=w)


# Spark jobs and Dask tasks of one fit, whatever the number of segments: the Spark job
# opening the input and the sample, Spark's range sampling and the one pass; the Dask
# tasks of 3 input partitions and 5 ranges.
FIXED_WORK = {"local": 0, "spark": 6, "dask": 50}


@pytest.mark.parametrize("n_segments,n", [(1, 3000), (5, 5000), (2000, 12000)])
def test_isotonic_segments_equal_sklearn_per_group(engine, n_segments, n):
    df = segmented_frame(n, n_segments, seed=n_segments)
    df.loc[df.index[:7], "seg"] = None  # no segment: in the global map only
    model, work = engine.work(lambda: distcal.fit(engine(df), by="seg", weight_col="w",
                                                  **engine.opts))
    assert work <= FIXED_WORK[engine.name], work
    assert isinstance(model, SegmentedCalibrationModel)
    assert len(model.segments) == n_segments
    q = np.linspace(-0.1, 1.1, 57)
    groups = list(df.dropna(subset=["seg"]).groupby("seg"))
    for name, group in groups[:: max(1, len(groups) // 300)]:
        expect = sklearn_isotonic(group, "w").predict(q)
        np.testing.assert_allclose(model.segment(name).predict(q), expect, rtol=1e-9,
                                   atol=1e-12)
        np.testing.assert_allclose(model.predict(q, segments=[name] * len(q)), expect,
                                   rtol=1e-9, atol=1e-12)
    # The global map is the unsegmented fit of all rows (scikit-learn too).
    np.testing.assert_allclose(model.global_model.predict(q),
                               sklearn_isotonic(df, "w").predict(q), rtol=1e-9, atol=1e-12)
    assert model == distcal.fit(df, by="seg", weight_col="w")  # blocks exactly


@pytest.mark.parametrize("method,params", [
    ("isotonic", {"interpolation": "step", "increasing": "auto"}),
    ("isotonic", {"interpolation": "centered", "increasing": "auto"}),
    ("histogram", {"n_bins": 4}), ("sigmoid", {}),
])
def test_methods_by_two_columns_and_transform_equal_local(engine, method, params):
    rng = np.random.default_rng(21)
    df = segmented_frame(3000, 40, seed=21, zipf=True)
    df["v"] = rng.integers(0, 2, len(df)).astype(float)
    df.loc[df.index[:5], "v"] = None
    kw = dict(method=method, by=["seg", "v"], weight_col="w", min_segment_weight=10, **params)
    model = distcal.fit(engine(df), **kw, **engine.opts)
    local = distcal.fit(df, **kw)
    if method == "sigmoid":  # Newton's optimum: to rounding of sums in another order
        q = np.linspace(-0.5, 1.5, 9)
        for key in local.segments[["seg", "v"]].itertuples(index=False, name=None):
            np.testing.assert_allclose(model.segment(key).predict(q),
                                       local.segment(key).predict(q), rtol=1e-6)
    else:
        assert model == local
    # null keys, unseen keys, NaN and infinite scores; input columns named like the
    # transform's internal ones are kept as they are
    new = pd.DataFrame({"score": [0.1, 0.5, np.nan, np.inf, -np.inf, 0.7, 0.3, 0.9],
                        "seg": ["s0", None, "s1", "s0", "s0", "zzz", "s2", "s1"],
                        "v": [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, None, 1.0]})
    new = pd.concat([new, df[["score", "seg", "v"]].head(300)], ignore_index=True)
    new["_g"], new["_b"] = np.arange(len(new)), "x"
    out = engine.collect(model.transform(engine.frame(new), output_col="p"))
    assert list(out.columns) == ["score", "seg", "v", "_g", "_b", "p"]
    assert (out["_g"].to_numpy() == np.arange(len(new))).all() and (out["_b"] == "x").all()
    expect = local.predict(out.score, segments=out[["seg", "v"]])
    np.testing.assert_allclose(out.p, expect, rtol=1e-6 if method == "sigmoid" else 1e-12,
                               atol=1e-12, equal_nan=True)


def test_spark_transform_by_segment_runs_in_the_jvm(spark):
    df = segmented_frame(2000, 30, seed=23, zipf=True)
    model = distcal.fit(df, by="seg", weight_col="w")
    out = model.transform(spark.createDataFrame(df[["score", "seg"]]), output_col="p")
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "Python" not in plan and "Arrow" not in plan
    # the small tables are local relations (a Python RDD would run Python
    # workers when broadcast), and the pieces are not literals in the plan
    assert "ExistingRDD" not in plan and "LocalTableScan" in plan
    assert len(out._jdf.queryExecution().toString()) < 50_000, "pieces printed in the plan"
    got = out.toPandas()
    np.testing.assert_allclose(got.p, model.predict(got.score, segments=got.seg), rtol=1e-12)


def test_segments_table_counts_by_pandas():
    df = segmented_frame(4000, 7, seed=3, zipf=True)
    df.loc[df.index[:40], "seg"] = None  # null keys: no segment, but in the global map
    df.loc[df.index[40:60], "w"] = 0.0   # zero weight: not used at all
    used = df[(df.w > 0) & df.seg.notna()]
    cut = float(used.groupby("seg").w.sum().median())
    model = distcal.fit(df, by="seg", weight_col="w", min_segment_weight=cut)
    expect = used.groupby("seg").agg(n_rows=("w", "size"), weight=("w", "sum")).reset_index()
    got = model.segments
    assert list(got.columns) == ["seg", "n_rows", "weight", "fallback"]
    got = got.sort_values("seg").reset_index(drop=True)
    assert got.seg.tolist() == expect.seg.tolist()
    assert got.n_rows.tolist() == expect.n_rows.tolist()
    np.testing.assert_allclose(got.weight, expect.weight, rtol=1e-12)
    assert got.fallback.tolist() == (expect.weight < cut).tolist()
    assert got.fallback.any() and not got.fallback.all()
    assert model.n_rows == int((df.w > 0).sum())  # null keys count in the global map


def test_fallback_segments_use_the_global_map():
    df = segmented_frame(3000, 6, seed=4, zipf=True)
    weights = df.groupby("seg").w.sum()
    cut = float(weights.median())
    model = distcal.fit(df, by="seg", weight_col="w", min_segment_weight=cut)
    q = np.linspace(0, 1, 21)
    glob = sklearn_isotonic(df, "w").predict(q)
    for name, weight in weights.items():
        got = model.predict(q, segments=[name] * len(q))
        if weight < cut:
            np.testing.assert_allclose(got, glob, rtol=1e-9, atol=1e-12)
            assert model.segment(name) is model.global_model
        else:
            np.testing.assert_allclose(got, sklearn_isotonic(df[df.seg == name], "w").predict(q),
                                       rtol=1e-9, atol=1e-12)


def test_null_and_unseen_keys_get_the_global_map():
    df = segmented_frame(2000, 3, seed=5)
    model = distcal.fit(df, by="seg", weight_col="w")
    q = np.array([0.05, 0.5, 0.95, 0.5, np.nan])
    keys = ["s0", None, "never-seen", np.nan, "s1"]
    got = model.predict(q, segments=keys)
    glob = sklearn_isotonic(df, "w").predict(q[:4])
    np.testing.assert_allclose(got[1:4], glob[1:4], rtol=1e-9)
    assert got[0] == pytest.approx(sklearn_isotonic(df[df.seg == "s0"], "w").predict([0.05])[0])
    assert np.isnan(got[4])
    with pytest.raises(KeyError, match="never-seen"):
        model.segment("never-seen")
    with pytest.raises(TypeError, match="segments=keys"):
        model.predict(q)


def test_several_by_columns():
    rng = np.random.default_rng(6)
    df = segmented_frame(3000, 4, seed=6, weights=False)
    df["version"] = rng.integers(1, 3, len(df))
    model = distcal.fit(df, by=["seg", "version"])
    assert list(model.segments.columns[:2]) == ["seg", "version"]
    assert len(model.segments) == 8
    q = np.linspace(0, 1, 31)
    for (seg, version), group in df.groupby(["seg", "version"]):
        expect = sklearn_isotonic(group, None).predict(q)
        np.testing.assert_allclose(model.segment((seg, version)).predict(q), expect, rtol=1e-9)
    keys = [("s1", 2)] * 10 + [("s1", 9)] * 10
    got = model.predict(np.full(20, 0.4), segments=keys)
    assert got[0] == pytest.approx(
        sklearn_isotonic(df[(df.seg == "s1") & (df.version == 2)], None).predict([0.4])[0])
    assert got[-1] == pytest.approx(sklearn_isotonic(df, None).predict([0.4])[0])
    with pytest.raises(KeyError):
        model.segment("s1")  # two columns: a tuple key


def test_step_and_auto_direction_per_segment():
    rng = np.random.default_rng(7)
    n = 3000
    s = rng.random(n).round(2)
    seg = rng.integers(0, 2, n)
    # segment 1 is decreasing: "auto" must pick each segment's own direction
    p = np.where(seg == 0, s, 1 - s)
    df = pd.DataFrame({"score": s, "label": (rng.random(n) < p).astype(int), "seg": seg})
    model = distcal.fit(df, by="seg", increasing="auto", interpolation="step")
    assert model.segment(0).params["increasing_"] is True
    assert model.segment(1).params["increasing_"] is False
    for g in (0, 1):
        group = df[df.seg == g]
        ir = IsotonicRegression(increasing=bool(g == 0)).fit(group.score, group.label)
        # step maps take the block value at every fitted score
        np.testing.assert_allclose(model.segment(g).predict(group.score),
                                   ir.predict(group.score), rtol=1e-9)


def test_sigmoid_segments_match_sklearn():
    df = segmented_frame(6000, 3, seed=8)
    model = distcal.fit(df, method="sigmoid", by="seg", weight_col="w")
    for name, group in df.groupby("seg"):
        a, b = _sigmoid_calibration(group.score.to_numpy(), group.label.to_numpy(),
                                    group.w.to_numpy())
        assert model.segment(name).params["a"] == pytest.approx(a, rel=1e-4)
        assert model.segment(name).params["b"] == pytest.approx(b, rel=1e-4, abs=1e-6)


def test_histogram_segments_by_brute_force():
    df = segmented_frame(4000, 4, seed=9)
    df.loc[df.index[:3], "seg"] = "tiny"  # fewer rows than bins: falls back
    model = distcal.fit(df, method="histogram", n_bins=5, by="seg", weight_col="w")
    seg = model.segments.set_index("seg")
    assert bool(seg.loc["tiny", "fallback"]) and not seg.drop("tiny").fallback.any()
    for name, group in df[df.seg != "tiny"].groupby("seg"):
        s, y, w = group.score.to_numpy(), group.label.to_numpy(), group.w.to_numpy()
        edges = np.linspace(0.0, 1.0, 6)  # scores in [0, 1]: bins over [0, 1]
        b = np.searchsorted(edges[1:-1], s, side="left")
        rate = np.bincount(b, w * y, 5) / np.bincount(b, w, 5)
        m = model.segment(name)
        np.testing.assert_allclose(m.params["edges"], edges, rtol=1e-12)
        np.testing.assert_allclose(m.predict((edges[:-1] + edges[1:]) / 2), rate, rtol=1e-9)


@pytest.mark.parametrize("method,params", [("modl", {}), ("isotonic", {"interpolation":
                                                                        "centered"})])
def test_segments_equal_separate_fits(method, params):
    df = segmented_frame(3000, 4, seed=10, weights=False)
    model = distcal.fit(df, method=method, by="seg", **params)
    for name, group in df.groupby("seg"):
        assert model.segment(name) == distcal.fit(group, method=method, **params)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 1), st.integers(0, 3),
                          st.floats(0.01, 3.0)), min_size=1, max_size=60))
def test_property_each_segment_is_its_own_isotonic_fit(rows):
    df = pd.DataFrame(rows, columns=["score", "label", "seg", "w"])
    df["score"] = df.score / 4.0
    model = distcal.fit(df, by="seg", weight_col="w")
    q = np.linspace(-0.5, 3.5, 33)
    assert sorted(model.segments.seg.tolist()) == sorted(df.seg.unique().tolist())
    for name, group in df.groupby("seg"):
        np.testing.assert_allclose(model.segment(name).predict(q),
                                   sklearn_isotonic(group, "w").predict(q), rtol=1e-9,
                                   atol=1e-12)
    # routing: each row gets exactly its segment's map
    got = model.predict(df.score, segments=df.seg)
    expect = np.concatenate([model.segment(k).predict([s]) for s, k in zip(df.score, df.seg)])
    np.testing.assert_array_equal(got, expect)


def test_transform_pandas_arrow_and_parquet(tmp_path):
    df = segmented_frame(1500, 4, seed=11)
    model = distcal.fit(df, by="seg", weight_col="w")
    new = df[["score", "seg"]].copy()
    new.loc[new.index[:5], "seg"] = None
    expect = model.predict(new.score, segments=new.seg)
    out = model.transform(new)
    assert list(out.columns) == ["score", "seg", "calibrated"]
    np.testing.assert_array_equal(out.calibrated.to_numpy(), expect)
    table = model.transform(pa.Table.from_pandas(new, preserve_index=False), output_col="p")
    np.testing.assert_array_equal(table.column("p").to_numpy(), expect)
    pq.write_table(pa.Table.from_pandas(new, preserve_index=False), tmp_path / "x.parquet")
    np.testing.assert_array_equal(model.transform(tmp_path / "x.parquet").calibrated, expect)
    with pytest.raises(DataError, match="'seg'"):
        model.transform(new.drop(columns="seg"))


def test_save_load_round_trip(engine, tmp_path):
    df = segmented_frame(3000, 6, seed=12, zipf=True)
    df["v"] = df.index % 2
    with pytest.raises(DataError, match="'market'"):
        distcal.fit(engine(df), by="market")
    for method, params in [("isotonic", {"interpolation": "centered"}), ("sigmoid", {}),
                           ("histogram", {"n_bins": 4})]:
        model = distcal.fit(engine(df), method=method, by=["seg", "v"], weight_col="w",
                            min_segment_weight=20.0, **engine.opts, **params)
        path = tmp_path / method
        model.save(path)
        loaded = distcal.load(path)
        assert isinstance(loaded, SegmentedCalibrationModel)
        assert loaded == model
        assert loaded.segments.fallback.tolist() == model.segments.fallback.tolist()
        out = engine.collect(loaded.transform(engine.frame(df[["score", "seg", "v"]])))
        np.testing.assert_allclose(out.calibrated,
                                   model.predict(out.score, segments=out[["seg", "v"]]),
                                   rtol=1e-12)


def _rewrite_json(path: Path, change) -> None:
    from distcal.model_format import _json_checksum

    meta = json.loads((path / "model.json").read_text())
    change(meta)
    meta["checksum"] = _json_checksum(meta)
    (path / "model.json").write_text(json.dumps(meta))


def _rewrite_table(path: Path, name: str, change) -> None:
    from distcal.model_format import _sha256

    table = change(pq.read_table(path / f"{name}.parquet"))
    pq.write_table(table, path / f"{name}.parquet")
    _rewrite_json(path, lambda m: m["tables"][name].update(
        rows=table.num_rows, sha256=_sha256(path / f"{name}.parquet")))


@pytest.mark.parametrize("damage,match", [
    (lambda p: (p / "blocks.parquet").write_bytes(b"PAR1 not parquet"), "checksum"),
    (lambda p: (p / "segments.parquet").unlink(), "missing"),
    (lambda p: _rewrite_json(p, lambda m: m.update(format_version=99)), "version"),
    (lambda p: _rewrite_json(p, lambda m: m.update(by=["other"])), "expected columns"),
    (lambda p: _rewrite_table(p, "segments", lambda t: pa.concat_tables([t, t])),
     "twice|blocks"),
    (lambda p: _rewrite_table(p, "blocks", lambda t: t.set_column(
        t.schema.get_field_index("prob"), "prob",
        pa.array(np.full(t.num_rows, 1.5)))), "probabilities"),
    (lambda p: _rewrite_table(p, "blocks", lambda t: t.slice(1)), "blocks"),
])
def test_damaged_model_dir_is_a_model_error(tmp_path, damage, match):
    df = segmented_frame(1000, 3, seed=13)
    path = tmp_path / "m"
    distcal.fit(df, by="seg", weight_col="w").save(path)
    damage(path)
    with pytest.raises(ModelError, match=match):
        distcal.load(path)


def test_bad_parameters_and_columns():
    df = segmented_frame(500, 2, seed=14)
    with pytest.raises(DataError, match="'nope'"):
        distcal.fit(df, by="nope")
    with pytest.raises(ParameterError, match="score"):
        distcal.fit(df, by="score")
    with pytest.raises(ParameterError, match="min_segment_weight"):
        distcal.fit(df, by="seg", min_segment_weight=-1)
    with pytest.raises(ParameterError, match="by"):
        distcal.fit(df, by=[])
    df.loc[df.index[:3], "label"] = 2
    with pytest.raises(DataError, match=r"column 'label': 3 rows are outside \[0, 1\]"):
        distcal.fit(df, by="seg")
    dropped = distcal.fit(df, by="seg", on_invalid="drop")
    assert dropped.dropped_rows == 3 and dropped.segments.n_rows.sum() == len(df) - 3
    # the global map's rows are the fit's: its dropped rows too, as the plain fit's
    assert dropped.global_model == distcal.fit(df, on_invalid="drop")
    assert dropped.global_model.dropped_rows == 3


def test_cli_fit_by_and_apply(tmp_path):
    import subprocess
    import sys

    df = segmented_frame(2000, 5, seed=15, zipf=True)
    df["v"] = df.index % 2
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "in.parquet")
    cut = float(df.groupby(["seg", "v"]).w.sum().median())
    run = [sys.executable, "-m", "distcal"]
    r = subprocess.run([*run, "fit", "--input", tmp_path / "in.parquet", "--output",
                        tmp_path / "m", "--by", "seg,v", "--weight-col", "w",
                        "--min-segment-weight", str(cut)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    expect = distcal.fit(df, by=["seg", "v"], weight_col="w", min_segment_weight=cut)
    assert summary["segments"] == len(expect.segments)
    assert summary["fallback"] == int(expect.segments.fallback.sum()) > 0
    assert distcal.load(tmp_path / "m") == expect
    r = subprocess.run([*run, "apply", "--model", tmp_path / "m", "--input",
                        tmp_path / "in.parquet", "--output", tmp_path / "out.parquet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pandas()
    np.testing.assert_array_equal(out.calibrated,
                                  expect.predict(out.score, segments=out[["seg", "v"]]))
    r = subprocess.run([*run, "fit", "--input", tmp_path / "in.parquet", "--output",
                        tmp_path / "m2", "--by", "seg,,v"], capture_output=True, text=True)
    assert r.returncode == 2 and "--by" in r.stderr


@pytest.mark.slow
def test_readme_segments_example_prints_its_table(tmp_path):
    from test_readme import assert_example_prints_its_output

    assert_example_prints_its_output('by="market"', "market  n_rows", tmp_path)


# -- per-segment evaluation and thresholds (evaluate / optimal_threshold by=) ---------

def eval_frame(n: int, n_segments: int, seed: int = 0, null_keys: int = 0) -> pd.DataFrame:
    """Probabilities miscalibrated differently per segment; some segments of one class."""
    rng = np.random.default_rng(seed)
    g = np.concatenate([np.arange(n_segments), rng.integers(0, n_segments, n - n_segments)])
    p = np.round(rng.random(n), 3)
    shift = np.linspace(-0.25, 0.25, n_segments)[g]
    y = (rng.random(n) < np.clip(p + shift, 0, 1)).astype(np.int64)
    df = pd.DataFrame({"prob": p, "label": y, "w": rng.uniform(0.1, 2.0, n),
                       "seg": [f"s{i:04d}" for i in g]})
    df.loc[df.index[:null_keys], "seg"] = None
    return df


def assert_dicts_close(a, b, rtol: float = 1e-9) -> None:
    """Equal JSON-like values, numbers to ``rtol``."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            assert_dicts_close(a[k], b[k], rtol)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_dicts_close(x, y, rtol)
    elif isinstance(a, float) and not isinstance(a, bool):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-13)
    else:
        assert a == b


def numpy_ece(p: np.ndarray, y: np.ndarray, w: np.ndarray, n_bins: int = 10) -> tuple:
    """ECE and MCE over scikit-learn's uniform bins, from the rows (brute force)."""
    ids = np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], p)
    ece, mce = 0.0, 0.0
    for b in np.unique(ids):
        m = ids == b
        gap = abs(np.average(y[m], weights=w[m]) - np.average(p[m], weights=w[m]))
        ece += w[m].sum() / w.sum() * gap
        mce = max(mce, gap)
    return ece, mce


def assert_segments_equal_oracles(rep, df: pd.DataFrame, every: int = 1) -> None:
    """Each segment's row equals scikit-learn's metrics and a numpy ECE of its rows."""
    from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

    table = rep.segments.set_index("seg")
    groups = list(df.dropna(subset=["seg"]).groupby("seg"))
    assert len(table) == len(groups)
    for name, g in groups[::every]:
        row = table.loc[name]
        p, y, w = g.prob.to_numpy(), g.label.to_numpy(), g.w.to_numpy()
        assert row.n_rows == len(g)
        np.testing.assert_allclose(row.weight, w.sum(), rtol=1e-12)
        np.testing.assert_allclose(row.base_rate, np.average(y, weights=w), rtol=1e-9)
        np.testing.assert_allclose(row.mean_prob, np.average(p, weights=w), rtol=1e-9)
        np.testing.assert_allclose(row.log_loss, log_loss(y, p, sample_weight=w, labels=[0, 1]),
                                   rtol=1e-9)
        np.testing.assert_allclose(row.brier, brier_score_loss(y, p, sample_weight=w),
                                   rtol=1e-9, atol=1e-15)
        ece, mce = numpy_ece(p, y, w)
        np.testing.assert_allclose([row.ece, row.mce], [ece, mce], rtol=1e-9, atol=1e-15)
        if 0 < y.sum() < len(y):
            np.testing.assert_allclose(row.auc, roc_auc_score(y, p, sample_weight=w), rtol=1e-9)
        else:
            assert np.isnan(row.auc)


@pytest.mark.parametrize("n_segments,n", [(1, 2000), (5, 3000), (2000, 8000)])
def test_evaluate_by_segments_equal_sklearn_per_group(n_segments, n):
    df = eval_frame(n, n_segments, seed=40 + n_segments, null_keys=11)
    rep = distcal.evaluate(df, weight_col="w", by="seg")
    assert_segments_equal_oracles(rep, df, every=max(1, n_segments // 60))
    # the worst calibrated first
    assert (np.diff(rep.segments.ece.to_numpy()) <= 0).all()
    # the rest of the report is the global one, null keys included
    plain = distcal.evaluate(df, weight_col="w")
    assert_dicts_close({k: v for k, v in rep.to_dict().items() if not k.startswith("segment")},
                       plain.to_dict())
    assert rep.n_rows == len(df) and rep.segments.n_rows.sum() == len(df) - 11


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 0.1, 0.35, 0.5, 0.9, 1.0]),
                          st.integers(0, 1), st.integers(1, 3)), min_size=1, max_size=60))
def test_property_each_segment_is_its_own_evaluation(rows):
    df = pd.DataFrame(rows, columns=["seg", "prob", "label", "w"])
    rep = distcal.evaluate(df, weight_col="w", by="seg")
    table = rep.segments.set_index("seg")
    for name, g in df.groupby("seg"):
        own = distcal.evaluate(g, weight_col="w")
        row = table.loc[name]
        assert row.n_rows == own.n_rows
        np.testing.assert_allclose([row.weight, row.brier, row.log_loss, row.ece, row.mce],
                                   [own.weight_total, own.brier, own.log_loss, own.ece, own.mce],
                                   rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(row.auc, own.auc, rtol=1e-12, equal_nan=True)
        pd.testing.assert_frame_equal(rep.segment_curve(name), own.calibration_curve,
                                      rtol=1e-12)


def test_evaluate_by_fractional_labels_several_columns_and_quantile_bins():
    rng = np.random.default_rng(44)
    n = 600
    df = pd.DataFrame({"prob": rng.random(n), "label": rng.integers(0, 5, n) / 4,
                       "a": rng.integers(0, 3, n), "b": rng.choice(["x", "y"], n)})
    rep = distcal.evaluate(df, by=["a", "b"], strategy="quantile", n_bins=4)
    assert rep.segment_by == ["a", "b"] and len(rep.segments) == 6
    edges = np.asarray(rep.bin_edges)
    assert edges[0] == df.prob.min() and edges[-1] == df.prob.max()  # the global quantiles
    for (a, b), g in df.groupby(["a", "b"]):
        row = rep.segments[(rep.segments.a == a) & (rep.segments.b == b)].iloc[0]
        np.testing.assert_allclose(row.brier, np.mean((g.prob - g.label) ** 2), rtol=1e-12)
        own = distcal.evaluate(g, bins=edges)  # the segments share the report's bins
        np.testing.assert_allclose([row.ece, row.mce, row.log_loss],
                                   [own.ece, own.mce, own.log_loss], rtol=1e-12)
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["segment_by"] == ["a", "b"] and len(d["segments"]["ece"]) == 6


def test_evaluate_by_bad_input():
    df = eval_frame(300, 3, seed=45)
    with pytest.raises(DataError, match="'nope'"):
        distcal.evaluate(df, by="nope")
    with pytest.raises(ParameterError, match="prob"):
        distcal.evaluate(df, by="prob")
    df.loc[df.index[:2], "prob"] = 1.5
    with pytest.raises(DataError, match=r"column 'prob': 2 rows are outside \[0, 1\]"):
        distcal.evaluate(df, by="seg")
    rep = distcal.evaluate(df, by="seg", on_invalid="drop")
    assert rep.dropped_rows == 2 and rep.segments.n_rows.sum() == len(df) - 2
    with pytest.raises(KeyError):
        rep.segment_curve("zzz")


def test_a_segment_column_of_vectors_is_counted_over_the_whole_input(engine):
    """Vectors in a by column are a DataError counting the rows of every partition (each
    partition used to raise its own count from inside a worker), whatever on_invalid."""
    df = pd.DataFrame({"score": np.linspace(0, 1, 40), "label": np.arange(40) % 2,
                       "g": [[1.0, 2.0]] * 40})
    msg = r"column 'g' \(segment\): 40 rows hold vectors \(lists or arrays\)"
    for call in (lambda d: distcal.fit(d, by="g", **engine.opts),
                 lambda d: distcal.optimal_threshold(d, by="g", on_invalid="drop",
                                                     **engine.opts),
                 lambda d: distcal.summarize(d, by="g", **engine.opts)):
        with pytest.raises(DataError, match=msg):
            call(engine(df, npartitions=4))


def test_negative_zero_and_zero_are_one_segment_named_zero(engine):
    """-0.0 == 0.0: one segment of all their rows, named 0.0 whichever comes first (it was
    named by the first row pandas or a Spark partition saw)."""
    n = 200
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"score": rng.random(n), "label": rng.integers(0, 2, n),
                       "g": np.where(np.arange(n) < n // 2, -0.0, 0.0)})
    model = distcal.fit(engine(df, npartitions=2), by="g", **engine.opts)
    report = distcal.evaluate(engine(df.assign(prob=df.score), npartitions=2), by="g",
                              **engine.opts)
    for table in (model.segments, report.segments):
        assert table["g"].tolist() == [0.0] and not np.signbit(table["g"].iloc[0])
        assert table["n_rows"].tolist() == [n]
    want = distcal.fit(df.drop(columns="g")).predict(df.score)
    np.testing.assert_array_equal(model.predict(df.score, segments=df.g), want)


@pytest.mark.parametrize("engine", ["dask", "spark"], indirect=True)
def test_evaluate_and_threshold_by_equal_local_in_fixed_work(engine):
    """1, 5 and 2,000 segments evaluated and thresholded on a cluster: the local engine's
    numbers (1e-9), and as many Spark jobs or Dask tasks for 2,000 segments as for one."""
    work = {}
    for n_segments, n in ((1, 1000), (5, 1500), (2000, 6000)):
        df = eval_frame(n, n_segments, seed=60 + n_segments, null_keys=6)
        rep, work[n_segments] = engine.work(lambda df=df: distcal.evaluate(
            engine(df), weight_col="w", by="seg", **engine.opts))
        local = distcal.evaluate(df, weight_col="w", by="seg")
        assert_dicts_close({k: v for k, v in rep.to_dict().items() if k != "segments"},
                           {k: v for k, v in local.to_dict().items() if k != "segments"})
        pd.testing.assert_frame_equal(
            rep.segments.sort_values("seg", kind="stable").reset_index(drop=True),
            local.segments.sort_values("seg", kind="stable").reset_index(drop=True), rtol=1e-9)
        scored = df.rename(columns={"prob": "score"})
        res = distcal.optimal_threshold(engine(scored), weight_col="w", cost_fn=2.0, by="seg",
                                        **engine.opts)
        expect = distcal.optimal_threshold(scored, weight_col="w", cost_fn=2.0, by="seg")
        assert res.threshold == expect.threshold
        pd.testing.assert_frame_equal(res.segments, expect.segments, rtol=1e-9)
    assert work[1] == work[2000], work  # no job or task per segment


def brute_threshold(score: np.ndarray, z: np.ndarray) -> tuple[float, float]:
    """The largest t minimising the sum of z over score >= t (t = +inf: nothing)."""
    best_t, best = np.inf, 0.0
    for t in np.unique(score)[::-1]:
        c = z[score >= t].sum()
        if c < best - 1e-9:
            best_t, best = float(t), float(c)
    return best_t, best


@pytest.mark.parametrize("n_segments,n", [(1, 500), (5, 1500), (2000, 6000)])
def test_threshold_by_segments_equal_brute_force_per_group(n_segments, n):
    df = eval_frame(n, n_segments, seed=50 + n_segments, null_keys=5)
    df = df.rename(columns={"prob": "score"})
    df["w"] = np.maximum(np.round(df.w * 4) / 4, 0.25)  # exact sums: ties are ties
    res = distcal.optimal_threshold(df, weight_col="w", cost_fp=1.0, cost_fn=3.0, by="seg")
    glob = distcal.optimal_threshold(df, weight_col="w", cost_fp=1.0, cost_fn=3.0)
    assert res.threshold == glob.threshold
    np.testing.assert_allclose([res.cost, res.tp, res.fp], [glob.cost, glob.tp, glob.fp],
                               rtol=1e-12)
    table = res.segments.set_index("seg")
    groups = list(df.dropna(subset=["seg"]).groupby("seg"))
    assert len(table) == len(groups)
    for name, g in groups[::max(1, n_segments // 60)]:
        row = table.loc[name]
        w, y, s = g.w.to_numpy(), g.label.to_numpy(), g.score.to_numpy()
        t, extra = brute_threshold(s, w * (1.0 - y) - 3.0 * w * y)
        assert row.threshold == t
        np.testing.assert_allclose(row.cost, 3.0 * (w * y).sum() + extra, rtol=1e-12)
        pos = s >= t
        np.testing.assert_allclose([row.tp, row.fp, row.fn, row.tn],
                                   [(w * y)[pos].sum(), (w * (1 - y))[pos].sum(),
                                    (w * y)[~pos].sum(), (w * (1 - y))[~pos].sum()],
                                   rtol=1e-12, atol=1e-12)
        own = distcal.optimal_threshold(g, weight_col="w", cost_fp=1.0, cost_fn=3.0)
        assert (row.threshold, row.cost, row.predict_none, row.n_rows) == \
            (own.threshold, own.cost, own.predict_none, own.n_rows)


def test_threshold_by_per_row_loss():
    rng = np.random.default_rng(52)
    df = pd.DataFrame({"score": rng.integers(0, 30, 400).astype(float),
                       "z": rng.integers(-5, 6, 400).astype(float),
                       "seg": rng.choice(["a", "b", "c"], 400)})
    res = distcal.optimal_threshold(df, loss_col="z", by="seg")
    for name, g in df.groupby("seg"):
        row = res.segments.set_index("seg").loc[name]
        t, best = brute_threshold(g.score.to_numpy(), g.z.to_numpy())
        assert (row.threshold, row.cost) == (t, best)
        assert np.isnan(row.tp)
    d = json.loads(json.dumps(res.to_dict()))
    assert [r["seg"] for r in d["segments"]] == ["a", "b", "c"]


def test_cli_evaluate_and_threshold_by(tmp_path, capsys):
    from distcal.cli.main import main

    df = eval_frame(3000, 30, seed=53, null_keys=4)
    df["score"] = df.prob
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "in.parquet")
    assert main(["evaluate", "--input", str(tmp_path / "in.parquet"), "--output",
                 str(tmp_path / "rep"), "--prob-col", "prob", "--weight-col", "w",
                 "--by", "seg"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["segments"] == {"prob": 30}
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    expect = distcal.evaluate(df, weight_col="w", by="seg").segments
    assert doc["segment_by"] == ["seg"]
    assert doc["segments"]["seg"] == expect.seg.tolist()  # worst calibrated first
    np.testing.assert_allclose(doc["segments"]["ece"], expect.ece, rtol=1e-12)
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "Segments by seg: prob" in page and "and 10 more segments" in page
    worst = expect.iloc[0]
    assert f"<th scope=\"row\">{worst.seg}</th>" in page
    assert f"<th scope=\"row\">{expect.iloc[25].seg}</th>" not in page  # beyond the top 20
    assert "fig-segments_reliability" in page
    assert (tmp_path / "rep" / "segments_reliability.png").stat().st_size > 1000
    assert main(["threshold", "--input", str(tmp_path / "in.parquet"), "--weight-col", "w",
                 "--cost-fn", "2", "--by", "seg"]) == 0
    out = json.loads(capsys.readouterr().out)
    res = distcal.optimal_threshold(df, weight_col="w", cost_fn=2.0, by="seg")
    assert out["threshold"] == res.threshold and len(out["segments"]) == 30
    assert out["segments"] == res.to_dict()["segments"]


@pytest.mark.parametrize("increasing", [True, False])
def test_compiled_segment_pav_equals_sklearn_and_the_python_path(monkeypatch, increasing):
    """The numba loop (taken from 100,000 blocks on) on small inputs: every segment's pooled
    means equal scikit-learn's IsotonicRegression of that segment, and the blocks equal those
    of the Python loop / scipy path."""
    from distcal.core import segment_pav
    from distcal.core.isotonic import Blocks

    rng = np.random.default_rng(31)
    sizes = np.concatenate([rng.integers(0, 5, 60), rng.integers(60, 200, 4)])
    rng.shuffle(sizes)
    starts = np.concatenate(([0], np.cumsum(sizes)))
    s = np.concatenate([np.sort(rng.choice(10_000, k, replace=False)) for k in sizes]) / 1e4
    w = rng.integers(1, 5, s.shape[0]).astype(np.float64)
    pos = np.minimum(w, rng.integers(0, 4, s.shape[0])).astype(np.float64)
    blocks = Blocks(s, s, w, pos, pos / w, s)
    monkeypatch.setattr(segment_pav, "_JIT_MIN_BLOCKS", 0)
    assert segment_pav._jit_pav_runs() is not None  # numba is a dependency
    got, got_starts = segment_pav.pav_segments(blocks, starts, increasing)
    monkeypatch.setattr(segment_pav, "_JIT_MIN_BLOCKS", 10**12)
    ref, ref_starts = segment_pav.pav_segments(blocks, starts, increasing)
    np.testing.assert_array_equal(got_starts, ref_starts)
    for f in ("score_min", "score_max", "weight", "positives"):
        np.testing.assert_array_equal(getattr(got, f), getattr(ref, f))
    np.testing.assert_allclose(got.prob, ref.prob, rtol=1e-15, atol=0)
    for i in np.flatnonzero(sizes):
        a, b = starts[i], starts[i + 1]
        expect = IsotonicRegression(increasing=increasing).fit(
            s[a:b], (pos / w)[a:b], sample_weight=w[a:b]).predict(s[a:b])
        lo, hi = got_starts[i], got_starts[i + 1]
        mine = got.prob[lo:hi][np.searchsorted(got.score_min[lo:hi], s[a:b], "right") - 1]
        np.testing.assert_allclose(mine, expect, rtol=0, atol=1e-12)


@pytest.mark.parametrize("compiled", [True, False])
def test_unit_weight_pooling_equals_pandas_and_fits_equal_sklearn(monkeypatch, compiled):
    """Unit weights and 0/1 labels take their own pooling by (segment, score): compiled (from
    100,000 rows on; numpy sorts segments of >= _NUMPY_SORT_ROWS rows) or numpy. Its tables
    equal pandas' groupby of the live rows (ties, -0.0 and 0.0, null keys), and a fit without
    weights equals scikit-learn per segment."""
    from distcal.core import keyed as core_keyed

    monkeypatch.setattr(core_keyed, "_JIT_MIN_ROWS", 0 if compiled else 10**12)
    monkeypatch.setattr(core_keyed, "_NUMPY_SORT_ROWS", 20)
    if compiled:
        assert core_keyed._jit_pool_unit_rows() is not None  # numba is a dependency
    rng = np.random.default_rng(13)
    n, m = 4000, 60
    codes = np.minimum(rng.zipf(1.5, n), m) - 1 - (rng.random(n) < 0.02)  # -1: null key
    score = rng.choice(np.concatenate([np.round(rng.random(300), 2), [-0.0, 0.0, -1.5]]), n)
    label = (rng.random(n) < 0.4).astype(np.float64)
    keys = [(f"k{i}",) for i in range(m)]
    got = core_keyed._pool_unit(codes, keys, score, label)
    live = codes >= 0
    expect = (pd.DataFrame({"c": codes[live], "s": score[live] + 0.0, "y": label[live]})
              .groupby(["c", "s"]).agg(n=("y", "size"), p=("y", "sum")).reset_index())
    present = np.unique(codes[live])
    assert got.keys == [keys[c] for c in present]
    np.testing.assert_array_equal(got.starts, np.append(
        np.searchsorted(expect["c"].to_numpy(), present), len(expect)))
    t = got.table
    np.testing.assert_array_equal(t.score, expect["s"].to_numpy())
    assert not np.any(np.signbit(t.score) & (t.score == 0.0))  # -0.0 pooled with 0.0
    np.testing.assert_array_equal(t.count, expect["n"].to_numpy())
    np.testing.assert_array_equal(t.weight, expect["n"].to_numpy(np.float64))
    np.testing.assert_array_equal(t.positives, expect["p"].to_numpy())
    np.testing.assert_array_equal(t.label_sum, expect["p"].to_numpy())
    assert got.binary.all()

    df = segmented_frame(3000, 40, seed=7, weights=False, zipf=True)
    model = distcal.fit(df, by="seg")
    q = np.linspace(-0.1, 1.1, 41)
    for name, group in list(df.groupby("seg"))[::3]:
        np.testing.assert_allclose(model.segment(name).predict(q),
                                   sklearn_isotonic(group, None).predict(q), rtol=1e-9,
                                   atol=1e-12)


@pytest.mark.parametrize("method", ["isotonic", "sigmoid"])
def test_a_segment_of_the_minimum_weight_in_tenths_does_not_fall_back(engine, method):
    # 50 rows of weight 0.1 weigh 5, though adding 0.1 fifty times gives 4.999999999999998
    # (in other orders, other last bits): min_segment_weight=5 keeps the segment on every
    # engine; 49 rows fall back.
    rng = np.random.default_rng(5)
    n_a, n_b, n_c = 50, 49, 200
    df = pd.DataFrame({"score": np.round(rng.random(n_a + n_b + n_c), 2),
                       "label": rng.integers(0, 2, n_a + n_b + n_c).astype(float),
                       "w": np.r_[np.full(n_a + n_b, 0.1), np.ones(n_c)],
                       "seg": ["a"] * n_a + ["b"] * n_b + ["c"] * n_c})
    for order in (df, df.iloc[::-1]):
        model = distcal.fit(engine(order.reset_index(drop=True)), method=method, by="seg",
                            weight_col="w", min_segment_weight=5.0, **engine.opts)
        fallback = model.segments.set_index("seg")["fallback"]
        assert not fallback["a"] and fallback["b"] and not fallback["c"]
