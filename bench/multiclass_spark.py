"""Multiclass calibration on Spark local[2], from Parquet, with the driver's peak memory.

    python -u bench/multiclass_spark.py 1e6 [--k 10] [--repeat 1] [--anchors all|local]
        [--no-transform] [--methods temperature,isotonic,sigmoid]

N rows x K classes of logits (bench/multiclass.py's generator) are written
to one Parquet file with a list<double> column, and the same N x K (score,
one-vs-rest label) pairs to another as one binary score: the binary
isotonic fit of those pairs on Spark is the anchor of the two multiclass
fits (ratios printed). Spark reads the first and fits
one-vs-rest isotonic (one range shuffle on (class, score), one pass),
temperature scaling (one pass per Newton step) and, with ``--methods``,
one-vs-rest sigmoid (its ranges pooled once, then one pass of the kept
tables per Newton step), then applies the model in
the JVM and writes the result. Every Spark phase runs before any anchor,
and reports the peak resident memory during that phase of

* the Python driver process (this one), and
* the JVM (in local mode it is the driver and the executors: it also holds
  Spark's cached rows and shuffle buffers),

read as VmHWM from /proc after resetting it (``echo 5 > clear_refs``, Linux).
Anchors, in the same run and process, after the Spark phases: distcal's
local engine on the same Parquet file (``--anchors local``, the default
for N > 2e6), and with ``--anchors all`` also the rows collected to pandas
and scikit-learn's CalibratedClassifierCV(FrozenEstimator) on them (with
the max difference of the Spark probabilities from scikit-learn's).
"""

from __future__ import annotations

import argparse
import gc
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


def _reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current RSS


def _peak_gb(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def measured(fn, repeat, pids):
    """(seconds, result, {pid: peak GB during fn})."""
    for p in pids:
        _reset_peak(p)
    t, out = best_of(fn, repeat)
    return t, out, {p: _peak_gb(p) for p in pids}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float, nargs="?", default=1e6)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--anchors", choices=("all", "local"), default=None)
    ap.add_argument("--no-transform", action="store_true", help="time the fits only")
    ap.add_argument("--methods", default="temperature,isotonic",
                    help="comma-separated methods (temperature, isotonic, sigmoid: the "
                         "scores are logits)")
    args = ap.parse_args()
    methods = args.methods.split(",")
    n, k = int(args.n), args.k
    anchors = args.anchors or ("all" if n <= 2_000_000 else "local")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "3g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    me, jvm = os.getpid(), int(spark._jvm.java.lang.ProcessHandle.current().pid())
    pids = (me, jvm)
    z, y = make(n, k)
    tmp = tempfile.mkdtemp(prefix="distcal-mc-bench-")
    path = os.path.join(tmp, "scores.parquet")
    flat = pa.array(z.ravel())
    scores = pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int64)),
                                      flat, type=pa.large_list(pa.float64())) \
        if n * k >= 2**31 else pa.ListArray.from_arrays(
            pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)), flat)
    pq.write_table(pa.table({"scores": scores, "label": pa.array(y)}), path,
                   row_group_size=1 << 17)
    # The binary anchor: the same N x K (score, one-vs-rest label) pairs as one binary score.
    bin_path = os.path.join(tmp, "binary.parquet")
    pq.write_table(pa.table({"score": flat, "label": pa.array(
        (y[:, None] == np.arange(k)[None, :]).ravel().astype(np.int8))}), bin_path,
        row_group_size=1 << 20)
    del z, y, flat, scores
    gc.collect()
    sdf = spark.read.parquet(path)
    sdf.count()  # warm the reader and the JVM
    print(f"# multiclass on Spark local[2] from Parquet, N = {n:.0e}, K = {k}, best of "
          f"{args.repeat}; peak RSS per phase: Python driver / JVM (driver + local executors)")
    print(f"{'method':12s} {'what':44s} {'seconds':>8s} {'py GB':>6s} {'JVM GB':>6s}")
    models = {}
    outs = {}

    def row(method, what, t, peaks, extra=""):
        print(f"{method:12s} {what:44s} {t:8.2f} {peaks[me]:6.2f} {peaks[jvm]:6.2f}{extra}",
              flush=True)

    spark.read.parquet(bin_path).count()
    t_bin, _, peaks = measured(lambda: distcal.fit(spark.read.parquet(bin_path)), args.repeat,
                               pids)
    row("isotonic", f"anchor: binary Spark fit of the {n * k:.0e} pairs", t_bin, peaks)
    for method in methods:
        t_sp, model, peaks = measured(lambda: distcal.fit(
            spark.read.parquet(path), method=method, score_col="scores"), args.repeat, pids)
        row(method, "distcal Spark fit (from Parquet)", t_sp, peaks,
            f"   {t_sp / t_bin:.2f}x the binary fit of the same pairs")
        models[method] = model
        if args.no_transform:
            continue
        out = os.path.join(tmp, f"out-{method}")

        def apply():
            (model.transform(spark.read.parquet(path), score_col="scores", output_col="p")
             .write.mode("overwrite").parquet(out))

        t_tr, _, peaks = measured(apply, args.repeat, pids)
        row(method, "distcal Spark transform + write (JVM)", t_tr, peaks)
        outs[method] = out
    spark.stop()
    # Anchors, after every Spark phase (their memory is not the driver's).
    for method in methods:
        t_loc, local, peaks = measured(lambda: distcal.fit(path, method=method,
                                                           score_col="scores"),
                                       args.repeat, (me,))
        peaks[jvm] = float("nan")
        same = local == models[method]
        row(method, "distcal local engine (from Parquet)", t_loc, peaks,
            f"   Spark model == local model (1e-9): {same}")
    if anchors == "all" and not args.no_transform:
        t_collect, pdf = best_of(lambda: pq.read_table(path).to_pandas(), 1)
        Z = np.stack(pdf["scores"].to_numpy())
        Y = pdf["label"].to_numpy()
        X = np.arange(n, dtype=np.float64).reshape(-1, 1)
        frozen = FrozenEstimator(StoredScores(Z).fit(X, Y))
        print(f"# anchors on the rows read to pandas ({t_collect:.2f} s)")
        for method in methods:
            def sk():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return CalibratedClassifierCV(frozen, method=method).fit(X, Y)

            t_sk, cal = best_of(sk, args.repeat)
            step = max(1, n // 100_000)
            got = np.stack(pd.read_parquet(outs[method])["p"].to_numpy()[::step])
            ref = cal.predict_proba(np.arange(0, n, step, dtype=np.float64).reshape(-1, 1))
            # Spark writes rows in input order (no shuffle in the transform)
            diff = np.abs(got - ref).max()
            print(f"{method:12s} {'sklearn CalibratedClassifierCV(Frozen), pandas':44s} "
                  f"{t_sk:8.2f}   max|p Spark - sklearn| = {diff:.1e}")


if __name__ == "__main__":
    main()
