"""Per-segment calibration on a Dask distributed cluster: one fit per group, no task per segment."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_segments import assert_segments_equal_sklearn, segmented_frame

import distcal


def _fit_counting_tasks(ddf, **kw):
    from distributed import get_task_stream

    with get_task_stream() as ts:
        model = distcal.fit(ddf, **kw)
    return model, len(ts.data)


@pytest.mark.parametrize("n_segments,n", [(1, 3000), (5, 4000), (2000, 10000)])
def test_isotonic_segments_equal_sklearn_and_local(client, n_segments, n):
    import dask.dataframe as dd

    df = segmented_frame(n, n_segments, seed=30 + n_segments)
    df.loc[df.index[:9], "seg"] = None
    ddf = dd.from_pandas(df, npartitions=3, sort=False)
    model, tasks = _fit_counting_tasks(ddf, by="seg", weight_col="w", n_ranges=4)
    # 3 input partitions and 4 ranges: a fixed number of tasks, whatever the segments
    assert tasks <= 40, tasks
    assert model == distcal.fit(df, by="seg", weight_col="w")
    assert_segments_equal_sklearn(model, df)


@pytest.mark.parametrize("method,params", [
    ("isotonic", {"increasing": "auto", "interpolation": "centered"}),
    ("histogram", {"n_bins": 4}), ("sigmoid", {}),
])
def test_methods_and_transform_equal_local(client, method, params):
    import dask.dataframe as dd

    rng = np.random.default_rng(31)
    df = segmented_frame(3000, 30, seed=31, zipf=True)
    df["v"] = rng.integers(0, 2, len(df))
    ddf = dd.from_pandas(df, npartitions=4, sort=False)
    model = distcal.fit(ddf, method=method, by=["seg", "v"], weight_col="w",
                        min_segment_weight=5.0, **params)
    local = distcal.fit(df, method=method, by=["seg", "v"], weight_col="w",
                        min_segment_weight=5.0, **params)
    if method == "sigmoid":  # Newton's optimum: to rounding of sums in another order
        q = np.linspace(-0.5, 1.5, 9)
        for key in local.segments[["seg", "v"]].itertuples(index=False, name=None):
            np.testing.assert_allclose(model.segment(key).predict(q),
                                       local.segment(key).predict(q), rtol=1e-6)
    else:
        assert model == local
    new = pd.DataFrame({"score": [0.2, 0.6, np.nan, 0.9], "seg": ["s0", None, "s1", "zz"],
                        "v": [0, 1, 0, 1]})
    out = model.transform(dd.from_pandas(new, npartitions=2, sort=False)).compute()
    np.testing.assert_allclose(out.calibrated, local.predict(new.score, segments=new[["seg",
                                                                                       "v"]]),
                               rtol=1e-6 if method == "sigmoid" else 1e-12, equal_nan=True)
    with pytest.raises(distcal.DataError, match="'market'"):
        distcal.fit(ddf, by="market")


def test_evaluate_and_threshold_by_equal_local(client):
    """5 and 2,000 segments evaluated, 1 and 2,000 thresholds on the cluster: the local
    engine's numbers (1e-9)."""
    import dask.dataframe as dd
    from test_segments import assert_dicts_close, eval_frame

    for n_segments, n, what in ((1, 1000, "threshold"), (5, 1500, "evaluate"),
                                (2000, 6000, "both")):
        df = eval_frame(n, n_segments, seed=70 + n_segments, null_keys=6)
        ddf = dd.from_pandas(df, npartitions=3, sort=False)
        if what != "threshold":
            rep = distcal.evaluate(ddf, weight_col="w", by="seg", n_ranges=4)
            local = distcal.evaluate(df, weight_col="w", by="seg")
            assert_dicts_close({k: v for k, v in rep.to_dict().items() if k != "segments"},
                               {k: v for k, v in local.to_dict().items() if k != "segments"})
            key = ["seg"]
            pd.testing.assert_frame_equal(
                rep.segments.sort_values(key).reset_index(drop=True),
                local.segments.sort_values(key).reset_index(drop=True), rtol=1e-9)
        if what != "evaluate":
            scored = ddf.rename(columns={"prob": "score"})
            res = distcal.optimal_threshold(scored, weight_col="w", cost_fn=2.0, by="seg")
            expect = distcal.optimal_threshold(df.rename(columns={"prob": "score"}),
                                               weight_col="w", cost_fn=2.0, by="seg")
            assert res.threshold == expect.threshold
            pd.testing.assert_frame_equal(res.segments, expect.segments, rtol=1e-9)
