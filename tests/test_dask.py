"""What only Dask has: its threaded scheduler without a client, lazy transforms with
their meta, Hive-partitioned datasets, a worker killed mid-fit. What every engine shares
is in test_engines.py."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
from conftest import make_scores

import distcal


def ddf_of(df, npartitions):
    import dask.dataframe as dd

    return dd.from_pandas(df, npartitions=npartitions, sort=False)


def test_threaded_scheduler_without_client():
    import dask

    df = make_scores(10_000, seed=6)
    with dask.config.set(scheduler="threads"):
        assert distcal.fit(ddf_of(df, 4)) == distcal.fit(df)


def test_local_data_on_dask_from_threads_leaves_dask_s_settings_alone():
    """engine="dask" on pandas data with a column of mixed values, from 8 threads, while
    another thread builds its own Dask frames: those still get Dask's strings, and the
    process's dask.config is as before (a fit's ``dask.config.set`` restored another's
    value and left convert-string False for the whole process)."""
    from concurrent.futures import ThreadPoolExecutor

    import dask
    import dask.dataframe as dd
    import pandas as pd

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"score": rng.random(2000), "label": rng.integers(0, 2, 2000),
                       "g": pd.Series([7 if i % 3 else "a" for i in range(2000)],
                                      dtype=object)})
    text = pd.DataFrame({"t": ["fr", "de"] * 10})
    before = dask.config.get("dataframe.convert-string", None)
    want = distcal.fit(df, by="g")
    seen: set[str] = set()
    stop = threading.Event()

    def user() -> None:
        while not stop.is_set():
            seen.add(str(dd.from_pandas(text, npartitions=1).dtypes["t"]))

    with dask.config.set(scheduler="sync"):
        watcher = threading.Thread(target=user)
        watcher.start()
        try:
            with ThreadPoolExecutor(8) as pool:
                models = list(pool.map(lambda _: distcal.fit(df, by="g", engine="dask"),
                                       range(32)))
        finally:
            stop.set()
            watcher.join()
    assert all(m == want for m in models)
    assert sorted(models[0].segments.g.tolist(), key=str) == [7, "a"]
    assert seen == {"string"}
    assert dask.config.get("dataframe.convert-string", None) == before


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
    # A label column from the directories' names: Dask reads it as categories of numbers,
    # which are its numbers (as the local engine reads the dataset's dictionary).
    pq.write_to_dataset(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "by_label",
                        partition_cols=["label"])
    ds = dd.read_parquet(str(tmp_path / "by_label"))
    assert str(ds.dtypes["label"]) == "category"
    assert distcal.fit(ds) == distcal.fit(df) == distcal.fit(str(tmp_path / "by_label"))


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


def test_engine_dask_on_local_data_reads_the_columns_as_the_local_engine(client):
    """engine="dask" on pandas or Arrow data: object columns Arrow types (decimals, vectors,
    Python ints) reach the workers as those types, not as the strings Dask's
    ``from_pandas`` makes of object columns (refused as text, or keys '0', '1')."""
    import decimal

    import pandas as pd
    import pyarrow as pa

    rng = np.random.default_rng(0)
    s = np.round(rng.random(60), 3)
    y = (rng.random(60) < s).astype(int)
    cases = [
        (pa.table({"score": pa.array([decimal.Decimal(str(v)) for v in s], pa.decimal128(10, 3)),
                   "label": y}), {}),
        (pd.DataFrame({"score": s, "label": pd.Series([decimal.Decimal(int(v)) for v in y],
                                                      dtype=object)}), {}),
        (pd.DataFrame({"p": list(np.c_[1 - s, s]), "label": y}),
         {"score_col": "p", "score_index": 1}),
        (pd.DataFrame({"score": s, "label": y,
                       "g": pd.Series(rng.integers(0, 3, 60), dtype=object)}), {"by": "g"}),
    ]
    for data, kw in cases:
        assert distcal.fit(data, engine="dask", **kw) == distcal.fit(data, **kw), kw
    # Columns Arrow cannot type (mixed values) stay what they are, not Dask's text:
    # segment keys 7 and 'a' (not '7'), one text score among numbers (not all text).
    mixed = pd.DataFrame({"score": s, "label": y, "g": pd.Series(
        [7 if i % 2 else "a" for i in range(60)], dtype=object)})
    model = distcal.fit(mixed, by="g", engine="dask")
    assert sorted(model.segments.g.tolist(), key=str) == [7, "a"]
    assert model == distcal.fit(mixed, by="g")  # (equal models of keys of two types)
    text = mixed.astype({"score": object})
    text.loc[5, "score"] = "oops"
    assert distcal.fit(text, on_invalid="drop", engine="dask").n_rows == 59
    ids = mixed.assign(id=pd.Series([2**64 + i for i in range(60)], dtype=object))
    assert distcal.fit(ids, engine="dask") == distcal.fit(ids)  # (Arrow: OverflowError)
