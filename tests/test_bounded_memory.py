"""A Parquet file twice a hard memory limit (4x its working part) still calibrates, exactly.

The fit runs in a subprocess whose data segment is capped with
``resource.setrlimit(RLIMIT_DATA)`` (heap and anonymous mappings: every
numpy and Arrow buffer and thread stack; not the page cache of files read
or memory-mapped) at what the imports took plus ``WORK_MB``. The same limit
makes a plain ``pyarrow.parquet.read_table`` of the file fail, which shows
the limit binds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.optimize import isotonic_regression

import distcal

WORK_MB = 200  # on top of the ~170 MB that importing numpy, scipy, pandas and pyarrow takes
# (distcal imports scipy where it uses it: the child imports it before measuring)
ROWS = int(os.environ.get("DISTCAL_BIG_ROWS", 100_000_000))  # ~0.9 GB of Parquet
# The system allocator (Arrow's own pools reserve address space up front) and
# fewer threads (each stack counts as data) make the measure mean memory used.
ENV = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system", "OPENBLAS_NUM_THREADS": "1",
       "MALLOC_ARENA_MAX": "2", "ARROW_IO_THREADS": "1", "OMP_NUM_THREADS": "1"}

CHILD = textwrap.dedent("""
    import json, resource, sys
    import distcal, pyarrow.parquet as pq
    import scipy.optimize  # the fit's PAV: imported by the fit, counted with the imports
    status = open("/proc/self/status").read()
    base = int(status.split("VmData:")[1].split("kB")[0]) << 10
    limit = base + (int(sys.argv[2]) << 20)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    if sys.argv[3] == "read":
        pq.read_table(sys.argv[1])
        print(json.dumps({"read": True}))
    else:
        # Peak above the imports, measured: ~195 MB with memory_rows = 2**18 (too close
        # to WORK_MB), ~165 MB with 2**17: the options set it.
        model = distcal.fit(sys.argv[1], batch_rows=1 << 18, chunk_rows=1 << 18,
                            memory_rows=1 << 17)
        model.save(sys.argv[4])
        print(json.dumps({"n_rows": model.n_rows, "limit_mb": limit >> 20}))
""")


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "scores.parquet"
    rng = np.random.default_rng(0)
    schema = pa.schema([("score", pa.float64()), ("label", pa.int8())])
    step = 10_000_000
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for start in range(0, ROWS, step):
            k = min(step, ROWS - start)
            s = rng.random(k)  # all distinct: the distinct-score table is as big as the data
            y = (rng.random(k) < s * s).astype(np.int8)
            writer.write_table(pa.table({"score": s, "label": y}, schema=schema),
                               row_group_size=1 << 20)
    return path


def child(*args):
    return subprocess.run([sys.executable, "-c", CHILD, *map(str, args)], env=ENV,
                          capture_output=True, text=True, timeout=1200)


@pytest.mark.slow
def test_file_larger_than_memory_limit(big_file, tmp_path):
    plain = child(big_file, WORK_MB, "read")
    assert plain.returncode != 0 and "MemoryError" in plain.stderr + plain.stdout

    r = child(big_file, WORK_MB, "fit", tmp_path / "model")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["n_rows"] == ROWS
    size_mb = os.path.getsize(big_file) >> 20
    assert size_mb >= 2 * out["limit_mb"], "the file must be twice the whole limit"
    assert size_mb >= 4 * WORK_MB, "and four times the memory the fit may use"
    bounded = distcal.load(tmp_path / "model").blocks

    # Oracle: scipy's PAV over the rows sorted by score, in this process (no limit);
    # rows of equal scores pooled first (weights), as isotonic regression on scores does.
    table = pq.read_table(big_file)
    s, y = table["score"].to_numpy(), table["label"].to_numpy()
    order = np.argsort(s)
    s, y = s[order], y[order].astype(np.float64)
    del table, order
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    if len(starts) == len(s):
        w = None
    else:
        w = np.diff(np.r_[starts, len(s)]).astype(np.float64)
        y = np.add.reduceat(y, starts) / w
    pav = isotonic_regression(y, weights=w).x
    runs = np.flatnonzero(np.r_[True, pav[1:] != pav[:-1]])  # the blocks: runs of one value
    ends = np.r_[runs[1:], len(pav)] - 1
    distinct = s[starts]
    np.testing.assert_array_equal(bounded["score_min"], distinct[runs])
    np.testing.assert_array_equal(bounded["score_max"], distinct[ends])
    weights = np.ones(len(pav)) if w is None else w
    np.testing.assert_array_equal(bounded["weight"], np.add.reduceat(weights, runs))
    np.testing.assert_allclose(bounded["prob"], pav[runs], rtol=0, atol=1e-12)
