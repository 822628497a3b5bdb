"""Micro-benchmark of distcal.core.modl on binary labels with signal; JIT compile and load times.

V distinct scores, one row each, P(y=1 | s) = s**2 for s uniform on [0, 1]:
the greedy path (exact_max=0 is implied by V > 1000 reduced rows), compiled
(numba) and pure Python in the same process.

    python bench/modl_core.py 10000 100000 1000000
    python bench/modl_core.py --compile 100000

``--compile V`` runs fresh processes on one table of V rows: with an empty
numba cache (import + compilation on the first call), then with the cache
that run filled (import + loading), each against the warm compiled call and
the pure-Python path in the same process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from distcal.core import modl
from distcal.core.modl import _greedy_starts, _pure_run_starts, modl_partition


def table(v: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    s = np.sort(rng.random(v))
    y = (rng.random(v) < s**2).astype(np.int64)
    return np.stack([1 - y, y], axis=1)


def python_path(fn, *args):  # type: ignore[no-untyped-def]
    """fn(*args) with the compiled kernels switched off."""
    saved = modl._JIT_MIN_ROWS
    modl._JIT_MIN_ROWS = 1 << 62
    try:
        return fn(*args)
    finally:
        modl._JIT_MIN_ROWS = saved


def main(sizes: list[int]) -> None:
    for v in sizes:
        c = table(v)
        starts, _ = _pure_run_starts(c)
        reduced = np.add.reduceat(c, starts, axis=0)
        # Load (or compile) the kernels outside the timings.
        saved, modl._JIT_MIN_ROWS = modl._JIT_MIN_ROWS, 0
        modl_partition(c[:2000], exact_max=0)
        modl._JIT_MIN_ROWS = saved
        t0 = time.perf_counter()
        g = _greedy_starts(reduced)
        t1 = time.perf_counter()
        res = modl_partition(c)
        t2 = time.perf_counter()
        pg = python_path(_greedy_starts, reduced)
        t3 = time.perf_counter()
        pres = python_path(modl_partition, c)
        t4 = time.perf_counter()
        same = (np.array_equal(g, pg) and np.array_equal(res.cuts, pres.cuts)
                and res.cost == pres.cost)
        print(f"V={v:>9,d} runs={reduced.shape[0]:>8,d} compiled: greedy={t1 - t0:7.3f}s "
              f"modl_partition={t2 - t1:7.3f}s; python: greedy={t3 - t2:7.3f}s "
              f"modl_partition={t4 - t3:7.3f}s; intervals greedy/final={g.shape[0]}/{len(res)}; "
              f"identical: {same}")


def child(v: int) -> None:
    t0 = time.perf_counter()
    c = table(v)
    modl_partition(c)
    t1 = time.perf_counter()
    modl_partition(c)
    t2 = time.perf_counter()
    python_path(modl_partition, c)
    t3 = time.perf_counter()
    print(f"first call {t1 - t0:6.2f}s  warm call {t2 - t1:6.2f}s  python path {t3 - t2:6.2f}s")


def compile_times(v: int) -> None:
    with tempfile.TemporaryDirectory(prefix="distcal-numba-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("empty numba cache", "filled numba cache"):
            out = subprocess.run([sys.executable, __file__, "--child", str(v)], env=env,
                                 check=True, capture_output=True, text=True).stdout.strip()
            print(f"V={v:,d}, {label}: {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]))
    elif sys.argv[1:2] == ["--compile"]:
        compile_times(int(sys.argv[2]) if len(sys.argv) > 2 else 100_000)
    else:
        main([int(a) for a in sys.argv[1:]] or [10_000, 100_000, 1_000_000])
