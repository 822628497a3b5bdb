"""A range partition far larger than a Python worker's memory limit still fits exactly.

Half of 1e7 rows share one score (a default score of 0), so one range
partition holds more than 5e6 rows; the other half has ~1e5 distinct
scores. The Spark job runs in its own process (own JVM, Python workers not
reused); once a warm-up task has measured what a worker's imports take,
the workers' data segment is capped (``RLIMIT_DATA`` set on PySpark's
daemon, which every worker is forked from) at that plus ``WORK_MB``. After
the fit, with the same daemon, a task that gathers a range partition in
one Arrow table and pools it, as the executors did before they pooled
chunk by chunk, fails with a MemoryError; that shows the cap binds (and
the same test fails on the code before chunks). Oracle: scipy's PAV on
the rows pooled by pandas.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import full_jit_env
from scipy.optimize import isotonic_regression

import distcal

ROWS = 10_000_000
WORK_MB = 160  # a 1M-row chunk needs ~60 MB; pooling the 5M-row partition at once ~300 MB

CHILD = textwrap.dedent("""
    import json, os, resource, sys
    from pyspark.sql import SparkSession

    path, out, work_mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # as the README says
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.python.worker.reuse", "false")
             .config("spark.sql.shuffle.partitions", "8")
             # The system allocator and one thread per pool: the cap then
             # measures memory in use, not address space reserved up front.
             .config("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL", "system")
             .config("spark.executorEnv.OPENBLAS_NUM_THREADS", "1")
             .config("spark.executorEnv.MALLOC_ARENA_MAX", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import distcal
    df = spark.read.parquet(path)

    def vmdata(batches):
        import numpy, pandas, pyarrow, scipy.optimize  # what the executors import
        import distcal.engines.spark.keyed  # noqa: F401
        for _ in batches:
            pass
        status = open("/proc/self/status").read()
        kb = int(status.split("VmData:")[1].split("kB")[0])
        yield pyarrow.RecordBatch.from_pydict({"kb": [kb]})

    base_kb = max(r["kb"] for r in df.limit(1000).mapInArrow(vmdata, "kb long").collect())

    # Processes come and go while /proc is read (short-lived workers, the
    # JVM's helpers): one that has exited meanwhile is simply not there.
    def descendants(pid):
        kids = []
        try:
            tasks = os.listdir(f"/proc/{pid}/task")  # the JVM forks from any of its threads
        except OSError:
            return []
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    kids += [int(c) for c in fh.read().split()]
            except OSError:
                pass
        return kids + [d for k in kids for d in descendants(k)]

    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                return fh.read()
        except OSError:
            return b""

    daemons = [p for p in descendants(os.getpid()) if b"pyspark.daemon" in cmdline(p)]
    assert daemons, "no PySpark daemon found"
    limit = (base_kb << 10) + (work_mb << 20)
    for pid in daemons:
        resource.prlimit(pid, resource.RLIMIT_DATA, (limit, limit))

    def gather_and_pool(batches):
        # What a range partition did before chunks: all its rows in one table, one pooling.
        import pyarrow
        from distcal.core.keyed import KeySpec, pool_rows
        from distcal.core.rows import read_rows
        table = pyarrow.Table.from_batches(list(batches))
        rows, _ = read_rows(table, KeySpec())
        pool_rows(rows, [None])
        yield pyarrow.RecordBatch.from_pydict({"n": [table.num_rows]})

    model = distcal.fit(df)
    model.save(out)
    # Workers forked from the capped daemon ran the fit only if it is still the daemon.
    same_daemon = sorted(p for p in descendants(os.getpid())
                         if b"pyspark.daemon" in cmdline(p)) == sorted(daemons)
    try:
        # The hot score's rows in one task, as the range shuffle sends them (no shuffle here).
        df.where("score = 0").coalesce(1).mapInArrow(gather_and_pool, "n long").collect()
        gathered = "ok"
    except Exception as exc:
        gathered = "MemoryError" if "MemoryError" in str(exc) else str(exc)[-2000:]
    print(json.dumps({"gathered": gathered, "same_daemon": same_daemon,
                      "limit_mb": limit >> 20, "base_mb": base_kb >> 10}))
""")


@pytest.fixture(scope="module")
def hot_file(tmp_path_factory):
    rng = np.random.default_rng(16)
    u = rng.random(ROWS)
    # Memory follows distinct scores, so the other half has few (~1e5) of them.
    s = np.where(rng.random(ROWS) < 0.5, 0.0, np.round(u, 5))
    y = (rng.random(ROWS) < 0.2 + 0.6 * u).astype(np.float64)
    path = tmp_path_factory.mktemp("hot") / "scores.parquet"
    pq.write_table(pa.table({"score": s, "label": y}), path, row_group_size=1 << 20)
    return path, s, y


def test_hot_partition_fits_under_a_worker_memory_cap(hot_file, tmp_path):
    path, s, y = hot_file
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "model"),
                        str(WORK_MB)], capture_output=True, text=True, timeout=900,
                       env=full_jit_env())  # 1e7 rows through the JVM
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["same_daemon"] and out["gathered"] == "MemoryError", out

    pooled = pd.DataFrame({"s": s, "y": y}).groupby("s")["y"].agg(["sum", "count"])
    fitted = isotonic_regression(pooled["sum"] / pooled["count"], weights=pooled["count"]).x
    model = distcal.load(tmp_path / "model")
    assert model.n_rows == ROWS
    np.testing.assert_allclose(model.predict(pooled.index.to_numpy()), fitted, rtol=0,
                               atol=1e-9)
