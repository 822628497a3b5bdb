"""What only the Dask engine's keyed ranges have, on a real distributed cluster: the
per-range budget, partitions of every shape, transform_rows, a worker memory limit.

The tables are checked against test_keyed_pass.py's pandas oracle (where every
engine's keyed pass is tested the same way).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from test_keyed_pass import SPECS, assert_matches, gather, keyed_data, oracle

from distcal.core.keyed import KeySpec
from distcal.engines.dask import DaskEngine
from distcal.errors import DataError

LIST = pd.ArrowDtype(pa.list_(pa.float64()))  # Dask turns object columns into strings
ENGINE = DaskEngine()


def _data(*args, **kwargs) -> pd.DataFrame:
    """test_keyed_pass's rows, their vectors as a list<double> column for Dask."""
    df = keyed_data(*args, **kwargs)
    if "v" in df:
        df["v"] = pd.Series([list(v) for v in df["v"]], index=df.index, dtype=LIST)
    return df


def _ddf(df: pd.DataFrame, npartitions: int):
    import dask.dataframe as dd

    return dd.from_pandas(df, npartitions=npartitions, sort=False)


def test_results_do_not_depend_on_partitioning_or_budget(client):
    spec, k = SPECS["by-x-vector"]
    df = _data(3000, seed=5, k=k)
    want = oracle(df, spec, k)
    for npartitions, range_rows, passes in [(1, 10**9, 1), (3, 500, 2), (7, 2000, 3)]:
        with ENGINE.open_keyed(_ddf(df, npartitions), spec, on_invalid="raise",
                               passes=passes, range_rows=range_rows) as r:
            assert_matches(gather(r), want)
            assert_matches(gather(r), want)  # a second pass over the same ranges


def test_range_count_follows_the_budget(client):
    """Pooled (key, score) rows over range_rows ranges; each range's merge within budget."""
    from distcal.engines.dask_keyed import n_ranges_for

    spec = KeySpec(by=("g",))
    df = _data(4000, seed=2, weights=False)
    df["score"] = (np.arange(4000) * 7919 % 4000) / 4000.0  # every score distinct
    with ENGINE.open_keyed(_ddf(df, 4), spec, on_invalid="raise", range_rows=1000) as r:
        sizes = r.map(lambda t: len(t.table))
    total = sum(sizes)  # every score distinct per key: no two partitions share a pair
    assert total == 4000 + int(df["g"].notna().sum())
    assert len(sizes) >= total // 1000
    assert max(sizes) <= 2 * 1000  # sampled bounds: about the budget, never a multiple
    assert n_ranges_for(total, 1000, 2) == -(-total // 1000)
    assert n_ranges_for(10, 1000, 2) == 4  # at least two ranges per worker thread


def test_partitions_alike_still_make_every_range(client):
    """Partitions with the same score grid get few samples each: their positions are
    shifted, so the bounds still make about as many ranges as the rule asks for."""
    rng = np.random.default_rng(11)
    grid = np.arange(500) / 500.0
    df = pd.DataFrame({"score": np.tile(grid, 16), "label": rng.integers(0, 2, 8000)})
    with ENGINE.open_keyed(_ddf(df, 16), KeySpec(), on_invalid="raise", range_rows=400,
                           samples_per_range=2) as r:  # 3 samples per partition
        sizes = r.map(lambda t: len(t.table))
    assert sum(sizes) == 500
    assert len(sizes) >= 16  # the rule: 16 x 500 pooled rows / 400 = 20 ranges


def test_empty_partitions_and_a_hot_score(client):
    import dask.dataframe as dd
    from dask import delayed

    spec = KeySpec(weight_col="w", by=("g",))
    df = _data(2000, seed=3)
    df.loc[df.index[:800], "score"] = 0.5  # 40% of the rows on one score
    cuts = [0, 0, 700, 700, 2000]
    ddf = dd.from_delayed([delayed(lambda x: x)(df.iloc[a:b]) for a, b in zip(cuts, cuts[1:])],
                          meta=df.iloc[:0])
    with ENGINE.open_keyed(ddf, spec, on_invalid="raise", range_rows=300) as r:
        got = gather(r)
    assert_matches(got, oracle(df, spec))


# -- transform_rows --------------------------------------------------------------------

def test_one_pass_over_the_rows_reads_each_partition_once():
    # A pass over whole rows (multiclass evaluate: one pass) brings the row counts with
    # its results: each partition is read once (it was read a second time to count), plus
    # once more for a vector column, whose length K must be known first.
    import dask
    import dask.dataframe as dd

    import distcal

    reads = []

    def tagged(pdf):
        reads.append(len(pdf))
        return pdf

    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(3), 4000)
    df = pd.DataFrame({"label": rng.integers(0, 3, 4000), "p0": P[:, 0], "p1": P[:, 1],
                       "p2": P[:, 2]})
    df["v"] = pd.Series(pd.arrays.ArrowExtensionArray(pa.array(list(map(list, P)))))
    base = dd.from_pandas(df, npartitions=4)
    want = distcal.evaluate(df, prob_cols=["p0", "p1", "p2"])
    with dask.config.set(scheduler="synchronous"):
        for kw, passes in (({"prob_cols": ["p0", "p1", "p2"]}, 1), ({"prob_col": "v"}, 2)):
            reads.clear()
            got = distcal.evaluate(base.map_partitions(tagged, meta=base._meta), **kw)
            assert sum(1 for n in reads if n) == 4 * passes, kw
            assert got.log_loss == pytest.approx(want.log_loss, rel=1e-12)


def test_transform_rows_round_trip(client):
    df = _data(900, seed=8, k=3)
    ddf = _ddf(df, 3)
    out = ENGINE.transform_rows(ddf, {"score": "score", "h": "segment"}, "calibrated",
                                lambda p: p["score"].to_numpy() * 0.5 + 0.1, vector=False)
    assert out.dtypes["calibrated"] == np.float64
    got = out.compute()
    np.testing.assert_array_equal(got["calibrated"].to_numpy(), df["score"].to_numpy() * 0.5
                                  + 0.1)
    pd.testing.assert_frame_equal(got.drop(columns=["calibrated", "g"]), df.drop(columns="g"),
                                  check_dtype=False)
    assert [x if isinstance(x, str) else None for x in got["g"]] == df["g"].tolist()

    def probs(p: pd.DataFrame) -> np.ndarray:
        m = p[["p0", "p1", "p2"]].to_numpy()
        return m / m.sum(axis=1, keepdims=True).clip(1e-12)

    vec = ENGINE.transform_rows(ddf, dict.fromkeys(["p0", "p1", "p2"], "score"), "probs", probs,
                                vector=True).compute()
    want = probs(df)
    got_m = np.stack([np.asarray(x) for x in vec["probs"]])
    np.testing.assert_array_equal(got_m, want)


def test_transform_rows_refuses_an_existing_output_column(client):
    df = _data(100, seed=9)
    calls = []
    with pytest.raises(DataError, match="output column 'label' already exists"):
        ENGINE.transform_rows(_ddf(df, 2), {"score": "score"}, "label",
                              lambda p: calls.append(1) or p["score"], vector=False)
    assert not calls


# -- bounded worker memory (issue 35) --------------------------------------------------

@pytest.mark.dask
@pytest.mark.slow
def test_workers_stay_within_a_memory_limit_the_old_segment_path_exceeds():
    """1.6e7 rows x (global + 20 segments) on workers capped at 650 MB.

    The pre-keyed path (``DaskSegmentRanges``: raw rows persisted, 8 ranges of
    raw rows) gets its workers killed for memory on the same cluster and data
    (4 rounds of restarts, then KilledWorker); the keyed path holds pooled
    tables only (peak ~470-495 MB per worker when measured, ~330 MB of it the
    worker, its imports and numba's compiler). The workers must
    never restart, and each key's isotonic fit over the ranges equals scipy's
    on pandas' pooling of the same rows (made again here, partition by partition).
    """
    import dask
    import dask.dataframe as dd
    from distributed import Client, LocalCluster
    from scipy.optimize import isotonic_regression

    from distcal.core.isotonic import merge_blocks, pav_blocks
    from distcal.core.plans import run_plans

    n_parts, n = 128, 125_000
    segs = np.array([f"seg{j:02d}" for j in range(20)], dtype=object)

    def part(i: int, n: int) -> pd.DataFrame:
        rng = np.random.default_rng([7, i])
        s = np.round(rng.random(n), 3)
        y = (rng.random(n) < s).astype(np.int64)
        return pd.DataFrame({"score": s, "label": y, "g": segs[rng.integers(0, 20, n)]})

    def plan(key):
        parts = yield pav_blocks
        return merge_blocks(parts)

    import os

    # Spilling and pausing off: a worker over 95% of its limit is restarted, and
    # a restart is what the test looks for.
    memory = {"distributed.worker.memory.target": False,
              "distributed.worker.memory.spill": False,
              "distributed.worker.memory.pause": False,
              "distributed.worker.memory.terminate": 0.95}
    with dask.config.set(memory), LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, memory_limit="650MB",
            dashboard_address=None) as cluster, Client(cluster) as c, c.as_current():
        pids = sorted(c.run(os.getpid).values())
        ddf = dd.from_map(part, range(n_parts), n=n, meta=part(0, 0))
        with ENGINE.open_keyed(ddf, KeySpec(by=("g",)), on_invalid="raise",
                               range_rows=200_000) as r:
            fits = run_plans(plan, r.map)
            assert r.n_rows == n_parts * n
        assert sorted(c.run(os.getpid).values()) == pids  # no worker was restarted
    # The oracle: pandas pools the same rows by (key, score), then scipy's PAV.
    sums: dict = {}
    for i in range(n_parts):
        df = part(i, n).assign(w=1.0)
        for key, grouped in [((None, None), df.groupby("score")),
                             *[(((g,), None), d.groupby("score"))
                               for g, d in df.groupby("g")]]:
            t = grouped[["w", "label"]].sum()
            sums[key] = t if key not in sums else sums[key].add(t, fill_value=0.0)
    assert set(fits) == set(sums)
    for key, t in sums.items():
        want = isotonic_regression(t["label"].to_numpy() / t["w"].to_numpy(),
                                   weights=t["w"].to_numpy()).x
        b = fits[key]
        got = b.prob[np.searchsorted(b.score_max, t.index.to_numpy(), side="left")]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=str(key))
