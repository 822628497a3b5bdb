"""Local isotonic fit vs scikit-learn and numpy's sort, in one process.

Usage: python bench/local_isotonic.py N [--repeat R] [--parquet-dir DIR]

Data kinds (N rows, labels ~ Bernoulli(score^2)):
  ties   scores rounded to 6 decimals of a Beta(2, 5) draw (many ties)
  cont   all-distinct scores
and three label/weight settings: 0/1 labels with unit weights ("unit"),
0/1 labels with random weights ("weighted"). Prints the median of R runs
for each timing, and ratios to the anchors measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import distcal  # noqa: E402


def timed(fn, repeat):
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def make(n, kind, rng):
    s = rng.beta(2.0, 5.0, n)
    if kind == "ties":
        s = np.round(s, 6)
    y = (rng.random(n) < s**2 * 2).astype(np.float64)
    return s, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parquet-dir", default=None)
    args = ap.parse_args()
    n = int(args.n)
    rng = np.random.default_rng(42)
    from sklearn.isotonic import IsotonicRegression

    print(f"# local isotonic, N = {n:.0e}, median of {args.repeat}")
    print(f"{'data':<14}{'what':<34}{'seconds':>9}{'x sklearn':>11}{'x np.sort':>11}")
    for kind in ("ties", "cont"):
        s, y = make(n, kind, rng)
        w = rng.uniform(0.5, 2.0, n)
        t_sort, _ = timed(lambda: np.sort(s), args.repeat)
        t_argsort, _ = timed(lambda: np.argsort(s), args.repeat)
        print(f"{kind:<14}{'np.sort':<34}{t_sort:9.3f}")
        print(f"{kind:<14}{'np.argsort':<34}{t_argsort:9.3f}")
        for setting, weights in (("unit", None), ("weighted", w)):
            df = pd.DataFrame({"score": s, "label": y})
            if weights is not None:
                df["w"] = weights
            t_sk, ir = timed(lambda: IsotonicRegression(out_of_bounds="clip").fit(
                s, y, sample_weight=weights), args.repeat)
            t_us, model = timed(lambda: distcal.fit(
                df, weight_col=None if weights is None else "w"), args.repeat)
            q = s[: min(n, 100_000)]
            diff = float(np.max(np.abs(ir.predict(q) - model.predict(q))))
            label = f"{kind}/{setting}"
            print(f"{label:<14}{'sklearn IsotonicRegression.fit':<34}{t_sk:9.3f}")
            print(f"{label:<14}{'distcal.fit (pandas)':<34}{t_us:9.3f}{t_us / t_sk:11.2f}"
                  f"{t_us / t_sort:11.2f}   max|diff|={diff:.1e} blocks={len(model.blocks)}")
        t_skp, _ = timed(lambda: ir.predict(s), args.repeat)
        t_usp, _ = timed(lambda: model.predict(s), args.repeat)
        print(f"{kind:<14}{'predict N: sklearn':<34}{t_skp:9.3f}")
        print(f"{kind:<14}{'predict N: distcal':<34}{t_usp:9.3f}{t_usp / t_skp:11.2f}")
        with tempfile.TemporaryDirectory(dir=args.parquet_dir) as d:
            path = os.path.join(d, "scores.parquet")
            pq.write_table(pa.table({"score": s, "label": y}), path, row_group_size=1 << 20)
            t_read, _ = timed(lambda: pq.read_table(path), args.repeat)
            t_fitp, _ = timed(lambda: distcal.fit(path), args.repeat)
            print(f"{kind:<14}{'pyarrow read_table (parquet)':<34}{t_read:9.3f}")
            print(f"{kind:<14}{'distcal.fit (parquet path)':<34}{t_fitp:9.3f}"
                  f"{'':>11}{'':>11}   x read={t_fitp / t_read:.2f}")


if __name__ == "__main__":
    main()
