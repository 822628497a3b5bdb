"""The Dask engine on a real distributed cluster (and Dask's threads), against the local engine."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores

import distcal


def ddf_of(df, npartitions):
    import dask.dataframe as dd

    return dd.from_pandas(df, npartitions=npartitions, sort=False)


@pytest.mark.parametrize("partitions", [1, 3, 11])
def test_isotonic_equals_local(client, partitions):
    df = make_scores(30_000, seed=partitions, weights=True)
    model = distcal.fit(ddf_of(df, partitions), weight_col="w")
    assert model == distcal.fit(df, weight_col="w")


def test_shuffled_skewed_and_empty_partitions(client):
    import dask.dataframe as dd

    df = make_scores(20_000, seed=5, ties=False, weights=True)
    local = distcal.fit(df, weight_col="w")
    shuffled = df.sample(frac=1.0, random_state=1).reset_index(drop=True)
    assert distcal.fit(ddf_of(shuffled, 7), weight_col="w", n_ranges=5) == local
    # skewed: one big partition, a few tiny ones, and empty ones
    cuts = [0, 19_000, 19_001, 19_001, 19_500, 19_500, 20_000]
    parts = [shuffled.iloc[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
    skewed = dd.from_delayed([__import__("dask").delayed(p) for p in parts],
                             meta=shuffled.iloc[:0])
    assert distcal.fit(skewed, weight_col="w") == local


def test_threaded_scheduler_without_client():
    import dask

    df = make_scores(10_000, seed=6)
    with dask.config.set(scheduler="threads"):
        assert distcal.fit(ddf_of(df, 4)) == distcal.fit(df)


@pytest.mark.parametrize("method,params", [
    ("sigmoid", {}), ("histogram", {"strategy": "quantile", "n_bins": 12}), ("histogram", {}),
    ("isotonic", {"increasing": "auto", "interpolation": "step"}),
])
def test_other_methods_equal_local(client, method, params):
    df = make_scores(20_000, seed=7, weights=True)
    assert distcal.fit(ddf_of(df, 5), method=method, weight_col="w", **params) == \
        distcal.fit(df, method=method, weight_col="w", **params)


def test_threshold_and_evaluate_equal_local(client):
    df = make_scores(20_000, seed=8, weights=True)
    a = distcal.optimal_threshold(ddf_of(df, 6), weight_col="w", cost_fn=2.5)
    b = distcal.optimal_threshold(df, weight_col="w", cost_fn=2.5)
    assert a.threshold == b.threshold and a.cost == pytest.approx(b.cost, rel=1e-9)
    p = df.rename(columns={"score": "prob"})
    e1 = distcal.evaluate(ddf_of(p, 6), weight_col="w", strategy="quantile")
    e2 = distcal.evaluate(p, weight_col="w", strategy="quantile")
    for f in ("brier", "log_loss", "ece", "auc", "accuracy", "reliability_exact",
              "resolution_exact", "adaptive_ece", "adaptive_mce", "smece", "smece_sigma"):
        assert getattr(e1, f) == pytest.approx(getattr(e2, f), rel=1e-9), f
    pd.testing.assert_frame_equal(e1.roc, e2.roc, rtol=1e-9)


def test_transform_is_lazy_with_meta(client):
    df = make_scores(5_000, seed=9)
    model = distcal.fit(df)
    out = model.transform(ddf_of(df, 4), output_col="p")
    assert list(out.columns) == ["score", "label", "p"] and out.dtypes["p"] == np.float64
    got = out.compute()
    np.testing.assert_array_equal(got["p"].to_numpy(), model.predict(got["score"]))


def test_read_parquet_hive_dataset(client, tmp_path):
    import dask.dataframe as dd
    import pyarrow as pa
    import pyarrow.parquet as pq

    df = make_scores(12_000, seed=10)
    df["day"] = np.repeat(["d1", "d2", "d3"], 4000)
    pq.write_to_dataset(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "ds",
                        partition_cols=["day"])
    model = distcal.fit(dd.read_parquet(str(tmp_path / "ds")))
    assert model == distcal.fit(df)


@pytest.mark.parametrize("df,kw", [
    (pd.DataFrame({"score": [0.1, None, 0.3, float("nan")], "label": [0, 1, 0, 1]}), {}),
    (pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": ["0", "x", "1", "9"]}), {}),
    (pd.DataFrame({"score": [0.1, 0.2, 0.3, 0.4], "label": [0, 1, 0, 1],
                   "w": [1.0, -1.0, np.inf, 1.0]}), {"weight_col": "w"}),
    (pd.DataFrame({"score": [0.1, 0.2], "label": [0, 1]}), {"label_col": "target"}),
    (pd.DataFrame({"score": [0.1, 0.2], "label": [0, 1], "w": [0.0, 0.0]}),
     {"weight_col": "w"}),
])
def test_bad_input_same_errors(client, df, kw):
    with pytest.raises(distcal.DataError) as local:
        distcal.fit(df, **kw)
    with pytest.raises(distcal.DataError) as remote:
        distcal.fit(ddf_of(df, 2), **kw)
    assert str(local.value) == str(remote.value)


def test_killed_worker_still_gives_the_exact_model():
    """Kill a worker process mid-fit: the scheduler recomputes, the model is exact."""
    import dask
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    df = make_scores(60_000, seed=11, weights=True)
    parts = np.array_split(df, 12)

    def slow(part):
        from distributed import Event

        Event("distcal-test-fit-started").set()  # the test kills a worker once tasks run
        time.sleep(0.4)
        return part

    ddf = dd.from_delayed([dask.delayed(slow)(p) for p in parts], meta=df.iloc[:0])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        pids = c.run(os.getpid)
        result: dict = {}

        def fit():
            result["model"] = distcal.fit(ddf, weight_col="w")

        from distributed import Event

        started = Event("distcal-test-fit-started", client=c)
        t = threading.Thread(target=fit)
        t.start()
        assert started.wait(timeout=120), "no task of the fit started"
        assert t.is_alive(), "the fit ended before the worker could be killed"
        victim = sorted(pids.values())[0]
        os.kill(victim, signal.SIGKILL)
        t.join(timeout=300)
        assert not t.is_alive()
        assert victim not in c.run(os.getpid).values()  # the nanny started a new process
    assert result["model"] == distcal.fit(df, weight_col="w")


def test_fit_and_threshold_and_evaluate_many(client):
    df = make_scores(20_000, seed=15, weights=True)
    model, res = distcal.fit_and_threshold(ddf_of(df, 4), weight_col="w", cost_fn=4)
    assert model == distcal.fit(df, weight_col="w")
    assert res.threshold == distcal.optimal_threshold(df, weight_col="w", cost_fn=4).threshold
    rng = np.random.default_rng(16)
    p = rng.random(4000)
    two = pd.DataFrame({"raw": p, "cal": np.sqrt(p),
                        "label": (rng.random(4000) < p).astype(int)})
    two.loc[0, "cal"] = np.nan
    a = distcal.evaluate_many(ddf_of(two, 3), ["raw", "cal"], on_invalid="drop")
    b = distcal.evaluate_many(two, ["raw", "cal"], on_invalid="drop")
    for c in ("raw", "cal"):
        assert a[c].n_rows == b[c].n_rows == 3999 and a[c].dropped_rows == 1
        assert a[c].auc == pytest.approx(b[c].auc, rel=1e-9)
    with pytest.raises(distcal.DataError) as remote:
        distcal.evaluate_many(ddf_of(two, 3), ["raw", "cal"])
    with pytest.raises(distcal.DataError) as local:
        distcal.evaluate_many(two, ["raw", "cal"])
    assert str(remote.value) == str(local.value)


def test_forced_engine_on_local_data(client):
    df = make_scores(5000, seed=19)
    assert distcal.fit(df, engine="dask") == distcal.fit(df)
    assert distcal.optimal_threshold(df, engine="dask") == distcal.optimal_threshold(df)
