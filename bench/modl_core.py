"""Micro-benchmark of distcal.core.modl on binary labels with signal.

V distinct scores, one row each, P(y=1 | s) = s**2 for s uniform on [0, 1]:
the greedy path (exact_max=0 is implied by V > 1000 reduced rows).

    python bench/modl_core.py 10000 100000 1000000
"""

from __future__ import annotations

import sys
import time

import numpy as np

from distcal.core.modl import _greedy_starts, _pure_run_starts, modl_partition


def table(v: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    s = np.sort(rng.random(v))
    y = (rng.random(v) < s**2).astype(np.int64)
    return np.stack([1 - y, y], axis=1)


def main(sizes: list[int]) -> None:
    for v in sizes:
        c = table(v)
        starts, _ = _pure_run_starts(c)
        reduced = np.add.reduceat(c, starts, axis=0)
        t0 = time.perf_counter()
        g = _greedy_starts(reduced)
        t1 = time.perf_counter()
        res = modl_partition(c)
        t2 = time.perf_counter()
        print(f"V={v:>9,d} runs={reduced.shape[0]:>8,d} greedy={t1 - t0:7.3f}s "
              f"modl_partition={t2 - t1:7.3f}s intervals greedy/final={g.shape[0]}/{len(res)} "
              f"exact={res.exact}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10_000, 100_000, 1_000_000])
