"""Per-segment isotonic calibration on Spark local[2]: one ``by=`` job vs the global fit.

Usage: python bench/segments.py N [--segments S] [--repeat R] [--sample K]
                                 [--transform-only | --floor]

One Parquet file of N rows (written once under bench/data/) with S segment
keys of Zipf sizes (share of segment k proportional to k^-1.2: the largest
holds about a sixth of the rows, thousands hold a handful), all-distinct
scores and labels whose calibration is shifted per segment. Timed, every
fit from ``spark.read.parquet`` (nothing cached), median of R (the anchor
and the ``by=`` fit alternate, and their ratio is the median of the pairs'):

* anchor: ``distcal.fit(df)``, the same rows without ``by=``;
* ``distcal.fit(df, by="seg")``: every segment and the global map, one pass;
* a loop of per-segment fits ``distcal.fit(df.where(seg = k))`` over K
  sampled segments (sizes spread over the Zipf ranks), extrapolated to S;
* transform + a ``noop`` write (every output column computed): the
  segmented map (broadcast joins) vs the global map, alternating, the
  ratio the median of the pairs'. ``--transform-only`` fits the ``by=``
  model once, untimed, and times only this.

``--floor``: what moving the rows costs without any calibration: Spark's
``repartitionByRange(51, score)`` and a ``mapInArrow`` that only counts
the rows it receives, on (score, label) against (score, label, seg),
alternating; the segment column's share of a ``by=`` fit's extra time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import spark_session, timed  # noqa: E402  (bench/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data"


def make_file(n: int, segments: int) -> Path:
    path = DATA / f"segments_{n}_{segments}.parquet"
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(13)
    share = np.arange(1, segments + 1, dtype=np.float64) ** -1.2
    share /= share.sum()
    g = rng.choice(segments, size=n, p=share)
    g[:segments] = np.arange(segments)  # every segment has a row
    shift = rng.uniform(-0.2, 0.2, segments)[g]
    s = rng.beta(2.0, 5.0, n)
    y = (rng.random(n) < np.clip(s + shift, 0.0, 1.0)).astype(np.float64)
    keys = np.array([f"m{i:05d}" for i in range(segments)], dtype=object)[g]
    pq.write_table(pa.table({"score": s, "label": y, "seg": pa.array(keys, pa.string())}),
                   path, row_group_size=1 << 20)
    return path


def session():  # type: ignore[no-untyped-def]
    return spark_session("distcal-bench-segments")


def report_fits(args: Any, read: Any, model: Any, anchors: list[float],
                bys: list[float]) -> None:
    """The fit timings: anchor, by=, and the extrapolated loop of per-segment fits."""
    import distcal

    anchor, t_by = statistics.median(anchors), statistics.median(bys)
    ratio = statistics.median(b / a for a, b in zip(anchors, bys))
    print(f"{'distcal.fit (no by), anchor':40s} {anchor:8.2f}   runs "
          + " ".join(f"{a:.1f}" for a in anchors))
    print(f"{'distcal.fit(by=seg)':40s} {t_by:8.2f}   runs "
          + " ".join(f"{b:.1f}" for b in bys) + f"; by / anchor = {ratio:5.2f}x")
    segs = model.segments.sort_values("n_rows", ascending=False)
    ranks = np.unique(np.geomspace(1, len(segs), args.sample).astype(int) - 1)
    picked = segs.iloc[ranks]
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    for key in picked["seg"]:
        distcal.fit(read().where(F.col("seg") == key))
    per = (time.perf_counter() - t0) / len(picked)
    loop = per * args.segments
    print(f"{'loop of per-segment fits (extrapolated)':40s} {loop:8.1f}   "
          f"{len(picked)} sampled, {per:.2f} s each; loop / by = {loop / t_by:6.0f}x")


def floor(read: Any, repeat: int) -> None:
    """The rows moved to Python workers by score range, with and without the segments."""

    def count(batches: Any) -> Any:
        n = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_pydict({"n": [n]})

    def job(cols: list[str]) -> None:
        read().select(*cols).repartitionByRange(51, "score").mapInArrow(
            count, "n long").collect()

    bare: list[float] = []
    with_seg: list[float] = []
    for _ in range(repeat):
        bare.append(timed(lambda: job(["score", "label"]), 1))
        with_seg.append(timed(lambda: job(["score", "label", "seg"]), 1))
    print(f"{'range shuffle + count: score, label':40s} {statistics.median(bare):8.2f}   runs "
          + " ".join(f"{t:.1f}" for t in bare))
    print(f"{'range shuffle + count: + seg':40s} {statistics.median(with_seg):8.2f}   runs "
          + " ".join(f"{t:.1f}" for t in with_seg) + "; + seg: "
          f"{statistics.median(b - a for a, b in zip(bare, with_seg)):+.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=float)
    ap.add_argument("--segments", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sample", type=int, default=12,
                    help="segments fitted alone, spread over the Zipf ranks (at least 3)")
    ap.add_argument("--transform-only", action="store_true")
    ap.add_argument("--floor", action="store_true")
    args = ap.parse_args()
    if args.sample < 3:  # one sample is the largest segment alone: not the loop's mean
        ap.error("--sample must be at least 3")
    n = int(args.n)
    import distcal

    path = str(make_file(n, args.segments))
    spark = session()
    read = lambda: spark.read.parquet(path)  # noqa: E731
    distcal.fit(read().limit(1000))  # start the Python workers before timing anything
    print(f"# Spark local[2], N = {n:.0e}, {args.segments} Zipf segments, median of "
          f"{args.repeat}, seconds; load {os.getloadavg()[0]:.1f}")
    # Anchor and by= alternate, so that a change of the (shared) machine's load
    # hits both; the ratio is the median of the pairs' ratios.
    anchors: list[float] = []
    bys: list[float] = []
    model: Any = None
    if args.floor:
        floor(read, args.repeat)
        return
    if args.transform_only:
        model = distcal.fit(read(), by="seg")
    fitted: dict[str, Any] = {}
    for _ in range(0 if args.transform_only else args.repeat):
        anchors.append(timed(lambda: fitted.update(anchor=distcal.fit(read())), 1))
        t0 = time.perf_counter()
        model = distcal.fit(read(), by="seg")
        bys.append(time.perf_counter() - t0)
    if not args.transform_only:
        # The by= fit's global map is the fit of the same rows without by=.
        assert model.global_model == fitted["anchor"], "the global maps differ"
        report_fits(args, read, model, anchors, bys)
    glob = model.global_model

    def write(frame: Any) -> None:
        frame.write.format("noop").mode("overwrite").save()

    tgs: list[float] = []
    tss: list[float] = []
    for _ in range(args.repeat):
        tgs.append(timed(lambda: write(glob.transform(read())), 1))
        tss.append(timed(lambda: write(model.transform(read())), 1))
    t_tg, t_ts = statistics.median(tgs), statistics.median(tss)
    print(f"{'transform + noop write: global map':40s} {t_tg:8.2f}   runs "
          + " ".join(f"{t:.1f}" for t in tgs))
    print(f"{'transform + noop write: by segment':40s} {t_ts:8.2f}   runs "
          + " ".join(f"{t:.1f}" for t in tss) + "; by / global = "
          f"{statistics.median(b / a for a, b in zip(tgs, tss)):5.2f}x")
    print(f"# load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
