"""A Parquet file several times a hard memory limit still calibrates, exactly.

The fit runs in a subprocess whose data segment is capped with
``resource.setrlimit(RLIMIT_DATA)`` (heap and anonymous mappings: every
numpy and Arrow buffer; not the page cache of files read or memory-mapped).
The same limit makes a plain ``pyarrow.parquet.read_table`` of the file
fail, which shows the limit binds.
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

import distcal

LIMIT_MB = 320
ROWS = int(os.environ.get("DISTCAL_BIG_ROWS", 125_000_000))  # ~1 GB of Parquet
ENV = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system", "OPENBLAS_NUM_THREADS": "1",
       "MALLOC_ARENA_MAX": "2"}

CHILD = textwrap.dedent("""
    import json, resource, sys
    limit = int(sys.argv[2]) << 20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    if sys.argv[3] == "read":
        import pyarrow.parquet as pq
        pq.read_table(sys.argv[1])
        print(json.dumps({"read": True}))
    else:
        import distcal
        model = distcal.fit(sys.argv[1], batch_rows=1 << 18, chunk_rows=1 << 18,
                            memory_rows=1 << 18)
        model.save(sys.argv[4])
        print(json.dumps({"n_rows": model.n_rows}))
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
    size_mb = os.path.getsize(big_file) >> 20
    assert size_mb >= 3 * LIMIT_MB, "the file must be several times the limit"
    plain = child(big_file, LIMIT_MB, "read")
    assert plain.returncode != 0 and "MemoryError" in plain.stderr + plain.stdout

    r = child(big_file, LIMIT_MB, "fit", tmp_path / "model")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["n_rows"] == ROWS
    bounded = distcal.load(tmp_path / "model")

    # Oracle: the same fit with everything in memory (no limit in this process).
    table = pq.read_table(big_file)
    in_memory = distcal.fit(table)
    assert bounded == in_memory
    q = np.linspace(0, 1, 100_001)
    np.testing.assert_allclose(bounded.predict(q), in_memory.predict(q), rtol=0, atol=1e-12)
