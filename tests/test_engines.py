"""Every engine gives the local engine's answer: binary fits, thresholds, evaluations,
transforms and errors, on Spark (local[2]) and a Dask cluster, over partitions of every
shape (one, many, skewed, empty) and rows in any order.

The local engine is itself tested against scikit-learn, Spark MLlib and brute force
(test_isotonic_sklearn.py, test_sigmoid.py, test_histogram.py, test_threshold.py,
test_evaluate.py, test_spark.py for MLlib); here its model must come back exactly
(blocks equal, parameters to 1e-9) from every engine, which runs the distributed passes
over several score ranges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores

import distcal


@pytest.mark.parametrize("partitions", [1, 4, 13])
def test_isotonic_equals_local(engine, partitions):
    df = make_scores(30_000, seed=partitions, weights=True)
    model = distcal.fit(engine(df, npartitions=partitions), weight_col="w")
    local = distcal.fit(df, weight_col="w")
    assert model == local
    q = np.linspace(-0.1, 1.1, 1201)
    np.testing.assert_allclose(model.predict(q), local.predict(q), rtol=1e-9, atol=1e-12)


def test_rows_in_any_order_any_ranges_and_skewed_or_empty_partitions(engine):
    df = make_scores(20_000, seed=2, ties=False, weights=True)
    local = distcal.fit(df, weight_col="w")
    shuffled = df.sample(frac=1.0, random_state=3).reset_index(drop=True)
    # one range, a few, many (locally: in memory, or spilled as sorted runs of a few rows)
    ranges = ([{}, {"memory_rows": 3000}, {"memory_rows": 300, "batch_rows": 250}]
              if engine.name == "local" else [{"n_ranges": k} for k in (1, 3, 16)])
    for opts in ranges:
        assert distcal.fit(engine(shuffled, npartitions=7), weight_col="w", **opts) == local
    assert distcal.fit(engine(shuffled, skewed=True), weight_col="w") == local
    edges = pd.DataFrame({"score": [-np.inf, 0.2, 0.2, 0.5, np.inf, 0.7] * 50,
                          "label": [0, 0, 1, 1, 1, 0] * 50})
    assert distcal.fit(engine(edges, npartitions=40)) == distcal.fit(edges)  # many empty
    one = pd.DataFrame({"score": [0.4] * 100, "label": [1, 0, 0, 0] * 25})
    m = distcal.fit(engine(one), **engine.opts)
    assert len(m.blocks) == 1 and m.blocks.prob.iloc[0] == 0.25


@pytest.mark.parametrize("method,params", [
    ("sigmoid", {}), ("histogram", {"strategy": "quantile", "n_bins": 12}),
    ("histogram", {}), ("isotonic", {"increasing": "auto", "interpolation": "step"}),
    ("isotonic", {"y_min": 0.1, "y_max": 0.8}),
])
def test_other_methods_equal_local(engine, method, params):
    df = make_scores(20_000, seed=5, weights=True)
    assert distcal.fit(engine(df, npartitions=6), method=method, weight_col="w", **params) == \
        distcal.fit(df, method=method, weight_col="w", **params)


def test_auto_direction_with_fractional_labels(engine):
    rng = np.random.default_rng(6)
    s = rng.random(3000)
    df = pd.DataFrame({"score": s, "label": np.clip(1 - s + rng.normal(0, .2, 3000), 0, 1)})
    model = distcal.fit(engine(df), increasing="auto")
    assert model.params["increasing_"] is False
    assert model == distcal.fit(df, increasing="auto")


def test_threshold_and_evaluate_equal_local(engine):
    df = make_scores(20_000, seed=7, weights=True)
    for kw in ({"cost_fp": 1, "cost_fn": 3}, {"cost_fp": 2, "cost_fn": 1}):
        a = distcal.optimal_threshold(engine(df, npartitions=9), weight_col="w", **kw)
        b = distcal.optimal_threshold(df, weight_col="w", **kw)
        assert a.threshold == b.threshold
        for f in ("cost", "n_positive_predicted", "tp", "fp", "tn", "fn"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9)
    z = df.assign(z=np.where(df.label == 1, -1.0, 0.5))
    a = distcal.optimal_threshold(engine(z), loss_col="z", weight_col="w")
    b = distcal.optimal_threshold(z, loss_col="z", weight_col="w")
    assert a.threshold == b.threshold and a.cost == pytest.approx(b.cost, rel=1e-9)
    p = df.rename(columns={"score": "prob"})
    for strategy in ("uniform", "quantile"):
        a = distcal.evaluate(engine(p, npartitions=5), weight_col="w", strategy=strategy)
        b = distcal.evaluate(p, weight_col="w", strategy=strategy)
        for f in ("brier", "log_loss", "ece", "mce", "auc", "reliability", "resolution",
                  "uncertainty", "accuracy", "reliability_exact", "resolution_exact",
                  "adaptive_ece", "adaptive_mce", "smece", "smece_sigma"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9, abs=1e-12), f
        pd.testing.assert_frame_equal(a.calibration_curve, b.calibration_curve, rtol=1e-9)
        pd.testing.assert_frame_equal(a.roc, b.roc, rtol=1e-9)
        assert a.confusion == pytest.approx(b.confusion, rel=1e-9)


def test_fit_and_threshold_and_evaluate_many(engine):
    df = make_scores(20_000, seed=15, weights=True)
    model, res = distcal.fit_and_threshold(engine(df, npartitions=4), weight_col="w",
                                           cost_fn=4)
    assert model == distcal.fit(df, weight_col="w")
    alone = distcal.optimal_threshold(df, weight_col="w", cost_fn=4)
    assert res.threshold == alone.threshold and res.cost == pytest.approx(alone.cost, rel=1e-9)
    rng = np.random.default_rng(16)
    p = rng.random(4000)
    two = pd.DataFrame({"raw": p, "cal": np.sqrt(p),
                        "label": (rng.random(4000) < p).astype(int)})
    two.loc[0, "cal"] = np.nan
    two.loc[1, "raw"] = 2.0  # invalid in one column each: dropped for both
    a = distcal.evaluate_many(engine(two), ["raw", "cal"], on_invalid="drop")
    b = distcal.evaluate_many(two, ["raw", "cal"], on_invalid="drop")
    for c in ("raw", "cal"):
        assert a[c].n_rows == b[c].n_rows == 3998 and a[c].dropped_rows == 2
        assert a[c].auc == pytest.approx(b[c].auc, rel=1e-9)
        assert a[c].brier == pytest.approx(b[c].brier, rel=1e-9)
    with pytest.raises(distcal.DataError) as remote:
        distcal.evaluate_many(engine(two), ["raw", "cal"])
    with pytest.raises(distcal.DataError) as local:
        distcal.evaluate_many(two, ["raw", "cal"])
    assert str(remote.value) == str(local.value)


@pytest.mark.parametrize("df,kw", [
    (pd.DataFrame({"score": [0.1, None, 0.3, float("nan")], "label": [0, 1, 0, 1]}), {}),
    (pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": [0.0, 2.0, None, 1.0]}), {}),
    (pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": ["0", "x", "1", "9"]}), {}),
    (pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": [0, 1, 0, 1],
                   "w": [1.0, -1.0, np.inf, 1.0]}), {"weight_col": "w"}),
    (pd.DataFrame({"score": [0.1, 0.2], "label": [0, 1]}), {"label_col": "target"}),
    (pd.DataFrame({"score": [0.1, 0.2], "label": [0, 1], "w": [0.0, 0.0]}),
     {"weight_col": "w"}),
])
def test_bad_input_same_errors(engine, df, kw):
    with pytest.raises(distcal.DataError) as local:
        distcal.fit(df, **kw)
    with pytest.raises(distcal.DataError) as remote:
        distcal.fit(engine(df, npartitions=2), **kw)
    assert str(local.value) == str(remote.value)


def test_drop_invalid(engine):
    df = pd.DataFrame({"score": [0.1, None, 0.3, 0.5, 0.7], "label": [0, 1, 5, 1, 1]})
    model = distcal.fit(engine(df), on_invalid="drop")
    assert model.dropped_rows == 2 and model.n_rows == 3
    assert model == distcal.fit(df, on_invalid="drop")


@pytest.mark.parametrize("engine", ["dask", "spark"], indirect=True)
def test_forced_engine_on_local_data(engine, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    df = make_scores(5000, seed=18)
    assert distcal.fit(df, engine=engine.name) == distcal.fit(df)
    assert distcal.optimal_threshold(df, engine=engine.name) == distcal.optimal_threshold(df)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "s.parquet")
    assert distcal.fit(str(tmp_path / "s.parquet"), engine=engine.name) == distcal.fit(df)


@pytest.mark.parametrize("method,params", [
    ("isotonic", {}), ("isotonic", {"interpolation": "step"}), ("sigmoid", {}),
    ("histogram", {"strategy": "quantile", "n_bins": 7}), ("histogram", {"n_bins": 4}),
    ("isotonic", {"increasing": False}),
])
def test_transform_every_map_kind(engine, method, params):
    rng = np.random.default_rng(12)
    df = make_scores(4000, seed=12)
    df.loc[:3, "score"] = [0.25, 0.5, 0.0, 1.0]  # on histogram edges
    model = distcal.fit(df, method=method, **params)
    q = np.concatenate([df.score.to_numpy(), rng.uniform(-0.5, 1.5, 2000),
                        [np.inf, -np.inf, np.nan], np.asarray(model.params.get("edges", []))])
    out = engine.collect(model.transform(engine.frame(pd.DataFrame({"score": q,
                                                                    "i": np.arange(len(q))}))))
    assert list(out.columns) == ["score", "i", "calibrated"]
    got = out.sort_values("i")["calibrated"].to_numpy()
    # Spark evaluates in the JVM with np.interp's formula: equal to rounding
    np.testing.assert_allclose(got, model.predict(q), rtol=0, atol=1e-15, equal_nan=True)


@pytest.mark.parametrize("method,params", [("isotonic", {"interpolation": "step"}),
                                           ("modl", {})])
def test_transform_of_negative_zero_is_that_of_zero(engine, method, params):
    # -0.0 == 0.0: a map whose block starts at 0 gives both its value (Spark ML's
    # Bucketizer alone orders -0.0 below 0.0, as Java's Arrays.binarySearch does).
    df = pd.DataFrame({"score": [-1.0, -0.5, -0.5, 0.0, 0.0, 0.5, 0.5, 1.0] * 50,
                       "label": [0, 0, 1, 1, 1, 1, 1, 1] * 50})
    model = distcal.fit(df, method=method, **params)
    q = pd.DataFrame({"score": [-0.0, 0.0, -0.5, np.nextafter(0.0, -1.0)], "i": range(4)})
    out = engine.collect(model.transform(engine.frame(q)))
    got = out.sort_values("i")["calibrated"].to_numpy(dtype=float)
    np.testing.assert_array_equal(got, model.predict(q.score.to_numpy()))
    assert got[0] == got[1] != got[3]


def test_transform_infinite_blocks(engine):
    df = pd.DataFrame({"score": [-np.inf, -np.inf, 0.2, 0.4, 0.6, np.inf],
                       "label": [0, 0, 1, 0, 1, 1]})
    model = distcal.fit(engine(df))
    assert model == distcal.fit(df)
    q = [-np.inf, -1e300, 0.2, 0.5, 0.6, 1e300, np.inf, np.nan]
    out = engine.collect(model.transform(engine.frame(pd.DataFrame({"score": q,
                                                                    "i": range(len(q))}))))
    got = out.sort_values("i")["calibrated"].to_numpy(dtype=float)
    np.testing.assert_allclose(got, model.predict(q), atol=1e-15, equal_nan=True)


def test_decimal_scores_read_as_correctly_rounded_doubles(engine, tmp_path):
    """A Parquet column of decimal(38, 18) scores is read as float(Decimal) on every
    engine (Arrow's own decimal cast is an ulp off for about half of such values, and
    the step map's blocks then end at other doubles than a pandas fit's)."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    digits = rng.integers(0, 10, (300, 18))
    values = [decimal.Decimal("0." + "".join(map(str, d))) for d in digits]
    labels = (rng.random(300) < 0.5).astype(int)
    pq.write_table(pa.table({"score": pa.array(values, type=pa.decimal128(38, 18)),
                             "label": labels}), tmp_path / "dec.parquet")
    exact = pd.DataFrame({"score": [float(v) for v in values], "label": labels})
    want = distcal.fit(exact, interpolation="step")
    got = distcal.fit(engine.read_parquet(tmp_path / "dec.parquet"), interpolation="step",
                      **engine.opts)
    for c in ("score_min", "score_max"):
        np.testing.assert_array_equal(got.blocks[c], want.blocks[c])
    np.testing.assert_array_equal(got.predict(exact.score), want.predict(exact.score))
