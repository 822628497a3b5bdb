"""The spill path of the local engine: pooled chunks spilled as sorted runs, read back exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import distcal
from distcal.core.distinct import pool_ties
from distcal.core.keyed import pool_keyed
from distcal.engines.local_keyed import KeyedStore


@pytest.mark.parametrize("keep", [False, True], ids=["one pass", "kept for later passes"])
@pytest.mark.parametrize("decimals", [None, 4])
def test_big_chunks_spill_as_runs_and_read_back_exactly(decimals, keep):
    rng = np.random.default_rng(7)
    s = rng.random(120_000)
    if decimals:
        s = np.round(s, decimals)
    y = (rng.random(s.shape[0]) < s).astype(np.float64)
    g = rng.integers(0, 3, s.shape[0])
    key = [(None, None), ((0,), None), ((1,), None), ((2,), None)]
    chunks = [pool_keyed(np.concatenate([np.zeros(20_000, np.int64), 1 + g[i:i + 20_000]]), key,
                         np.tile(s[i:i + 20_000], 2), np.tile(y[i:i + 20_000], 2), None)
              for i in range(0, 120_000, 20_000)]
    store = KeyedStore(memory_rows=16_000, keep=keep)
    for c in chunks:
        store.add(c)
    assert store.spilled
    spill_dir = store._tmp
    ranges = list(store.ranges())
    # Kept: the pooled ranges replace the runs on disk, and later passes read them.
    on_disk = sorted(p.name[:3] for p in spill_dir.iterdir())
    assert on_disk == (["ran"] * len(ranges) if keep else ["run"] * (len(chunks) - 1))
    if keep:
        again = list(store.ranges())
        assert [r.keys for r in again] == [r.keys for r in ranges]
        for a, b in zip(again, ranges):
            np.testing.assert_array_equal(a.starts, b.starts)
            for f in ("score", "weight", "positives", "count", "label_sum"):
                np.testing.assert_array_equal(getattr(a.table, f), getattr(b.table, f))
    store.close()
    assert not spill_dir.exists()
    assert len(ranges) > 1
    for k in key:  # each key's ranges, in order, are its whole table
        whole = pool_ties(s if k[0] is None else s[g == k[0][0]],
                          y if k[0] is None else y[g == k[0][0]])
        parts = [r.key_table(r.keys.index(k)) for r in ranges if k in r.keys]
        back = {f: np.concatenate([getattr(p, f) for p in parts])
                for f in ("score", "weight", "positives", "count", "label_sum")}
        for f, v in back.items():
            np.testing.assert_array_equal(v, getattr(whole, f))


def test_fit_from_path_with_spill_equals_in_memory(tmp_path):
    rng = np.random.default_rng(8)
    s = rng.beta(2, 5, 200_000)
    y = (rng.random(s.shape[0]) < s).astype(np.int64)
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"score": s, "label": y}), path, row_group_size=10_000)
    opts = {"batch_rows": 10_000, "chunk_rows": 30_000, "memory_rows": 40_000}
    assert distcal.fit(str(path), **opts) == distcal.fit(pd.DataFrame({"score": s, "label": y}))


@pytest.mark.slow
def test_a_frame_in_memory_is_pooled_in_memory_whatever_its_rows(caplog):
    """Past the default budget (2^23 distinct pairs) a frame already in memory is not
    spilled: its pooled table is at most its own rows, and spilling saved no memory
    while it doubled the fit's time. A Parquet path, or memory_rows given, still
    spills."""
    import logging

    rng = np.random.default_rng(9)
    n = (1 << 23) + 5000
    df = pd.DataFrame({"score": rng.random(n), "label": rng.integers(0, 2, n)})
    with caplog.at_level(logging.INFO, logger="distcal"):
        res = distcal.optimal_threshold(df)
    assert "local: 1 keys pooled\n" in caplog.text + "\n" and "spilled" not in caplog.text
    assert res.n_rows == n
    small = df.iloc[:50_000]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="distcal"):
        spilled = distcal.optimal_threshold(small, memory_rows=20_000, batch_rows=10_000)
    assert "(spilled to disk)" in caplog.text
    assert spilled == distcal.optimal_threshold(small)
