"""MODL fit vs isotonic fit on the same data, local or Spark local[2]; greedy path vs exact optimum.

Usage:
    python bench/modl.py [--engine local|spark] [--rows 1e7] [--distinct 1e4 1e6]
                         [--repeat 3] [--subsamples 20] [--no-warm-up]
                         [--local-parquet] [--cli]

Data: ``--rows`` rows whose scores are drawn uniformly from ``--distinct``
fixed scores (uniform on [0, 1]), labels ~ Bernoulli(score^2), written to
one Parquet file per size in a temporary directory. For each size:

* ``fit(method="modl")`` and ``fit(method="isotonic")`` on the same data
  (local: an in-memory pandas DataFrame, or with ``--local-parquet`` the
  Parquet file's path, read by the fit as ``distcal fit`` does; spark:
  ``spark.read.parquet`` of the file, nothing cached), timed in ``--repeat``
  pairs (isotonic, then MODL): the median of each, and the median and
  range of the pairs' ratios (target: MODL <= 2x isotonic); locally also
  the CPU seconds of all the process's threads (``--repeat`` more pairs),
  which a loaded machine does not inflate as it does the wall time;
* ``--subsamples`` random sets of 1,000 distinct scores (all their rows):
  the criterion of the greedy path (``exact_max=0``) against the exact
  optimum, as the ratio of costs and the count of exact hits.

With ``--cli`` each fit is ``python -m distcal fit --input FILE`` in a new
process, as users run it (imports, reading, and writing the model included;
a process that loads numba pays for it in its MODL fit).

Unless ``--no-warm-up``, one ``modl_partition`` of a table of 30,000 mixed
rows first compiles the numba kernel, as in a process that has fitted
before (compilation takes seconds once per process; tables of fewer than
5,000 rows never use it).
Prints ``uptime`` before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from common import spark_session  # noqa: E402  (bench/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import distcal  # noqa: E402
from distcal.core.modl import modl_partition  # noqa: E402


def make_data(rows: int, distinct: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    grid = np.sort(rng.random(distinct))
    s = grid[rng.integers(0, distinct, rows)]
    y = (rng.random(rows) < s * s).astype(np.int64)
    return s, y


def paired(fn_a: Callable[[], object], fn_b: Callable[[], object], repeat: int,
           clock: Callable[[], float] = time.perf_counter
           ) -> tuple[float, float, list[float]]:
    """Medians of a and of b, and each pair's b / a, over ``repeat`` pairs run a, b, a, b, ...

    Pairs, not a block of a then a block of b: this machine's speed drifts
    (up to 3x within half an hour), and a drift between two blocks would
    show as a ratio; within a pair both see nearly the same machine.
    """
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(repeat):
        for fn, out in ((fn_a, ta), (fn_b, tb)):
            t0 = clock()
            fn()
            out.append(clock() - t0)
    return (statistics.median(ta), statistics.median(tb),
            sorted(b / a for a, b in zip(ta, tb)))


def count_table(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(V, 2) class counts of the distinct scores, ascending; computed here, not by distcal."""
    _, inv = np.unique(s, return_inverse=True)
    v = int(inv.max()) + 1
    pos = np.bincount(inv, weights=y, minlength=v).astype(np.int64)
    n = np.bincount(inv, minlength=v)
    return np.column_stack([n - pos, pos])


def subsamples(counts: np.ndarray, k: int, size: int = 1000, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    ratios, hits = [], 0
    for _ in range(k):
        rows = np.sort(rng.choice(counts.shape[0], min(size, counts.shape[0]), replace=False))
        sub = counts[rows]
        exact = modl_partition(sub)
        greedy = modl_partition(sub, exact_max=0)
        assert exact.exact and not greedy.exact
        ratios.append(greedy.cost / exact.cost)
        hits += greedy.cost <= exact.cost + 1e-9
    r = np.asarray(ratios)
    print(f"  greedy path vs exact on {k} subsamples of {size} distinct scores: "
          f"at the optimum {hits}/{k}, cost ratio max {r.max():.6f}, mean {r.mean():.6f}")


def session():  # type: ignore[no-untyped-def]
    return spark_session("distcal-bench-modl")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["local", "spark"], default="local")
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--distinct", type=float, nargs="+", default=[1e4, 1e6])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--subsamples", type=int, default=20)
    ap.add_argument("--local-parquet", action="store_true",
                    help="local engine: fit the Parquet file's path, not a DataFrame")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="time without loading the compiled kernels first")
    ap.add_argument("--cli", action="store_true",
                    help="local engine: each fit is `python -m distcal fit` on the Parquet "
                         "file, a new process (imports and the model's writing included)")
    args = ap.parse_args()
    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())
    has_numba = importlib.util.find_spec("numba") is not None
    print(f"# MODL greedy path on tables of >= 5,000 rows: "
          f"{'compiled (numba)' if has_numba else 'pure Python (no numba)'}")
    if not args.no_warm_up and has_numba:
        modl_partition(count_table(*make_data(400_000, 40_000, seed=9)), exact_max=0)
        print("# kernel compiled before timing")
    if args.cli and args.engine != "local":
        ap.error("--cli runs the local engine")
    spark = session() if args.engine == "spark" else None
    rows = int(args.rows)
    source = (" from Parquet" if spark is None and args.local_parquet else
              ", `python -m distcal fit` on the Parquet file, one process per fit" if args.cli
              else "")
    print(f"# {args.engine}{source}, {rows:.0e} rows, median of {args.repeat}, seconds")
    with tempfile.TemporaryDirectory(prefix="distcal-bench-modl-") as tmp:
        for distinct in map(int, args.distinct):
            s, y = make_data(rows, distinct)
            path = os.path.join(tmp, f"d{distinct}.parquet")
            fit_iso: Callable[[], object]
            fit_modl: Callable[[], object]
            if args.cli:
                pq.write_table(pa.table({"score": s, "label": y}), path, row_group_size=1 << 20)

                def run_cli(method: str, path: str = path) -> object:
                    return subprocess.run(
                        [sys.executable, "-m", "distcal", "fit", "--input", path, "--output",
                         os.path.join(tmp, f"model-{method}"), "--method", method,
                         "--overwrite", "-q"], check=True, capture_output=True, cwd=ROOT)

                def fit_iso() -> object:
                    return run_cli("isotonic")

                def fit_modl() -> object:
                    return run_cli("modl")

                t_iso, t_modl, ratios = paired(fit_iso, fit_modl, args.repeat)
                print(f"\n## {distinct:.0e} distinct")
                print(f"  distcal fit --method isotonic {t_iso:7.2f}   --method modl "
                      f"{t_modl:7.2f}   modl / isotonic = {statistics.median(ratios):.2f} "
                      f"(median of the pairs' ratios; range {ratios[0]:.2f}-{ratios[-1]:.2f})")
                continue
            if spark is None and not args.local_parquet:
                data = pd.DataFrame({"score": s, "label": y})

                def read(data: object = data) -> object:
                    return data
            elif spark is None:
                pq.write_table(pa.table({"score": s, "label": y}), path, row_group_size=1 << 20)

                def read(path: str = path) -> object:
                    return path
            else:
                pq.write_table(pa.table({"score": s, "label": y}), path, row_group_size=1 << 20)

                def read(path: str = path) -> object:
                    return spark.read.parquet(path)
            if spark is not None and distinct == int(args.distinct[0]):
                distcal.fit(read(), method="isotonic")  # warm-up: the JVM's first jobs are slow
            def fit_iso() -> object:
                return distcal.fit(read(), method="isotonic")

            def fit_modl() -> object:
                return distcal.fit(read(), method="modl")

            t_iso, t_modl, ratios = paired(fit_iso, fit_modl, args.repeat)
            if spark is None:  # CPU of all threads: what a loaded machine does not distort
                c_iso, c_modl, c_ratios = paired(fit_iso, fit_modl, args.repeat,
                                                 clock=time.process_time)
            model = distcal.fit(read(), method="modl")
            counts = count_table(s, y)
            print(f"\n## {distinct:.0e} distinct ({counts.shape[0]:,} present), "
                  f"{len(model.blocks)} MODL intervals, exact={model.params['exact']}, "
                  f"groups={model.params['groups']}")
            print(f"  fit isotonic {t_iso:7.2f}   fit modl {t_modl:7.2f}   modl / isotonic = "
                  f"{statistics.median(ratios):.2f} (median of the pairs' ratios; "
                  f"range {ratios[0]:.2f}-{ratios[-1]:.2f})")
            if spark is None:
                print(f"  process CPU: isotonic {c_iso:5.2f}   modl {c_modl:5.2f}   "
                      f"modl / isotonic = {statistics.median(c_ratios):.2f} "
                      f"(range {c_ratios[0]:.2f}-{c_ratios[-1]:.2f})")
            if args.subsamples and counts.shape[0] > 1000:
                subsamples(counts, args.subsamples)
    if spark is not None:
        spark.stop()
    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())


if __name__ == "__main__":
    main()
