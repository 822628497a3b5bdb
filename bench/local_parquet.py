"""distcal.fit from a Parquet path vs pyarrow's read + the in-memory fit, by file layout.

Usage: python bench/local_parquet.py N [--repeat R] [--kinds ties,cont] [--dir DIR]

For each kind of scores (as bench/local_isotonic.py: "ties" rounded to 6
decimals, "cont" all distinct; 0/1 labels, unit weights) and each layout
of the same N rows

  1f-1M     one file, row groups of 2^20 rows (pyarrow's default size)
  1f-64k    one file, row groups of 2^16 rows
  1f-1g     one file, one row group
  8f-1M     8 files (as Dask and Spark write), 2^20-row groups
  64f       64 files

times, medians of R, in one process:

  anchor    ``pyarrow.dataset.dataset(path).to_table()`` + ``distcal.fit(table)``
  path      ``distcal.fit(path)``
  scan      reading the path batch by batch as the local engine does
            (``distcal.tables.iter_tables``), nothing else

and prints path / anchor (target <= 1.5). ``--memory-rows M``: the path fit
holds at most M distinct scores in memory (``distcal.fit(path,
memory_rows=M, chunk_rows=2M, batch_rows=2M)``), spilling sorted runs to disk
and reading them back in score ranges.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from common import timed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import distcal  # noqa: E402
from distcal.tables import iter_tables, open_dataset  # noqa: E402

LAYOUTS = {"1f-1M": (1, 1 << 20), "1f-64k": (1, 1 << 16), "1f-1g": (1, None),
           "8f-1M": (8, 1 << 20), "64f": (64, 1 << 20)}


def make(n: int, kind: str) -> pa.Table:
    rng = np.random.default_rng(42)
    s = rng.beta(2.0, 5.0, n)
    if kind == "ties":
        s = np.round(s, 6)
    y = (rng.random(n) < s**2 * 2).astype(np.float64)
    return pa.table({"score": s, "label": y})


def write(table: pa.Table, out: str, files: int, group: int | None) -> None:
    os.makedirs(out)
    step = -(-table.num_rows // files)
    for i in range(files):
        part = table.slice(i * step, step)
        pq.write_table(part, os.path.join(out, f"part-{i:03d}.parquet"),
                       row_group_size=group or part.num_rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", default="ties,cont")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--dir", default=None)
    ap.add_argument("--memory-rows", type=float, default=None)
    args = ap.parse_args()
    bounded = {} if args.memory_rows is None else {
        "memory_rows": int(args.memory_rows), "chunk_rows": 2 * int(args.memory_rows),
        "batch_rows": 2 * int(args.memory_rows)}
    n = int(args.n)
    print(f"# local fit from Parquet, N = {n:.0e}, median of {args.repeat}, seconds"
          + (f", memory_rows = {int(args.memory_rows)}" if bounded else ""))
    print(f"{'kind':<6}{'layout':<8}{'read':>7}{'fit(t)':>8}{'anchor':>8}{'path':>8}"
          f"{'scan':>7}{'path/anchor':>13}")
    for kind in args.kinds.split(","):
        table = make(n, kind)
        for name in args.layouts.split(","):
            files, group = LAYOUTS[name]
            d = tempfile.mkdtemp(dir=args.dir)
            try:
                path = os.path.join(d, "data")
                write(table, path, files, group)
                t_read = timed(lambda: ds.dataset(path, format="parquet").to_table(),
                               args.repeat)
                t_in = ds.dataset(path, format="parquet").to_table()
                t_fit = timed(lambda t=t_in: distcal.fit(t), args.repeat, warmup=True)
                del t_in
                t_path = timed(lambda: distcal.fit(path, **bounded), args.repeat, warmup=True)
                t_scan = timed(lambda: sum(t.num_rows for t in iter_tables(
                    open_dataset(path), ["score", "label"])), args.repeat)
                assert distcal.fit(path, **bounded) == distcal.fit(table)
                anchor = t_read + t_fit
                print(f"{kind:<6}{name:<8}{t_read:7.3f}{t_fit:8.3f}{anchor:8.3f}{t_path:8.3f}"
                      f"{t_scan:7.3f}{t_path / anchor:13.2f}", flush=True)
            finally:
                shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
