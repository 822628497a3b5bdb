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
from distcal import DataError, ModelError, SegmentedCalibrationModel
from distcal.errors import ParameterError


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


@pytest.mark.parametrize("n_segments,n", [(1, 3000), (5, 5000), (2000, 12000)])
def test_isotonic_segments_equal_sklearn_per_group(n_segments, n):
    df = segmented_frame(n, n_segments, seed=n_segments)
    model = distcal.fit(df, by="seg", weight_col="w")
    assert isinstance(model, SegmentedCalibrationModel)
    assert len(model.segments) == n_segments
    q = np.linspace(-0.1, 1.1, 57)
    groups = list(df.groupby("seg"))
    for name, group in groups[:: max(1, len(groups) // 300)]:
        expect = sklearn_isotonic(group, "w").predict(q)
        np.testing.assert_allclose(model.segment(name).predict(q), expect, rtol=1e-9,
                                   atol=1e-12)
        np.testing.assert_allclose(model.predict(q, segments=[name] * len(q)), expect,
                                   rtol=1e-9, atol=1e-12)
    # The global map is the unsegmented fit of all rows (scikit-learn too).
    np.testing.assert_allclose(model.global_model.predict(q),
                               sklearn_isotonic(df, "w").predict(q), rtol=1e-9, atol=1e-12)


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


def test_save_load_round_trip(tmp_path):
    df = segmented_frame(3000, 6, seed=12, zipf=True)
    df["v"] = df.index % 2
    for method, params in [("isotonic", {"interpolation": "centered"}), ("sigmoid", {}),
                           ("histogram", {"n_bins": 4})]:
        model = distcal.fit(df, method=method, by=["seg", "v"], weight_col="w",
                            min_segment_weight=20.0, **params)
        path = tmp_path / method
        model.save(path)
        loaded = distcal.load(path)
        assert isinstance(loaded, SegmentedCalibrationModel)
        assert loaded == model
        assert loaded.segments.fallback.tolist() == model.segments.fallback.tolist()
        np.testing.assert_array_equal(loaded.transform(df).calibrated,
                                      model.transform(df).calibrated)


def _rewrite_json(path: Path, change) -> None:
    from distcal.model import _json_checksum

    meta = json.loads((path / "model.json").read_text())
    change(meta)
    meta["checksum"] = _json_checksum(meta)
    (path / "model.json").write_text(json.dumps(meta))


def _rewrite_table(path: Path, name: str, change) -> None:
    from distcal.model import _sha256

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


def test_readme_segments_example_prints_its_table(tmp_path):
    from test_readme import readme_blocks, run_block

    example = next(b for b in readme_blocks("python") if 'by="market"' in b)
    table = next(b for b in readme_blocks("") if "market  n_rows" in b)
    r = run_block(example, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == table.strip()
