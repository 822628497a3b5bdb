"""How the fit grows with N: time, peak driver/client memory and shuffle bytes.

Usage: python bench/scale.py {spark,dask} N [N ...] [--kind cont|ties] [--evaluate]
       python bench/scale.py keyed N [N ...] [--hot] [--by S] [--range-rows R] [--large]

Each N runs in a fresh process (so each peak RSS is that run's), rows
generated where the work runs (Spark: ``spark.range`` on the executors;
Dask: one numpy draw per partition on the workers), never in the driver:

* spark: local[2] (driver memory 4g, 2 cores), ``distcal.fit(df)``; shuffle
  bytes from Spark's status store (sum of shuffle write over stages);
* dask: LocalCluster of 2 worker processes x 1 thread,
  ``distcal.fit(ddf)``; bytes moved between workers from the workers'
  transfer counters.

``keyed``: peak Python worker memory per range against rows per range,
Spark's keyed pass (``SparkEngine.open_keyed``, the pass of every fit,
ranges chosen from the estimated distinct (key, score) pairs), scores
``round(rand, 7)`` (``--hot``: 40% of the rows on one score; ``--by S``: a
segment column of S about equal segments, so each range holds the global
and the segment tables; rows per range are the global key's). Python
workers are not reused, so each task's ``VmHWM`` is that range's peak.
Each run also times Spark's own ``repartitionByRange(8, score)`` +
``sortWithinPartitions`` written to the ``noop`` sink: the anchor of the
same session. N >= 1e8 runs only with ``--large``.

Scores: "cont" uniform (all distinct), "ties" rounded to 6 decimals (at most
1e6 distinct whatever N); labels ~ Bernoulli(score). Reported per run: fit
seconds (data generation included: it is streamed into the fit), peak RSS
of the driver (the Python process calling distcal) and of the whole
process tree (JVM or workers), the shuffle bytes, and ratios to the first
N given (target: time <= 11x for 10x rows, driver RSS flat).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import run_with_peak_rss  # noqa: E402  (bench/ is on sys.path when run as a script)


def child_spark(n: int, kind: str, evaluate: bool) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import distcal

    log_dir = tempfile.mkdtemp(prefix="distcal-eventlog-")
    spark = (SparkSession.builder.master("local[2]").appName("distcal-scale")
             .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", log_dir)
             .config("spark.eventLog.compress", "false")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    parts = max(8, n // 2_500_000)
    s = F.rand(1) if kind == "cont" else F.round(F.rand(1), 6)
    df = (spark.range(0, n, numPartitions=parts).select(s.alias("score"), F.rand(2).alias("u"))
          .select("score", (F.col("u") < F.col("score")).cast("int").alias("label")))
    t0 = time.perf_counter()
    model = distcal.fit(df)
    out = {"fit_s": time.perf_counter() - t0, "blocks": len(model.blocks),
           "input_partitions": parts}
    if evaluate:
        t0 = time.perf_counter()
        rep = distcal.evaluate(df, prob_col="score")
        out.update(evaluate_s=time.perf_counter() - t0, roc_points=len(rep.roc))
    spark.stop()
    # shuffle bytes and tasks from the event log (every task's end event)
    out["shuffle_bytes"] = out["tasks"] = 0
    files = [os.path.join(d, f) for d, _, fs in os.walk(log_dir) for f in fs]
    for name in files:
        with open(name) as fh:
            for line in fh:
                if '"SparkListenerTaskEnd"' not in line:
                    continue
                ev = json.loads(line)
                out["tasks"] += 1
                sw = (ev.get("Task Metrics") or {}).get("Shuffle Write Metrics") or {}
                out["shuffle_bytes"] += int(sw.get("Shuffle Bytes Written", 0))
    shutil.rmtree(log_dir, ignore_errors=True)
    return out


def _peak_kb() -> int:
    """This process's peak resident memory (VmHWM), in kB."""
    with open("/proc/self/status") as fh:
        return int(fh.read().split("VmHWM:")[1].split("kB")[0])


def child_keyed(n: int, hot: bool, range_rows: int, by: int = 0) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from distcal.core.isotonic import merge_blocks, pav_blocks
    from distcal.core.keyed import KeySpec
    from distcal.engines.spark import SparkEngine

    spark = (SparkSession.builder.master("local[2]").appName("distcal-scale-keyed")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.python.worker.reuse", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    u = F.round(F.rand(1), 7)
    score = F.when(F.rand(3) < 0.4, F.lit(0.5)).otherwise(u) if hot else u
    parts = max(8, n // 2_500_000)
    df = (spark.range(0, n, numPartitions=parts).select(score.alias("score"))
          .select("score", (F.rand(2) < F.col("score")).cast("int").alias("label")))
    if by:  # segments of about equal sizes: every range holds global and segment tables
        df = df.withColumn("g", (F.rand(4) * by).cast("int"))
    out: dict = {"input_partitions": parts}

    t0 = time.perf_counter()
    df.repartitionByRange(8, "score").sortWithinPartitions("score").write.format("noop") \
        .mode("overwrite").save()
    out["anchor_s"] = time.perf_counter() - t0

    def keyed_fn(t):
        glob = t.key_table(t.keys.index((None, None)))
        blocks = pav_blocks(glob)
        return blocks, _peak_kb(), int(glob.count.sum()), len(t.table)

    t0 = time.perf_counter()
    with SparkEngine().open_keyed(df, KeySpec(by=("g",) if by else ()), on_invalid="raise",
                                  range_rows=range_rows) as kr:
        got = kr.map(keyed_fn)
    merge_blocks([g[0] for g in got])
    out["keyed"] = {"s": time.perf_counter() - t0, "ranges": len(got),
                    "peak_mb": [g[1] / 1024 for g in got], "rows": [g[2] for g in got],
                    "pairs": [g[3] for g in got]}

    spark.stop()
    return out


def main_keyed(args: argparse.Namespace) -> None:
    print(f"# keyed worker memory, scores round(rand, 7){', 40% hot' if args.hot else ''}"
          f"{f', by {args.by} segments' if args.by else ''}, "
          f"range_rows {args.range_rows:.0e}; load before: {os.getloadavg()[0]:.1f}")
    print(f"{'N':>8} {'path':<22}{'ranges':>7}{'rows/range':>12}{'pairs/range':>12}"
          f"{'worker peak':>13}{'time':>8}{'anchor':>8}")
    for n in map(int, args.n):
        if n >= 100_000_000 and not args.large:
            print(f"{n:>8.0e} skipped (pass --large)")
            continue
        cmd = [sys.executable, __file__, "keyed", str(n), "--child", "--by", str(args.by),
               "--range-rows", str(int(args.range_rows))] + (["--hot"] if args.hot else [])
        text = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
        out = json.loads(text.strip().splitlines()[-1])
        for name, label in (("keyed", "open_keyed (ranges from data)"),):
            r = out[name]
            print(f"{n:>8.0e} {label:<22.22}{r['ranges']:>7}{max(r['rows']):>12.3g}"
                  f"{max(r['pairs']):>12.3g}{max(r['peak_mb']):>10.0f} MB{r['s']:>7.1f}s"
                  f"{out['anchor_s']:>7.1f}s", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


def _gen(i: int, rows: int, kind: str):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(1000 + i)
    s = rng.random(rows)
    if kind == "ties":
        s = np.round(s, 6)
    return pd.DataFrame({"score": s, "label": (rng.random(rows) < s).astype(np.int64)})


def child_dask(n: int, kind: str, evaluate: bool) -> dict:
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    import distcal

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                           memory_limit="10GB")
    client = Client(cluster)
    per = 2_500_000
    parts = max(8, -(-n // per))
    sizes = [n // parts + (1 if i < n % parts else 0) for i in range(parts)]
    ddf = dd.from_map(_gen, range(parts), sizes, kind=kind)
    t0 = time.perf_counter()
    model = distcal.fit(ddf)
    out = {"fit_s": time.perf_counter() - t0, "blocks": len(model.blocks),
           "input_partitions": parts}
    if evaluate:
        t0 = time.perf_counter()
        rep = distcal.evaluate(ddf.rename(columns={"score": "prob"}))
        out.update(evaluate_s=time.perf_counter() - t0, roc_points=len(rep.roc))

    def moved(dask_worker=None):
        # bytes this worker sent to the other (0 when a task's inputs were local)
        return int(getattr(dask_worker, "transfer_outgoing_bytes_total", 0))

    out["shuffle_bytes"] = sum(client.run(moved).values())
    client.close()
    cluster.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=("spark", "dask", "keyed"))
    ap.add_argument("n", type=float, nargs="+")
    ap.add_argument("--kind", default="cont", choices=("cont", "ties"))
    ap.add_argument("--evaluate", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--hot", action="store_true")
    ap.add_argument("--range-rows", type=float, default=2e5)
    ap.add_argument("--by", type=int, default=0, help="segments (keyed: by= a column of "
                    "this many about equal segments; 0: none)")
    ap.add_argument("--large", action="store_true")
    args = ap.parse_args()
    if args.engine == "keyed":
        if args.child:
            print(json.dumps(child_keyed(int(args.n[0]), args.hot, int(args.range_rows),
                                        args.by)))
        else:
            main_keyed(args)
        return
    if args.child:
        fn = child_spark if args.engine == "spark" else child_dask
        out = fn(int(args.n[0]), args.kind, args.evaluate)
        out["driver_peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        print(json.dumps(out))
        return
    print(f"# {args.engine} scale, kind {args.kind}, one fresh process per N; "
          f"load before: {os.getloadavg()[0]:.1f}")
    print(f"{'N':>8}{'fit s':>8}{'x time':>8}{'driver RSS':>12}{'tree RSS':>10}"
          f"{'shuffle':>10}{'B/row':>7}{'tasks':>7}{'blocks':>8}" +
          (f"{'eval s':>8}" if args.evaluate else ""))
    first = None
    for n in map(int, args.n):
        cmd = [sys.executable, __file__, args.engine, str(n), "--kind", args.kind, "--child"]
        if args.evaluate:
            cmd.append("--evaluate")
        text, peak = run_with_peak_rss(cmd, every=0.1)
        out = json.loads(text.strip().splitlines()[-1])
        first = first or out["fit_s"]
        print(f"{n:>8.0e}{out['fit_s']:8.1f}{out['fit_s'] / first:8.1f}"
              f"{out['driver_peak_rss'] / 2**20:10.0f}MB{peak / 2**30:8.2f}GB"
              f"{out['shuffle_bytes'] / 2**20:8.0f}MB{out['shuffle_bytes'] / n:7.1f}"
              f"{out.get('tasks', 0):7d}{out['blocks']:8d}" +
              (f"{out['evaluate_s']:8.1f}" if args.evaluate else ""), flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
