"""The keyed pass (``Engine.open_keyed``) of every engine against a pandas oracle.

Oracles are independent of distcal's keyed code: the keyed rows are made here
with pandas (one frame per key: the global key and each segment, per
calibrated class), pooled with ``groupby(score)`` sums, and compared with each
key's tables gathered over the engine's score ranges in range order. Bad rows
must give the message of the one row reader (``read_rows``) on the same rows.
What only one engine has (Spark's range sampling and worker memory caps, Dask's
range budget and partition shapes) is in test_spark_keyed.py and
test_dask_keyed.py.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from distcal.core.keyed import KeySpec
from distcal.core.rows import add_up_rows, read_rows
from distcal.engines import get_engine
from distcal.errors import DataError

# -- data and oracle ------------------------------------------------------------------


def keyed_data(n: int = 3000, seed: int = 0, k: int = 0, weights: bool = True) -> pd.DataFrame:
    """Scores with ties, two segment columns with nulls; K > 0: per-class scores as
    columns p0.. and as a vector column v."""
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
        df["v"] = list(p)
    else:
        df["label"] = (rng.random(n) < df["score"]).astype(np.int64)
    if weights:
        w = rng.uniform(0.0, 2.0, n)
        w[rng.random(n) < 0.05] = 0.0  # zero weights take no part
        df["w"] = w
    return df


def _class_score(df: pd.DataFrame, cls: int, spec: KeySpec) -> np.ndarray:
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
            s = _class_score(df, cls, spec)
            y = (df[spec.label_col].to_numpy() == cls).astype(float)
        rows = pd.DataFrame({"s": s + 0.0, "w": w, "wy": w * y, "n": 1}, index=df.index)
        out[(None, cls)] = rows.groupby("s").sum().sort_index()
        if spec.by:
            for seg, part in rows.join(df[list(spec.by)]).groupby(list(spec.by), dropna=True):
                seg = seg if isinstance(seg, tuple) else (seg,)
                out[(seg, cls)] = part.groupby("s")[["w", "wy", "n"]].sum().sort_index()
    return out


def _tables(t) -> list:
    """What the test brings back from a range: every key's table (small test data only)."""
    out = []
    for i, key in enumerate(t.keys):
        kt = t.key_table(i)
        out.append((key, kt.score.copy(), kt.weight.copy(), kt.positives.copy(),
                    kt.count.copy()))
    return out


def gather(ranges) -> dict:
    """Each key's tables over the ranges, in range order; checks the ranges' order."""
    got: dict = {}
    last_max = -np.inf
    for part in ranges.map(_tables):
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


def open_keyed(engine, df, spec, on_invalid="raise", npartitions=None, schema=None, **opts):
    """The engine's keyed pass over ``df`` cut into several score ranges (``schema``:
    Spark's)."""
    if engine.name == "spark":  # Spark's Python workers cannot import this module
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return get_engine(engine.name).open_keyed(engine(df, npartitions, schema=schema), spec,
                                              on_invalid=on_invalid,
                                              **{**engine.opts, **opts})


# -- keyed ranges against the oracle --------------------------------------------------

SPECS = {
    "binary": (KeySpec(weight_col="w"), 0),
    "binary-unweighted": (KeySpec(), 0),
    "by-one": (KeySpec(weight_col="w", by=("g",)), 0),
    "by-two": (KeySpec(weight_col="w", by=("g", "h")), 0),
    "vector-k3": (KeySpec(score_col="v", weight_col="w", multiclass=True), 3),
    "vector-k2": (KeySpec(score_col="v", multiclass=True), 2),
    "score-cols-k3": (KeySpec(score_col=None, score_cols=("p0", "p1", "p2"), weight_col="w",
                              multiclass=True), 3),
    "score-cols-k2": (KeySpec(score_col=None, score_cols=("p0", "p1"), multiclass=True), 2),
    "by-x-vector": (KeySpec(score_col="v", by=("g",), weight_col="w", multiclass=True), 3),
    "by-two-x-cols": (KeySpec(score_col=None, score_cols=("p0", "p1", "p2"), by=("g", "h"),
                              multiclass=True), 3),
}


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("npartitions", [1, 7])
def test_keyed_tables_equal_the_oracle(engine, name, npartitions):
    spec, k = SPECS[name]
    df = keyed_data(2000, seed=npartitions, k=k)
    want = oracle(df, spec, k)
    with open_keyed(engine, df, spec, npartitions=npartitions, passes=2) as r:
        assert r.n_classes == k
        assert_matches(gather(r), want)
        assert_matches(gather(r), want)  # a second pass over the same ranges
        w = df[spec.weight_col].to_numpy(float) if spec.weight_col else np.ones(len(df))
        assert (r.n_rows, r.dropped_rows) == (int((w > 0).sum()), 0)
        assert r.weight_total == pytest.approx(w[w > 0].sum(), rel=1e-12)


@pytest.mark.parametrize("passes", [1, 4])
def test_narrowed_ranges_hold_the_wanted_keys_tables(engine, passes):
    """``narrow(keys)`` (the keys whose plans still run): later passes read those keys'
    tables as the oracle has them; an engine that keeps its ranges between passes
    (Spark and Dask, for more than one pass) reads no other key's rows."""
    spec = KeySpec(by=("g", "h"), weight_col="w")
    df = keyed_data(2000, seed=4)
    want = oracle(df, spec)
    wanted = {key for key in want if key[0] is not None and key[0][0] == "a"}
    assert len(wanted) == 3  # h = 0, 1, 2 (oracle: groupby drops null keys)
    with open_keyed(engine, df, spec, npartitions=3, passes=passes) as r:
        assert_matches(gather(r), want)
        r.narrow(wanted)
        got = gather(r)
        assert_matches({k: v for k, v in got.items() if k in wanted},
                       {k: want[k] for k in wanted})
        if engine.name != "local" and passes > 1:
            assert set(got) == wanted


def test_map_rows_sees_every_valid_row_once(engine):
    spec = KeySpec(score_col="v", weight_col="w", by=("g",), multiclass=True)
    bad = keyed_data(1200, seed=7, k=3)
    bad.loc[bad.index[::13], "label"] = 9
    with open_keyed(engine, bad, spec, on_invalid="drop", passes=2) as r:
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


def test_in_memory_frame_is_read_once_for_passes_over_rows():
    """Local: a frame opened for several passes keeps its checked rows after the first
    complete pass over them (temperature scaling's Newton steps); one pass reads anew."""
    from distcal.engines.local import LocalEngine

    df = keyed_data(1000, seed=3, k=3)
    spec = KeySpec(score_col="v", multiclass=True)
    for passes, same in ((3, True), (1, False)):
        with LocalEngine().open_keyed(df, spec, passes=passes, batch_rows=300) as r:
            first, second = (r.map_rows(lambda p: p.score) for _ in range(2))
        assert len(first) == len(second) == 4
        assert all((a is b) == same for a, b in zip(first, second))
        np.testing.assert_array_equal(np.concatenate(first), np.concatenate(second))


def test_vector_length_is_counted_over_the_whole_input(engine):
    """The first rows hold only short vectors: K comes from all rows."""
    df = keyed_data(600, seed=6, k=3)[["v", "label"]]
    short = pd.DataFrame({"v": [np.array([0.5, 0.5])] * 5, "label": [0] * 5})
    spec = KeySpec(score_col="v", multiclass=True)
    with open_keyed(engine, pd.concat([short, df], ignore_index=True), spec,
                    on_invalid="drop") as r:
        assert r.n_classes == 3
        got = gather(r)
        assert r.dropped_rows == 5
    assert_matches(got, oracle(df, spec, 3))


def test_vectors_of_one_score_are_binary_and_empty_or_null_vectors_are_refused(engine):
    """Vectors of length 1 hold class 1's score: a binary problem (K = 2) whose one key
    is class 1's. Vectors of length 0 are nothing to calibrate; vectors that are all
    null are null rows (the messages of read_rows). The same on every engine."""
    import pyarrow as pa

    df = keyed_data(600, seed=8, k=2)[["v", "label", "p1"]]
    spec = KeySpec(score_col="v", multiclass=True)
    one = pd.DataFrame({"v": [v[1:] for v in df["v"]], "label": df["label"]})
    with open_keyed(engine, one, spec, npartitions=3) as r:
        assert r.n_classes == 2
        got = gather(r)
    assert_matches(got, oracle(df, KeySpec(score_col=None, score_cols=("p1",),
                                           multiclass=True), 2))
    empty = pd.DataFrame({"v": [np.zeros(0)] * len(df), "label": df["label"]})
    # All null: a column of vectors all the same (Spark: its schema says so).
    vectors = pd.ArrowDtype(pa.list_(pa.float64()))
    null = pd.DataFrame({"v": pd.Series([None] * len(df), dtype=vectors),
                         "label": df["label"]})
    _, stats = read_rows(pa.Table.from_pandas(null, preserve_index=False), spec)
    if engine.name == "spark":
        null = null.assign(v=pd.Series([None] * len(df), dtype=object))
    for on_invalid in ("raise", "drop"):
        with pytest.raises(DataError) as null_rows:
            add_up_rows([stats], on_invalid)
        assert str(null_rows.value).startswith(
            "column 'v': 600 rows are null" if on_invalid == "raise"
            else "no rows with weight > 0 to use (600 rows read, 600 invalid)")
        for data, want in ((empty, "column 'v': no vectors to calibrate (need K >= 2 entries)"),
                           (null, str(null_rows.value))):
            with pytest.raises(DataError) as exc:
                with open_keyed(engine, data, spec, on_invalid,
                                schema="v array<double>, label bigint") as r:
                    r.map(len)
            assert str(exc.value) == want


# -- bad input: the messages of read_rows ------------------------------------------------

@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("multiclass", [False, True])
def test_bad_rows_raise_the_read_rows_message_or_are_dropped(engine, multiclass, passes):
    k = 3 if multiclass else 0
    spec = (KeySpec(score_col="v", weight_col="w", multiclass=True) if multiclass
            else KeySpec(weight_col="w", by=("g",)))
    bad = keyed_data(1500, seed=4, k=k)
    if multiclass:
        bad.loc[bad.index[::17], "v"] = None
        v = list(bad["v"])
        v[2] = np.array([0.5, 0.5])  # ragged
        bad["v"] = v
    else:
        bad.loc[bad.index[::17], "score"] = np.nan
    bad.loc[bad.index[5::23], "label"] = 7
    bad.loc[bad.index[3::31], "w"] = -1.0
    # The message of the pandas reader on the same rows, in one batch.
    _, stats = read_rows(bad, spec, n_classes=k or None)
    with pytest.raises(DataError) as want:
        add_up_rows([stats], "raise")
    with pytest.raises(DataError) as got:
        with open_keyed(engine, bad, spec, passes=passes) as r:
            r.map(len)
    assert str(got.value) == str(want.value)
    with pytest.raises(DataError) as got:
        with open_keyed(engine, bad, spec, passes=passes) as r:
            r.map_rows(lambda p: p.n_rows)
    assert str(got.value) == str(want.value)
    # Dropped: the tables are the oracle's over the valid rows (a second pass: the same).
    with open_keyed(engine, bad, spec, on_invalid="drop", passes=passes) as r:
        tables = gather(r)
        again = gather(r) if passes > 1 else tables
        totals = add_up_rows([stats], "drop")
        assert (r.n_rows, r.dropped_rows) == (totals.n_rows, totals.dropped_rows)
        assert r.weight_total == pytest.approx(totals.weight_total, rel=1e-12)
    lab = bad["label"].to_numpy()
    if multiclass:
        valid = np.array([x is not None and len(x) == 3 for x in bad["v"]]) & (lab < k)
    else:
        valid = bad["score"].notna().to_numpy() & np.isin(lab, [0, 1])
    valid &= (bad["w"] >= 0).to_numpy()
    assert int((~valid).sum()) == totals.dropped_rows
    assert_matches(tables, oracle(bad[valid], spec, k))
    assert_matches(again, oracle(bad[valid], spec, k))


def test_missing_column_is_the_read_rows_error(engine):
    df = keyed_data(200, seed=1)
    for spec in [KeySpec(score_col="nope"), KeySpec(weight_col="nope"), KeySpec(label_col="y"),
                 KeySpec(by=("g", "zz")),
                 KeySpec(score_col=None, score_cols=("score", "p9"), multiclass=True)]:
        with pytest.raises(DataError) as want:
            read_rows(df, spec)
        with pytest.raises(DataError) as got:
            with open_keyed(engine, df, spec) as r:
                r.map(len)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("passes", [1, 2])
def test_no_usable_rows(engine, passes):
    df = keyed_data(300, seed=1).assign(w=0.0)
    with pytest.raises(DataError, match="no rows with weight > 0"):
        with open_keyed(engine, df, KeySpec(weight_col="w"), passes=passes) as r:
            r.map(len)
