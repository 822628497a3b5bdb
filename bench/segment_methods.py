"""Every method with ``by=``: many segments in one fit, against isotonic ``by=`` in the same run.

Usage: python bench/segment_methods.py N [--segments S] [--repeat R] [--spark]
                                         [--methods m1,m2,...]

The Parquet file of bench/segments.py (N rows, S Zipf segments, all-distinct
scores). Timed: ``distcal.fit(data, method=m, by="seg")`` for each method,
from the file (pandas frame read once, or ``spark.read.parquet`` on Spark
local[2]), best of R after one untimed fit of each method on a slice (numba's
compilation, Spark's Python workers). The anchor is isotonic, the method whose
keyed pass is one vectorised PAV; the others show what their per-key plans cost.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from segments import make_file  # noqa: E402  (bench/ is on sys.path when run as a script)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float)
    ap.add_argument("--segments", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--spark", action="store_true")
    ap.add_argument("--methods",
                    default="isotonic,venn_abers,sigmoid,beta,histogram,modl,temperature")
    args = ap.parse_args()
    import logging

    import pandas as pd

    import distcal

    warnings.simplefilter("ignore")  # separable segments: beta's "no convergence"
    logging.disable(logging.WARNING)
    path = str(make_file(int(args.n), args.segments))
    if args.spark:
        from common import spark_session

        spark = spark_session("distcal-bench-segment-methods")

        def data():  # type: ignore[no-untyped-def]
            return spark.read.parquet(path)

        def head():  # type: ignore[no-untyped-def]
            return data().limit(50_000)
    else:
        frame = pd.read_parquet(path)

        def data():  # type: ignore[no-untyped-def]
            return frame

        def head():  # type: ignore[no-untyped-def]
            return frame.head(50_000)
    methods = args.methods.split(",")
    print(f"# {'Spark local[2]' if args.spark else 'local'}, N = {args.n:.0e}, "
          f"{args.segments} Zipf segments, by='seg', best of {args.repeat}, seconds")
    best: dict[str, float] = {}
    for m in methods:
        distcal.fit(head(), method=m, by="seg")
        runs = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            distcal.fit(data(), method=m, by="seg")
            runs.append(time.perf_counter() - t0)
        best[m] = min(runs)
        ratio = f"{best[m] / best['isotonic']:6.2f}x isotonic" if "isotonic" in best else ""
        print(f"{m:12s} {best[m]:8.2f}   runs " + " ".join(f"{t:.1f}" for t in runs)
              + f"   {ratio}", flush=True)


if __name__ == "__main__":
    main()
