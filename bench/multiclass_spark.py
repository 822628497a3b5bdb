"""Multiclass calibration on Spark local[2] vs scikit-learn and the local engine, same rows.

    python -u bench/multiclass_spark.py 1e6 [--k 10] [--repeat 1]

N rows x K classes of logits (bench/multiclass.py's generator) are written
to one Parquet file with a list<double> column. Spark reads it and fits
one-vs-rest isotonic (one range shuffle on (class, score), one pass) and
temperature scaling (one pass per Newton step), then applies the model in
the JVM and writes the result. Anchors, in the same run and process: the
same rows collected to pandas (collect time shown), scikit-learn's
CalibratedClassifierCV(FrozenEstimator) on them, and distcal's local
engine. Prints the max difference of the probabilities from scikit-learn's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from multiclass import StoredScores, make  # bench/multiclass.py
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator

import distcal


def best_of(fn, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float, nargs="?", default=1e6)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    n, k = int(args.n), args.k
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "3g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    z, y = make(n, k)
    tmp = tempfile.mkdtemp(prefix="distcal-mc-bench-")
    path = os.path.join(tmp, "scores.parquet")
    flat = pa.array(z.ravel())
    scores = pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)),
                                      flat)
    pq.write_table(pa.table({"scores": scores, "label": pa.array(y)}), path,
                   row_group_size=1 << 17)
    sdf = spark.read.parquet(path)
    sdf.count()  # warm the reader and the JVM
    t_collect, pdf = best_of(lambda: spark.read.parquet(path).toPandas(), 1)
    Z = np.stack(pdf["scores"].to_numpy())
    Y = pdf["label"].to_numpy()
    X = np.arange(n, dtype=np.float64).reshape(-1, 1)
    frozen = FrozenEstimator(StoredScores(Z).fit(X, Y))
    print(f"# multiclass on Spark local[2], N = {n:.0e}, K = {k}, best of {args.repeat}; "
          f"collect to pandas {t_collect:.2f} s")
    print(f"{'method':12s} {'what':44s} {'seconds':>8s} {'x sklearn':>9s}")
    for method in ("temperature", "isotonic"):
        def sk():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return CalibratedClassifierCV(frozen, method=method).fit(X, Y)

        t_sk, cal = best_of(sk, args.repeat)
        t_loc, _ = best_of(lambda: distcal.fit(pdf, method=method, score_col="scores"),
                           args.repeat)
        t_sp, model = best_of(lambda: distcal.fit(spark.read.parquet(path), method=method,
                                                  score_col="scores"), args.repeat)
        out = os.path.join(tmp, f"out-{method}")

        def apply():
            (model.transform(spark.read.parquet(path), score_col="scores", output_col="p")
             .write.mode("overwrite").parquet(out))

        t_tr, _ = best_of(apply, args.repeat)
        step = max(1, n // 100_000)
        got = np.stack(pd.read_parquet(out)["p"].to_numpy()[::step])
        ref = cal.predict_proba(np.arange(0, n, step, dtype=np.float64).reshape(-1, 1))
        # Spark writes rows in input order (no shuffle in the transform)
        diff = np.abs(got - ref).max()
        print(f"{method:12s} {'sklearn CalibratedClassifierCV(Frozen), pandas':44s} {t_sk:8.2f}")
        print(f"{method:12s} {'distcal local engine, pandas':44s} {t_loc:8.2f} "
              f"{t_loc / t_sk:9.2f}")
        print(f"{method:12s} {'distcal Spark fit (from Parquet)':44s} {t_sp:8.2f} "
              f"{t_sp / t_sk:9.2f}   max|p - sklearn| = {diff:.1e}")
        print(f"{method:12s} {'distcal Spark transform + write (JVM)':44s} {t_tr:8.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
