"""distcal's Dask fit vs Dask's own sort_values, the local engine and scikit-learn.

Usage: python bench/dask_isotonic.py N [N2 ...] [--repeat R]

For each N, on the same data as spark_isotonic.py (bench/data/), written
as a directory of 8 Parquet files (8 partitions), with tie-heavy ("ties")
and all-distinct ("cont") scores, in one run, read time included everywhere:

* floor: ``dd.read_parquet(...).sort_values("score")`` then a reduction
  per partition, on a LocalCluster of 2 workers x 1 thread;
* distcal: ``distcal.fit(dd.read_parquet(...))`` on the same cluster;
* the local engine: ``distcal.fit(path)``;
* scikit-learn: ``IsotonicRegression.fit`` on the arrays pyarrow reads.

With several N, prints how the Dask fit time grows (target: near-linear).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import timed  # noqa: E402  (bench/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))



def parts_dir(n: int, kind: str, make_file) -> Path:
    """The bench file as a directory of 8 Parquet files: 8 partitions for Dask."""
    import pyarrow.parquet as pq

    out = ROOT / "bench" / "data" / f"{kind}_{n}_parts"
    if not out.exists():
        table = pq.read_table(make_file(n, kind))
        tmp = out.with_name(out.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        step = -(-table.num_rows // 8)
        for i in range(8):
            pq.write_table(table.slice(i * step, step), tmp / f"part-{i}.parquet")
        tmp.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float, nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import dask.dataframe as dd
    import pyarrow.parquet as pq
    from distributed import Client, LocalCluster
    from sklearn.isotonic import IsotonicRegression
    from spark_isotonic import make_file

    import distcal

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
    client = Client(cluster)
    growth: dict[str, list[tuple[int, float]]] = {}
    for n in map(int, args.n):
        print(f"\n# Dask LocalCluster 2x1, N = {n:.0e}, median of {args.repeat}, seconds")
        for kind in ("ties", "cont"):
            path = str(parts_dir(n, kind, make_file))
            t_dask = timed(lambda: distcal.fit(dd.read_parquet(path)), args.repeat,
                           warmup=True)  # (a cold cluster's first job starts its workers)
            # An opaque per-partition reduction, so that the optimizer cannot drop
            # the sort (it does drop it under a plain .sum()).
            t_sort = timed(lambda: dd.read_parquet(path).sort_values("score")
                           .map_partitions(lambda d: d["label"].to_numpy().sum(),
                                           meta=(None, "f8")).compute(), args.repeat)
            t_local = timed(lambda: distcal.fit(path), args.repeat)

            def sklearn_fit():
                t = pq.read_table(path)
                IsotonicRegression(out_of_bounds="clip").fit(t.column("score").to_numpy(),
                                                             t.column("label").to_numpy())

            t_sk = timed(sklearn_fit, 1)
            same = distcal.fit(dd.read_parquet(path)) == distcal.fit(path)
            growth.setdefault(kind, []).append((n, t_dask))
            print(f"{kind:<5} dask sort_values + sum       {t_sort:7.2f}")
            print(f"{kind:<5} distcal.fit (dask)           {t_dask:7.2f}   x sort_values = "
                  f"{t_dask / t_sort:.2f}   equal to local: {same}")
            print(f"{kind:<5} distcal.fit (local, path)    {t_local:7.2f}")
            print(f"{kind:<5} sklearn fit (+ pyarrow read) {t_sk:7.2f}")
    if len(args.n) > 1:
        print("\n# growth of the Dask fit")
        for kind, pts in growth.items():
            (n0, t0), (n1, t1) = pts[0], pts[-1]
            print(f"{kind:<5} {n0:.0e} -> {n1:.0e}: time x {t1 / t0:.1f} for rows x {n1 / n0:.0f}")
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
