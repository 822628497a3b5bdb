"""Calibration history: summarize against fit, refit from daily summaries against the raw rows.

    python bench/history.py --days 30 --rows 1e6 --distinct 1e5 [--engines local,spark,dask]

Writes ``days`` daily Parquet files of ``rows`` rows each (``distinct``
distinct scores a day, different every day, 0/1 labels), then per engine,
in one run (compare the ratios):

* ``summarize`` of one day against ``fit`` of the same day (target <= 1.2x);
* ``fit`` from the ``days`` saved summaries against ``fit`` of all the raw
  rows read from Parquet (target <= 0.2x), and checks that both models are
  equal;
* the summary's size on disk per 1e6 rows, with and without ``decimals=4``.

Each pair is timed alternately (the fit of the raw rows and the refit,
``--repeat`` times; the one-day fit and summarize, ~0.1 s locally, at least
5 times), medians: timed one block after the other, the machine's load
moving between the two blocks (other jobs share the two cores) would be
measured as their difference. The load average is printed at the start and
the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import spark_session  # noqa: E402

import distcal  # noqa: E402


def write_days(root: Path, days: int, rows: int, distinct: int) -> list[Path]:
    rng = np.random.default_rng(31)
    paths = []
    for d in range(days):
        k = rng.integers(0, distinct, rows)
        s = (k + 0.5) / distinct + d * 1e-9  # distinct values of its own every day
        y = (rng.random(rows) < s**1.4).astype(np.int8)
        path = root / "raw" / f"day={d:02d}" / "part.parquet"
        path.parent.mkdir(parents=True)
        pd.DataFrame({"score": s, "label": y}).to_parquet(path, index=False)
        paths.append(path)
    return paths


def alternately(fns: list, repeat: int) -> list[float]:
    """Median wall seconds of each of ``fns``, called in turn ``repeat`` times."""
    import statistics
    import time

    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for t, fn in zip(times, fns):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--distinct", type=float, default=1e5)
    ap.add_argument("--engines", default="local,spark,dask")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    rows, distinct = int(args.rows), int(args.distinct)
    root = Path(tempfile.mkdtemp(prefix="distcal-bench-history-"))
    try:
        days = write_days(root, args.days, rows, distinct)
        raw = root / "raw"
        print(f"# history: {args.days} days x {rows:.0e} rows ({distinct:.0e} distinct "
              f"scores a day), median of {args.repeat} (one day: of {max(args.repeat, 5)}, "
              f"alternately); load average {os.getloadavg()[0]:.2f}", flush=True)
        # sizes (local summaries)
        for dec in (None, 4):
            s = distcal.summarize(str(days[0]), decimals=dec)
            out = root / f"size{dec}"
            s.save(out)
            print(f"summary size per 1e6 rows, decimals={dec}: "
                  f"{size_mb(out) / rows * 1e6:.2f} MB ({len(s)} rows)")
        for engine in args.engines.split(","):
            client = spark = None
            if engine == "spark":
                spark = spark_session()
            if engine == "dask":
                from distributed import Client, LocalCluster

                client = Client(LocalCluster(n_workers=2, threads_per_worker=1,
                                             dashboard_address=None))

            def frame(p: Path, engine: str = engine) -> object:
                if engine == "spark":
                    assert spark is not None
                    return spark.read.parquet(str(p))
                if engine == "dask":
                    import dask.dataframe as dd

                    return dd.read_parquet(str(p))
                return str(p)

            # warm-up (JVM classes, workers' imports), not timed
            distcal.fit(frame(days[0]), engine=engine)
            distcal.summarize(frame(days[0]), engine=engine)
            t_fit1, t_sum1 = alternately(
                [lambda: distcal.fit(frame(days[0]), engine=engine),
                 lambda: distcal.summarize(frame(days[0]), engine=engine)],
                max(args.repeat, 5))
            print(f"{engine:6s} fit one day {t_fit1:8.2f} s   summarize {t_sum1:8.2f} s   "
                  f"ratio {t_sum1 / t_fit1:.2f} (target <= 1.2)", flush=True)
            if engine == "dask":
                assert client is not None
                client.close()
                continue
            sums = []
            for i, p in enumerate(days):
                out = root / f"sum-{engine}" / f"{i:02d}"
                if engine == "local":
                    distcal.summarize(str(p)).save(out)
                else:
                    distcal.summarize(frame(p), engine=engine).save(out)
                sums.append(str(out))
            model: dict[str, object] = {}
            distcal.fit(sums[:1], engine=engine)  # warm-up of the summary reader, not timed

            def refit(engine: str = engine, sums: list[str] = sums) -> None:
                model["summaries"] = distcal.fit(sums, engine=engine)

            def full(engine: str = engine) -> None:
                model["rows"] = distcal.fit(frame(raw), engine=engine)

            t_full, t_refit = alternately([full, refit], args.repeat)
            same = model["summaries"] == model["rows"]
            print(f"{engine:6s} fit {args.days * rows:.1e} raw rows {t_full:8.2f} s   "
                  f"refit from {args.days} summaries {t_refit:8.2f} s   ratio "
                  f"{t_refit / t_full:.2f} (target <= 0.2)   equal models: {same}")
        print(f"# load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        os.environ.pop("PYSPARK_PYTHON", None)


if __name__ == "__main__":
    main()
