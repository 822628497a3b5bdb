"""Every variant, and discretize, streams a Parquet path on the local engine: ten times
the rows, at most 1.5 times the peak memory.

Each fit runs in a new Python process reading a Parquet file with
``memory_rows = batch_rows = chunk_rows`` small; a thread in that process
(test code) samples its anonymous resident memory (``RssAnon``: heap and
anonymous mappings, not the page cache of files read or spilled runs
memory-mapped back) from after the imports to the end of the fit. The same
fit on a file of 10x the rows (row groups of the same size: a row group is
what is read at a time) must peak at most 1.5x higher: memory is set by
the options, not by the number of rows.
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

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

SMALL, LARGE = 400_000, 4_000_000
# The system allocator and one thread each, as tests/test_bounded_memory.py explains.
ENV = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system", "OPENBLAS_NUM_THREADS": "1",
       "MALLOC_ARENA_MAX": "2", "ARROW_IO_THREADS": "1", "OMP_NUM_THREADS": "1"}

CHILD = textwrap.dedent("""
    import json, sys, threading, time
    import distcal

    def anon_mb():
        text = open("/proc/self/status").read()
        return int(text.split("RssAnon:")[1].split("kB")[0]) >> 10

    base = anon_mb()
    peak = [base]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], anon_mb())
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True).start()
    opts = dict(memory_rows=200_000, batch_rows=200_000, chunk_rows=200_000)
    kind = sys.argv[2]
    if kind == "by":
        model = distcal.fit(sys.argv[1], by="g", **opts)
    elif kind == "multiclass":
        model = distcal.fit(sys.argv[1], score_col="s", label_col="y", **opts)
    elif kind == "discretize":
        table = distcal.discretize(sys.argv[1], label_col="y", **opts)
    else:
        model = distcal.fit(sys.argv[1], method="sigmoid", score_col="s", label_col="y",
                            by="g", **opts)
    done.set()
    n_rows = int(table["n"].sum()) if kind == "discretize" else model.n_rows
    print(json.dumps({"peak_mb": peak[0] - base, "n_rows": n_rows}))
""")


def _write(path, rows):
    rng = np.random.default_rng(0)
    schema = pa.schema([("score", pa.float64()), ("label", pa.int8()), ("g", pa.string()),
                        ("s", pa.list_(pa.float64(), 3)), ("y", pa.int8())])
    step = 200_000  # one row group each: the unit of reading, as large as batch_rows
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, step):
            k = min(step, rows - start)
            s = rng.random(k)  # all distinct: the keyed tables grow with the rows
            p = rng.dirichlet([1, 1, 1], k)
            writer.write_table(pa.table({
                "score": s, "label": (rng.random(k) < s).astype(np.int8),
                "g": rng.choice(["a", "b", "c", "d"], k),
                "s": pa.FixedSizeListArray.from_arrays(pa.array(p.ravel()), 3),
                "y": rng.integers(0, 3, k).astype(np.int8)}, schema=schema))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("keyed_memory")
    out = {}
    for name, rows in (("small", SMALL), ("large", LARGE)):
        _write(d / f"{name}.parquet", rows)
        out[name] = d / f"{name}.parquet"
    return out


def _peak(path, kind):
    run = subprocess.run([sys.executable, "-c", CHILD, str(path), kind], env=ENV,
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["by", "multiclass", "multiclass-by-sigmoid", "discretize"])
def test_ten_times_the_rows_take_at_most_one_and_a_half_times_the_memory(files, kind):
    small, large = _peak(files["small"], kind), _peak(files["large"], kind)
    assert (small["n_rows"], large["n_rows"]) == (SMALL, LARGE)
    assert large["peak_mb"] <= 1.5 * small["peak_mb"], (small, large)
