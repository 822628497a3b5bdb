"""The spill path of the local engine: sorted chunks spilled as runs without a merge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import distcal
from distcal.core.distinct import merge_tables, pool_ties
from distcal.core.store import TableStore


@pytest.mark.parametrize("decimals", [None, 4])
def test_big_chunks_spill_as_runs_and_read_back_exactly(decimals):
    rng = np.random.default_rng(7)
    s = rng.random(120_000)
    if decimals:
        s = np.round(s, decimals)
    y = (rng.random(s.shape[0]) < s).astype(np.float64)
    chunks = [pool_ties(s[i:i + 20_000], y[i:i + 20_000]) for i in range(0, 120_000, 20_000)]
    whole = merge_tables(chunks)
    with TableStore(memory_rows=16_000) as st:
        for c in chunks:
            st.add(c)
        assert st.spilled
        back = merge_tables(list(st.ranges(max_rows=7_000)))
    for f in ("score", "weight", "positives", "count", "label_sum"):
        np.testing.assert_array_equal(getattr(back, f), getattr(whole, f))


def test_fit_from_path_with_spill_equals_in_memory(tmp_path):
    rng = np.random.default_rng(8)
    s = rng.beta(2, 5, 200_000)
    y = (rng.random(s.shape[0]) < s).astype(np.int64)
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"score": s, "label": y}), path, row_group_size=10_000)
    opts = {"batch_rows": 10_000, "chunk_rows": 30_000, "memory_rows": 40_000}
    assert distcal.fit(str(path), **opts) == distcal.fit(pd.DataFrame({"score": s, "label": y}))
