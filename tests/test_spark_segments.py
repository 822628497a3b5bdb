"""Per-segment calibration on Spark local[2]: separate fits per group, one job for all segments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_segments import assert_segments_equal_sklearn, segmented_frame

import distcal


def _jobs_of(spark, group: str, action) -> tuple[object, int]:
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return result, len(sc.statusTracker().getJobIdsForGroup(group))


@pytest.mark.parametrize("n_segments,n", [(1, 3000), (5, 4000), (2000, 10000)])
def test_isotonic_segments_equal_sklearn_and_local(spark, n_segments, n):
    df = segmented_frame(n, n_segments, seed=20 + n_segments)
    df.loc[df.index[:7], "seg"] = None
    model, jobs = _jobs_of(spark, f"seg{n_segments}", lambda: distcal.fit(
        spark.createDataFrame(df), by="seg", weight_col="w", n_ranges=4))
    # Opening: a count and a sample (ranges chosen from the data); Spark's range
    # sampling; the one pass over the ranges: whatever the number of segments
    assert jobs <= 6
    assert model == distcal.fit(df, by="seg", weight_col="w")
    assert_segments_equal_sklearn(model, df)


@pytest.mark.parametrize("method,params", [
    ("isotonic", {"interpolation": "step", "increasing": "auto"}),
    ("isotonic", {"interpolation": "centered"}), ("histogram", {"n_bins": 4}),
    ("sigmoid", {}),
])
def test_methods_and_jvm_transform_equal_local(spark, method, params):
    rng = np.random.default_rng(21)
    df = segmented_frame(3000, 40, seed=21, weights=False, zipf=True)
    df["v"] = rng.integers(0, 2, len(df))
    df.loc[df.index[:5], "v"] = None
    sdf = spark.createDataFrame(df)
    model = distcal.fit(sdf, method=method, by=["seg", "v"], n_ranges=3,
                        min_segment_weight=10, **params)
    local = distcal.fit(df, method=method, by=["seg", "v"], min_segment_weight=10, **params)
    if method == "sigmoid":  # Newton's optimum: to rounding of sums in another order
        q = np.linspace(-0.5, 1.5, 9)
        for key in local.segments[["seg", "v"]].itertuples(index=False, name=None):
            np.testing.assert_allclose(model.segment(key).predict(q),
                                       local.segment(key).predict(q), rtol=1e-6)
    else:
        assert model == local
    # Transform inside the JVM: null keys, unseen keys, NaN and infinite scores.
    new = pd.DataFrame({"score": [0.1, 0.5, np.nan, np.inf, -np.inf, 0.7, 0.3, 0.9],
                        "seg": ["s0", None, "s1", "s0", "s0", "zzz", "s2", "s1"],
                        "v": [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, None, 1.0]})
    new = pd.concat([new, df[["score", "seg", "v"]].head(300)], ignore_index=True)
    # input columns named like the transform's internal ones are kept as they are
    new["_g"], new["_b"] = np.arange(len(new)), "x"
    out_df = model.transform(spark.createDataFrame(new), output_col="p")
    plan = out_df._jdf.queryExecution().executedPlan().toString()
    assert "Python" not in plan and "Arrow" not in plan
    # the small tables are local relations (a Python RDD would run Python
    # workers when broadcast), and the pieces are not literals in the plan
    assert "ExistingRDD" not in plan and "element_at" not in plan
    out = out_df.toPandas()
    assert list(out.columns) == ["score", "seg", "v", "_g", "_b", "p"]
    assert (out["_g"].to_numpy() == np.arange(len(new))).all() and (out["_b"] == "x").all()
    expect = local.predict(out.score, segments=out[["seg", "v"]])
    np.testing.assert_allclose(out.p, expect, rtol=1e-6 if method == "sigmoid" else 1e-12,
                               atol=1e-12, equal_nan=True)


def test_fit_on_spark_saves_and_loads(spark, tmp_path):
    df = segmented_frame(2000, 6, seed=22, zipf=True)
    model = distcal.fit(spark.createDataFrame(df), by="seg", weight_col="w",
                        min_segment_weight=40.0, n_ranges=2)
    model.save(tmp_path / "m")
    loaded = distcal.load(tmp_path / "m")
    assert loaded == model
    out = loaded.transform(spark.createDataFrame(df[["score", "seg"]])).toPandas()
    np.testing.assert_allclose(out.calibrated, model.predict(out.score, segments=out.seg),
                               rtol=1e-12)
    with pytest.raises(distcal.DataError, match="'market'"):
        distcal.fit(spark.createDataFrame(df), by="market")


def _by_key(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return table.sort_values(by, kind="stable").reset_index(drop=True)


def test_evaluate_and_threshold_by_equal_local_in_fixed_jobs(spark):
    """1 and 2,000 segments evaluated, 5 and 2,000 thresholds: the local engine's numbers
    (1e-9), and as many Spark jobs for 2,000 segments as for one."""
    from test_segments import assert_dicts_close, eval_frame

    jobs = {}
    for n_segments, n, what in ((1, 1000, "evaluate"), (5, 1500, "threshold"),
                                (2000, 6000, "both")):
        df = eval_frame(n, n_segments, seed=60 + n_segments, null_keys=6)
        sdf = spark.createDataFrame(df)
        if what != "threshold":
            rep, jobs[n_segments] = _jobs_of(
                spark, f"eval{n_segments}",
                lambda sdf=sdf: distcal.evaluate(sdf, weight_col="w", by="seg", n_ranges=4))
            local = distcal.evaluate(df, weight_col="w", by="seg")
            assert_dicts_close({k: v for k, v in rep.to_dict().items() if k != "segments"},
                               {k: v for k, v in local.to_dict().items() if k != "segments"})
            pd.testing.assert_frame_equal(_by_key(rep.segments, ["seg"]),
                                          _by_key(local.segments, ["seg"]), rtol=1e-9)
        if what != "evaluate":
            res = distcal.optimal_threshold(sdf.withColumnRenamed("prob", "score"),
                                            weight_col="w", cost_fn=2.0, by="seg", n_ranges=4)
            expect = distcal.optimal_threshold(df.rename(columns={"prob": "score"}),
                                               weight_col="w", cost_fn=2.0, by="seg")
            assert res.threshold == expect.threshold
            pd.testing.assert_frame_equal(res.segments, expect.segments, rtol=1e-9)
    # no job per segment
    assert jobs[1] == jobs[2000], jobs
