"""The Dask engine's keyed ranges (``DaskEngine.open_keyed``) on a real distributed cluster.

Oracles are independent of distcal's keyed code: the keyed rows are made
here with pandas (one frame per key: the global key and each segment, per
calibrated class), pooled with ``groupby(score)`` sums, and compared with
each key's tables gathered over the engine's ranges in range order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from distcal.core.keyed import KeySpec
from distcal.core.rows import add_up_rows, read_rows
from distcal.engines.dask import DaskEngine
from distcal.errors import DataError

LIST = pd.ArrowDtype(pa.list_(pa.float64()))  # Dask turns object columns into strings
ENGINE = DaskEngine()


# -- data and oracle ------------------------------------------------------------------

def _data(n: int = 3000, seed: int = 0, k: int = 0, weights: bool = True) -> pd.DataFrame:
    """Scores with ties, two segment columns with nulls; K > 0: per-class scores."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "score": np.round(rng.random(n), 2),
        "g": pd.Series(rng.choice(["a", "b", "c"], n), dtype=object),
        "h": rng.integers(0, 3, n).astype(float),
    })
    df.loc[rng.random(n) < 0.1, "g"] = None
    df.loc[rng.random(n) < 0.1, "h"] = np.nan
    if k:
        p = rng.dirichlet(np.ones(k), n).round(2)
        df["label"] = np.array([rng.choice(k, p=r / r.sum()) for r in p])
        for j in range(k):
            df[f"p{j}"] = p[:, j]
        df["v"] = pd.Series([list(r) for r in p], dtype=LIST)
    else:
        df["label"] = (rng.random(n) < df["score"]).astype(np.int64)
    if weights:
        w = rng.uniform(0.0, 2.0, n)
        w[rng.random(n) < 0.05] = 0.0  # zero weights take no part
        df["w"] = w
    return df


def _ddf(df: pd.DataFrame, npartitions: int):
    import dask.dataframe as dd

    return dd.from_pandas(df, npartitions=npartitions, sort=False)


def _class_score(df: pd.DataFrame, cls: int, k: int, spec: KeySpec) -> np.ndarray:
    if spec.score_cols is not None:
        col = spec.score_cols[cls if len(spec.score_cols) > 1 else 0]
        return df[col].to_numpy(dtype=float)
    return np.array([v[cls] for v in df[spec.score_col]], dtype=float)


def oracle(df: pd.DataFrame, spec: KeySpec, k: int = 0) -> dict:
    """Per key: (score, weight, w * label01, count) sums per distinct score, ascending."""
    w = df[spec.weight_col].to_numpy(float) if spec.weight_col else np.ones(len(df))
    df = df[w > 0]
    w = w[w > 0]
    classes = [None] if not spec.multiclass else ([1] if k == 2 else list(range(k)))
    out = {}
    for cls in classes:
        if cls is None:
            s, y = df[spec.score_col].to_numpy(float), df[spec.label_col].to_numpy(float)
        else:
            s = _class_score(df, cls, k, spec)
            y = (df[spec.label_col].to_numpy() == cls).astype(float)
        rows = pd.DataFrame({"s": s + 0.0, "w": w, "wy": w * y, "n": 1}, index=df.index)
        sums = rows.groupby("s").sum().sort_index()
        out[(None, cls)] = sums
        if spec.by:
            for seg, part in rows.join(df[list(spec.by)]).groupby(list(spec.by), dropna=True):
                seg = seg if isinstance(seg, tuple) else (seg,)
                out[(seg, cls)] = part.groupby("s")[["w", "wy", "n"]].sum().sort_index()
    return out


def _tables(t) -> list:
    """What the test brings back from a range: every key's table (a test only)."""
    return [(key, t.key_table(i).score, t.key_table(i).weight, t.key_table(i).positives,
             t.key_table(i).count) for i, key in enumerate(t.keys)]


def gather(ranges) -> dict:
    """Each key's tables over the ranges, in range order; checks the ranges' order."""
    parts = ranges.map(lambda t: [(key, s.copy(), w.copy(), p.copy(), n.copy())
                                  for key, s, w, p, n in _tables(t)])
    got: dict = {}
    last_max = -np.inf
    for part in parts:
        lo = min(s.min() for _, s, *_ in part)
        hi = max(s.max() for _, s, *_ in part)
        assert lo > last_max  # ascending, non-overlapping ranges
        last_max = hi
        for key, s, w, p, n in part:
            got.setdefault(key, []).append((s, w, p, n))
    return {key: tuple(np.concatenate(x) for x in zip(*v)) for key, v in got.items()}


def assert_matches(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, (s, w, p, n) in got.items():
        o = want[key]
        assert np.all(np.diff(s) > 0), key  # one row per distinct score, ascending
        np.testing.assert_array_equal(s, o.index.to_numpy(), err_msg=str(key))
        np.testing.assert_allclose(w, o["w"].to_numpy(), rtol=1e-12, err_msg=str(key))
        np.testing.assert_allclose(p, o["wy"].to_numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=str(key))
        np.testing.assert_array_equal(n, o["n"].to_numpy(), err_msg=str(key))


def _counts(df: pd.DataFrame, spec: KeySpec) -> tuple[int, float]:
    w = df[spec.weight_col].to_numpy(float) if spec.weight_col else np.ones(len(df))
    return int((w > 0).sum()), float(w[w > 0].sum())


# -- keyed ranges against the oracle --------------------------------------------------

SPECS = {
    "binary": (KeySpec(weight_col="w"), 0),
    "binary-unweighted": (KeySpec(), 0),
    "by-one": (KeySpec(weight_col="w", by=("g",)), 0),
    "by-two": (KeySpec(weight_col="w", by=("g", "h")), 0),
    "vector-k3": (KeySpec(score_col="v", weight_col="w", multiclass=True), 3),
    "score-cols-k3": (KeySpec(score_col=None, score_cols=("p0", "p1", "p2"), weight_col="w",
                              multiclass=True), 3),
    "score-cols-k2": (KeySpec(score_col=None, score_cols=("p0", "p1"), multiclass=True), 2),
    "by-x-vector": (KeySpec(score_col="v", by=("g",), weight_col="w", multiclass=True), 3),
    "by-two-x-cols": (KeySpec(score_col=None, score_cols=("p0", "p1", "p2"), by=("g", "h"),
                              multiclass=True), 3),
}


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("npartitions", [1, 3, 7])
def test_keyed_tables_equal_the_oracle(client, name, npartitions):
    spec, k = SPECS[name]
    df = _data(2000, seed=npartitions, k=k)
    # A small budget: many ranges, so keys are cut across ranges.
    with ENGINE.open_keyed(_ddf(df, npartitions), spec, on_invalid="raise",
                           range_rows=700) as r:
        assert r.n_classes == k
        got = gather(r)
        n, w = _counts(df, spec)
        assert (r.n_rows, r.dropped_rows) == (n, 0)
        assert r.weight_total == pytest.approx(w, rel=1e-12)
    assert_matches(got, oracle(df, spec, k))


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


# -- validation ------------------------------------------------------------------------

def _bad(df: pd.DataFrame) -> pd.DataFrame:
    bad = df.copy()
    bad.loc[bad.index[::17], "score"] = np.nan
    bad.loc[bad.index[5::23], "label"] = 7
    bad.loc[bad.index[3::31], "w"] = -1.0
    return bad


@pytest.mark.parametrize("spec", [KeySpec(weight_col="w", by=("g",)),
                                  KeySpec(score_col="v", weight_col="w", multiclass=True)])
def test_bad_rows_raise_the_read_rows_message_or_are_dropped(client, spec):
    k = 3 if spec.multiclass else 0
    df = _data(1500, seed=4, k=k)
    if spec.multiclass:
        df.loc[df.index[::17], "v"] = None
        df.loc[df.index[5::23], "label"] = 7
        df.loc[df.index[3::31], "w"] = -1.0
        bad = df
    else:
        bad = _bad(df)
    # The message of the pandas reader on the same rows, in one batch.
    rows, stats = read_rows(bad, spec, n_classes=k or None)
    with pytest.raises(DataError) as want:
        add_up_rows([stats], "raise")
    r = ENGINE.open_keyed(_ddf(bad, 4), spec, on_invalid="raise")
    with pytest.raises(DataError) as got:
        r.map(len)
    assert str(got.value) == str(want.value)
    r2 = ENGINE.open_keyed(_ddf(bad, 4), spec, on_invalid="raise")
    with pytest.raises(DataError) as got2:
        r2.map_rows(len)
    assert str(got2.value) == str(want.value)
    # Dropped: the tables are the oracle's over the valid rows.
    with ENGINE.open_keyed(_ddf(bad, 4), spec, on_invalid="drop", range_rows=400) as r3:
        got_tables = gather(r3)
        totals = add_up_rows([stats], "drop")
        assert (r3.n_rows, r3.dropped_rows) == (totals.n_rows, totals.dropped_rows)
        assert r3.weight_total == pytest.approx(totals.weight_total, rel=1e-12)
    if k:
        lab = bad["label"].to_numpy()
        valid = bad["v"].notna().to_numpy() & (lab >= 0) & (lab < k) & (bad["w"] >= 0)
    else:
        valid = bad["score"].notna() & bad["label"].isin([0, 1]) & (bad["w"] >= 0)
    assert int((~np.asarray(valid)).sum()) == totals.dropped_rows
    assert_matches(got_tables, oracle(bad[np.asarray(valid)], spec, k))


def test_missing_column_is_the_read_rows_error_raised_when_opened(client):
    df = _data(200, seed=1)
    for spec in [KeySpec(weight_col="nope"), KeySpec(by=("g", "zz")),
                 KeySpec(score_col=None, score_cols=("p0", "p9"), multiclass=True)]:
        with pytest.raises(DataError) as want:
            read_rows(df, spec)
        with pytest.raises(DataError) as got:
            ENGINE.open_keyed(_ddf(df, 2), spec, on_invalid="raise")
        assert str(got.value) == str(want.value)


def test_no_usable_rows(client):
    df = _data(300, seed=1).assign(w=0.0)
    r = ENGINE.open_keyed(_ddf(df, 2), KeySpec(weight_col="w"), on_invalid="raise")
    with pytest.raises(DataError, match="no rows with weight > 0"):
        r.map(len)


def test_vector_length_is_counted_over_the_whole_input(client):
    """Partition 0 holds only short vectors: K comes from all partitions."""
    import dask.dataframe as dd
    from dask import delayed

    df = _data(600, seed=6, k=3)
    short = pd.DataFrame({"v": pd.Series([[0.5, 0.5]] * 5, dtype=LIST), "label": [0] * 5})
    parts = [short, df[["v", "label"]].iloc[:300], df[["v", "label"]].iloc[300:]]
    ddf = dd.from_delayed([delayed(lambda x: x)(p) for p in parts], meta=short.iloc[:0])
    spec = KeySpec(score_col="v", multiclass=True)
    r = ENGINE.open_keyed(ddf, spec, on_invalid="drop")
    assert r.n_classes == 3
    got = gather(r)
    assert r.dropped_rows == 5
    assert_matches(got, oracle(df, spec, 3))


# -- row parts ------------------------------------------------------------------------

@pytest.mark.parametrize("npartitions", [1, 3, 7])
def test_map_rows_sees_every_valid_row_once(client, npartitions):
    spec = KeySpec(score_col="v", weight_col="w", by=("g",), multiclass=True)
    df = _data(1200, seed=7, k=3)
    bad = df.copy()
    bad.loc[bad.index[::13], "label"] = 9
    with ENGINE.open_keyed(_ddf(bad, npartitions), spec, on_invalid="drop", passes=2) as r:
        for _ in range(2):
            parts = r.map_rows(lambda p: (p.score, p.label, p.weight,
                                          [p.segments[1][c] if c >= 0 else None
                                           for c in p.segments[0]]))
            got = pd.DataFrame({
                "s0": np.concatenate([p[0][:, 0] for p in parts]),
                "s2": np.concatenate([p[0][:, 2] for p in parts]),
                "label": np.concatenate([p[1] for p in parts]),
                "w": np.concatenate([p[2] for p in parts]),
                "g": [None if x is None else x[0] for p in parts for x in p[3]]})
            keep = (bad["label"] != 9) & (bad["w"] > 0)
            v = np.array([list(x) for x in bad.loc[keep, "v"]])
            want = pd.DataFrame({"s0": v[:, 0], "s2": v[:, 2],
                                 "label": bad.loc[keep, "label"].to_numpy(float),
                                 "w": bad.loc[keep, "w"].to_numpy(),
                                 "g": bad.loc[keep, "g"].to_list()})
            cols = ["s0", "s2", "label", "w"]
            pd.testing.assert_frame_equal(
                got.sort_values(cols).reset_index(drop=True),
                want.sort_values(cols).reset_index(drop=True), check_dtype=False)
        assert r.n_rows == int(keep.sum())
        assert r.dropped_rows == int((bad["label"] == 9).sum())


# -- transform_rows --------------------------------------------------------------------

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
    tables only (peak ~510-530 MB per worker when measured). The workers must
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
