"""A range partition pooled chunk by chunk equals the pooling of all its rows.

The Spark executors pool each chunk of a range partition on its own and
merge the pooled runs (``KeyedRuns``), so that memory follows distinct
scores, not rows. Oracle: pandas ``groupby`` over all the rows at once.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from distcal.core.distinct import pool_ties
from distcal.core.keyed import KeyedTable
from distcal.engines.spark.keyed import KeyedRuns, chunks


def pandas_pool(s: np.ndarray, y: np.ndarray, w: np.ndarray) -> pd.DataFrame:
    df = pd.DataFrame({"s": s, "w": w, "wy": w * y, "n": 1, "y": y})
    return df.groupby("s", sort=True).sum()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), distinct=st.integers(1, 50), chunk=st.integers(1, 60),
       seed=st.integers(0, 2**32 - 1))
def test_pooled_runs_equal_one_pooling_of_all_rows(n: int, distinct: int, chunk: int,
                                                   seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, distinct, n) / distinct
    y = (rng.random(n) < s).astype(float)
    w = rng.integers(1, 4, n).astype(float)
    runs = KeyedRuns()
    for start in range(0, n, chunk):
        sl = slice(start, start + chunk)
        runs.add(KeyedTable.single(pool_ties(s[sl], y[sl], w[sl])))
    # The run stack stays logarithmic in the number of chunks.
    assert len(runs.runs) <= 1 + int(np.log2(max(1, -(-n // chunk)))) + 1
    table = runs.table().key_table(0)
    want = pandas_pool(s, y, w)
    np.testing.assert_array_equal(table.score, want.index.to_numpy())
    np.testing.assert_allclose(table.weight, want["w"], rtol=1e-12)
    np.testing.assert_allclose(table.positives, want["wy"], rtol=1e-12)
    np.testing.assert_array_equal(table.count, want["n"])
    np.testing.assert_allclose(table.label_sum, want["y"], rtol=1e-12)


def test_a_hot_score_is_held_once_per_run() -> None:
    # 40% of the rows share one score: after pooling, each run holds it once.
    rng = np.random.default_rng(3)
    n = 50_000
    s = np.where(rng.random(n) < 0.4, 0.0, rng.integers(1, 200, n) / 200)
    y = (rng.random(n) < 0.3).astype(float)
    runs = KeyedRuns()
    for start in range(0, n, 1000):
        runs.add(KeyedTable.single(pool_ties(s[start:start + 1000], y[start:start + 1000])))
        assert sum(len(r.table) for r in runs.runs) <= 200 * len(runs.runs)
    table = runs.table().key_table(0)
    assert table.score[0] == 0.0 and table.count[0] == int((s == 0).sum())
    assert table.n_rows == n


def test_chunks_gather_batches_to_the_chunk_size_and_skip_empty_ones() -> None:
    batches = [pa.record_batch({"x": np.arange(k, dtype=float)}) for k in (3, 0, 4, 2, 0, 5)]
    got = [t.num_rows for t in chunks(iter(batches), rows=6)]
    assert got == [7, 7]
    got = [t.num_rows for t in chunks(iter(batches), rows=100)]
    assert got == [14]
    assert list(chunks(iter([]), rows=6)) == []
    col = pa.concat_tables(list(chunks(iter(batches), rows=6))).column("x").to_numpy()
    np.testing.assert_array_equal(col, np.concatenate([b.column(0).to_numpy() for b in batches]))
