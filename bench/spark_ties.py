"""distcal's Spark fit across tie regimes, against MLlib and Spark's own range sort.

Usage: python bench/spark_ties.py [--n 1e7] [--distinct 10,1e3,1e5,1e6,1e7] [--repeat 3]
       [--no-mllib]

For each number of distinct scores D, 1e7 rows (0/1 labels, unit weights)
are written once as 8 Parquet files under bench/data/: scores are
``floor(u * D) / D`` for u ~ Beta(2, 5) (D = "cont": all distinct; "hot40":
all distinct but 40% of the rows at 0.0, a default score). One
SparkSession (local[2], driver memory 4g, see common.spark_session) times,
each from ``spark.read.parquet``:

* floor: ``repartitionByRange(k, score).sortWithinPartitions(score)`` run by
  a no-op write, at k = 8 and 16 (the best k is the anchor);
* MLlib: ``IsotonicRegression(featuresCol="score").fit``;
* distcal: ``distcal.fit(df)`` (the keyed pass: ranges from a sample).

Targets (issue 16): MLlib / distcal >= 8x and distcal / floor <= 1.1x in
every regime. The models are compared on 2001 grid points.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import spark_session, timed  # noqa: E402  (bench/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data"


def make_dir(n: int, distinct: str) -> Path:
    """8 Parquet files of n rows in all; scores with about ``distinct`` distinct values."""
    path = DATA / f"ties8_{n}_{distinct}"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(16)
    for i, rows in enumerate(np.array_split(np.arange(n), 8)):
        u = rng.beta(2.0, 5.0, len(rows))
        if distinct.startswith("hot"):  # e.g. hot40: 40% of the rows at 0.0, the rest distinct
            s = np.where(rng.random(len(rows)) < int(distinct[3:]) / 100, 0.0, u)
        else:
            s = u if distinct == "cont" else np.floor(u * float(distinct)) / float(distinct)
        y = (rng.random(len(rows)) < np.minimum(1.0, 2 * u * u)).astype(np.float64)
        pq.write_table(pa.table({"score": s, "label": y}), tmp / f"part-{i}.parquet",
                       row_group_size=1 << 20)
    os.rename(tmp, path)
    return path


def largest_range(df) -> int:  # type: ignore[no-untyped-def]
    """Rows of the largest range partition the fit shuffles into."""
    from pyspark.sql import functions as F

    from distcal.core.keyed import KeySpec
    from distcal.engines.spark.keyed import SparkKeyedRanges

    with SparkKeyedRanges(df, KeySpec()) as keyed:
        sizes = keyed.ranged.groupBy(F.spark_partition_id()).count().collect()
    return max(int(r["count"]) for r in sizes)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=1e7)
    ap.add_argument("--distinct", default="10,1e3,1e5,1e6,1e7,cont")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-mllib", action="store_true")
    args = ap.parse_args()
    n = int(args.n)

    import distcal

    spark = spark_session("distcal-bench-ties")
    from pyspark.ml.regression import IsotonicRegression
    from pyspark.sql import functions as F

    print(f"# Spark local[2], N = {n:.0e}, 8 Parquet files, median of {args.repeat}, seconds "
          f"(load {os.getloadavg()[0]:.1f})")
    print(f"{'distinct':>10} {'present':>9} {'floor':>6} {'k':>3} {'MLlib':>6} "
          + f"{'ours':>6}  MLlib/ours  ours/floor  max|dp|")
    for distinct in args.distinct.split(","):
        path = str(make_dir(n, distinct))

        def read():  # type: ignore[no-untyped-def]
            return spark.read.parquet(path)

        present = read().agg(F.countDistinct("score")).collect()[0][0]
        floors = {k: timed(lambda k=k: read().repartitionByRange(k, "score")
                           .sortWithinPartitions("score").write.format("noop")
                           .mode("overwrite").save(), args.repeat) for k in (8, 16)}
        best_k = min(floors, key=floors.get)
        t = timed(lambda: distcal.fit(read()), args.repeat)
        if distinct.startswith("hot"):
            print(f"{'':>10} largest range partition, rows: {largest_range(read())}")
        model = distcal.fit(read())
        if args.no_mllib:
            t_mllib, diff = float("nan"), float("nan")
        else:
            iso = IsotonicRegression(featuresCol="score", labelCol="label")
            t0 = time.perf_counter()  # one timed fit (at 1e3 distinct it takes minutes)
            mllib_model = iso.fit(read())
            t_mllib = time.perf_counter() - t0
            q = np.linspace(0, 1, 2001)
            qdf = spark.createDataFrame([(float(x),) for x in q], ["score"])
            diff = float(np.max(np.abs(mllib_model.transform(qdf).toPandas()["prediction"]
                                       - model.predict(q))))
        print(f"{distinct:>10} {present:>9} {floors[best_k]:6.2f} {best_k:>3} {t_mllib:6.2f} "
              f"{t:6.2f}  {t_mllib / t:9.1f}x  {t / floors[best_k]:9.2f}x  {diff:.1e}", flush=True)
    print(f"(load after: {os.getloadavg()[0]:.1f})")
    spark.stop()


if __name__ == "__main__":
    main()
