"""Threshold tracker per-update time, and the batch threshold vs np.argsort.

Usage: python bench/threshold.py [--rows 1e7] [--updates 100000]

1. For n = 1e3, 1e4, 1e5, 1e6 distinct scores already in the tracker
   (built with update_many), the mean time of ``tracker.update`` over many
   rows at scores it has seen, and at new scores (each a new distinct
   score, so a leaf and a node are inserted), each followed by nothing
   else; then the time of reading ``tracker.threshold``; and, as the
   anchor, recomputing the batch answer from the pooled table after one
   update (what a tracker without the tree would do).
2. ``distcal.optimal_threshold`` on N rows from arrays (0/1 labels, weighted
   labels, a weighted per-row loss) vs ``np.argsort`` of the scores, in one
   process.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import distcal  # noqa: E402
from distcal.core.distinct import pool_ties  # noqa: E402
from distcal.core.threshold import loss_mass, loss_per_score, summarise_segment  # noqa: E402


def per_call(fn, args_list):
    gc.disable()
    try:
        t0 = time.perf_counter()
        for args in args_list:
            fn(*args)
        return (time.perf_counter() - t0) / len(args_list)
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--updates", type=int, default=100_000)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    print("# ThresholdTracker, microseconds per call (after warm-up)")
    print(f"{'n distinct':>10}{'update seen':>13}{'update new':>12}{'threshold':>11}"
          f"{'batch recompute':>17}{'seen / seen@1e3':>17}")
    base = None
    for n in (1_000, 10_000, 100_000, 1_000_000):
        scores = rng.random(n)
        labels = (rng.random(n) < scores).astype(float)
        tracker = distcal.ThresholdTracker()
        tracker.update_many(scores, labels)
        m = args.updates
        seen = [(float(s), float(y)) for s, y in zip(scores[rng.integers(0, n, m)],
                                                      rng.random(m) < 0.5)]
        per_call(tracker.update, seen[: m // 10])  # warm-up
        t_seen = statistics.median(per_call(tracker.update, seen) for _ in range(3))
        fresh = [(float(s), 1.0) for s in rng.random(m // 10) + 2.0]  # all new scores
        t_new = per_call(tracker.update, fresh)
        t_query = per_call(lambda: tracker.threshold, [()] * 10_000)
        table = pool_ties(scores, labels)
        reps = max(3, int(2e6 // n))

        def recompute():
            summarise_segment(table.score, loss_per_score(table, 1.0, 1.0),
                              loss_mass(table, 1.0, 1.0), table.weight, table.positives)

        t_batch = per_call(recompute, [()] * min(reps, 200))
        rows = np.array([*zip(scores, labels), *seen[: m // 10], *seen, *seen, *seen,
                         *fresh])  # every update made (warm-up, 3 timed, new scores)
        batch = distcal.optimal_threshold(pd.DataFrame({"score": rows[:, 0],
                                                        "label": rows[:, 1]}))
        assert tracker.result() == batch, "the tracker and the batch threshold differ"
        base = base or t_seen
        print(f"{n:>10.0e}{t_seen * 1e6:>13.2f}{t_new * 1e6:>12.2f}{t_query * 1e6:>11.2f}"
              f"{t_batch * 1e6:>17.1f}{t_seen / base:>17.2f}")

    n = int(args.rows)
    s = rng.beta(2, 5, n)
    y = (rng.random(n) < s).astype(np.float64)
    df = pd.DataFrame({"score": s, "label": y})
    w = rng.uniform(0.5, 2.0, n)
    dfw = df.assign(w=w)
    t_arg = statistics.median(
        timed(lambda: np.argsort(s)) for _ in range(3))
    t_thr = statistics.median(timed(lambda: distcal.optimal_threshold(df)) for _ in range(3))
    t_thw = statistics.median(
        timed(lambda: distcal.optimal_threshold(dfw, weight_col="w")) for _ in range(3))
    dfz = dfw.assign(z=rng.normal(size=n))
    t_thz = statistics.median(timed(lambda: distcal.optimal_threshold(
        dfz, weight_col="w", loss_col="z")) for _ in range(3))
    assert distcal.optimal_threshold(df).cost == brute_force_cost(s, y), "cost differs"
    print(f"\n# batch threshold, N = {n:.0e} all-distinct scores, median of 3")
    print(f"np.argsort                           {t_arg:7.3f} s")
    print(f"optimal_threshold (0/1, unit)        {t_thr:7.3f} s   x argsort = {t_thr / t_arg:.2f}")
    print(f"optimal_threshold (weighted)         {t_thw:7.3f} s   x argsort = {t_thw / t_arg:.2f}")
    print(f"optimal_threshold (per-row loss)     {t_thz:7.3f} s   x argsort = {t_thz / t_arg:.2f}")


def brute_force_cost(s: np.ndarray, y: np.ndarray) -> float:
    """The least FP + FN over every rule "positive if score >= t" (t: each score, or
    above all), from cumulative sums over the rows sorted by score, highest first."""
    order = np.argsort(-s, kind="stable")
    ys, ss = y[order], s[order]
    last = np.r_[ss[1:] != ss[:-1], True]  # the end of each run of equal scores
    tp = np.cumsum(ys)[last]
    k = np.arange(1, len(s) + 1)[last]
    return float(min(y.sum(), np.min((k - tp) + (y.sum() - tp))))


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
