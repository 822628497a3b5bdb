"""Micro-benchmark of distcal.core.modl on binary labels with signal; JIT compile and load times.

V distinct scores, one row each, P(y=1 | s) = s**2 for s uniform on [0, 1]:
the greedy path (exact_max=0 is implied by V > 1000 reduced rows), compiled
(numba) and pure Python in the same process.

    python bench/modl_core.py 10000 100000 1000000
    python bench/modl_core.py --compile 100000
    python bench/modl_core.py --phases REF
    python bench/modl_core.py --fit-phases
    python bench/modl_core.py --starts

``--phases REF`` times the phases of ``modl_partition`` (thread CPU
seconds, best of three; the machine is shared) on the count table of
``bench/modl.py``'s 1e7 rows over 1e6 distinct scores, for this tree and
for git revision REF in the same process, and checks that both give the
same partition and cost.

``--fit-phases`` times ``distcal.fit(method="modl")`` on the 1e7 rows over
1e6 distinct scores of ``bench/modl.py`` as a pandas DataFrame, with the
isotonic fit on the same data before each run as the anchor, median run
of three: wall and thread CPU of the phases (the pooling into the
distinct-score table is the rest of the fit). Run it with another tree on
PYTHONPATH to get that tree's breakdown.

``--starts`` times the two post-optimisations of ``modl_partition`` (from
greedy's partition, and the top-down start on greedy's coarse intervals)
on that same 1e6-score table, each alone and both side by side in two
threads as ``modl_partition`` runs them: wall and thread CPU seconds, four
rounds.

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


def phase_times(mods: list, C: np.ndarray) -> tuple[list[dict[str, float]], list]:  # type: ignore[type-arg]
    """Thread CPU seconds of each phase of each module's greedy path on C, best of 3, alternated."""
    best: list[dict[str, float]] = [{} for _ in mods]
    results: list = [None] * len(mods)  # type: ignore[type-arg]
    for _ in range(3):
        for i, mod in enumerate(mods):
            b = best[i]

            def timed(label: str, fn, *args, b=b):  # type: ignore[no-untyped-def]
                t0 = time.thread_time()
                out = fn(*args)
                b[label] = min(b.get(label, float("inf")), time.thread_time() - t0)
                return out

            c = timed("checks and pure runs",
                      lambda: (mod._check_counts(C), mod._pure_run_starts(C)))[0]
            K, N = c.shape[0], int(c.sum())
            f_row, f_pair = timed("first f and gains",
                                  lambda: (mod._f(c), mod._f(c[:-1] + c[1:])))
            keys = mod._quantise(f_pair - f_row[:-1] - f_row[1:])
            removed, steps = timed("greedy kernel", mod._jit_greedy(), np.ascontiguousarray(c),
                                   f_row.copy(), keys, f_pair, N, True)
            st = mod._kept_starts(K, removed, steps, True)
            t0, w0 = time.process_time(), time.perf_counter()
            mod._greedy_starts(c, True)  # what modl_partition runs (in parts, if it has them)
            b["greedy path CPU"] = min(b.get("greedy path CPU", float("inf")),
                                       time.process_time() - t0)
            b["greedy path wall"] = min(b.get("greedy path wall", float("inf")),
                                        time.perf_counter() - w0)
            timed("post-opt from greedy", mod._post_optimise, c, st)
            if hasattr(mod, "_coarse_top_down") and K > mod._TOP_COARSE:
                # on greedy's 16,384 intervals, then post-optimised on all rows
                timed("post-opt top-down", mod._coarse_top_down, c, removed, st.shape[0])
            else:
                timed("post-opt top-down", mod._post_optimise, c, np.zeros(1, dtype=np.intp))
            t0, w0 = time.process_time(), time.perf_counter()
            results[i] = mod.modl_partition(C)
            b["modl_partition CPU"] = min(b.get("modl_partition CPU", float("inf")),
                                          time.process_time() - t0)
            b["modl_partition wall"] = min(b.get("modl_partition wall", float("inf")),
                                           time.perf_counter() - w0)
    return best, results


def phases(ref: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from modl import count_table, make_data, module_at  # bench/modl.py

    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())
    C = count_table(*make_data(10**7, 10**6))
    old = module_at(ref)
    for mod in (old, modl):  # compile or load the kernels outside the timings
        saved, mod._JIT_MIN_ROWS = mod._JIT_MIN_ROWS, 0
        mod.modl_partition(C[:3000], exact_max=0)
        mod._JIT_MIN_ROWS = saved
    (t_old, t_new), (r_old, r_new) = phase_times([old, modl], C)
    print(f"# V={C.shape[0]:,}; thread CPU seconds, best of 3, alternated ({ref} | this tree)")
    for k in t_new:
        print(f"  {k:24s} {t_old[k]:6.3f} | {t_new[k]:6.3f}")
    same = np.array_equal(r_old.cuts, r_new.cuts) and r_old.cost == r_new.cost
    print(f"  identical partition and cost: {same}")
    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())


def fit_phases() -> None:
    import functools
    import statistics

    import pandas as pd

    import distcal
    from distcal.core import discretize

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from modl import make_data  # bench/modl.py

    s, y = make_data(10**7, 10**6)
    df = pd.DataFrame({"score": s, "label": y})
    acc: dict[str, list[float]] = {}

    def wrap(mod, name: str, label: str) -> None:  # type: ignore[no-untyped-def]
        fn = getattr(mod, name, None)
        if fn is None:  # an older tree on PYTHONPATH
            return

        @functools.wraps(fn)
        def timed(*a, **k):  # type: ignore[no-untyped-def]
            w, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                e = acc.setdefault(label, [0.0, 0.0])
                e[0] += time.perf_counter() - w
                e[1] += time.thread_time() - c
        setattr(mod, name, timed)

    wrap(discretize, "_binary_counts", "count table of the range, pure-run merge")
    partition = "_partition" if hasattr(discretize, "_partition") else "modl_partition"
    wrap(discretize, partition, "modl_partition")
    wrap(modl, "_two_starts", "  both starts (greedy, then post-opt | top-down)")
    wrap(modl, "_greedy_path", "    greedy path (first gains, merges)")
    wrap(modl, "_coarse_top_down", "    top-down start (second thread)")
    wrap(modl, "_table_cost", "  costs of the two results")
    distcal.fit(df.iloc[:200_000], method="modl")  # load the compiled kernels
    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())
    runs = []
    cpu: list[tuple[float, float]] = []
    for _ in range(3):
        acc.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        distcal.fit(df, method="isotonic")
        t1, c1 = time.perf_counter(), time.process_time()
        distcal.fit(df, method="modl")
        t2, c2 = time.perf_counter(), time.process_time()
        runs.append((t2 - t1, t1 - t0, {k: list(v) for k, v in acc.items()}))
        cpu.append((c2 - c1, c1 - c0))
    t_modl, t_iso, phase = sorted(runs, key=lambda r: r[0])[1]
    print(f"# {distcal.__file__}: fit modl {t_modl:.2f} s, isotonic {t_iso:.2f} s "
          f"(x{t_modl / t_iso:.2f}), median MODL run of 3; isotonic median "
          f"{statistics.median(r[1] for r in runs):.2f} s")
    c_modl, c_iso = (statistics.median(c[i] for c in cpu) for i in (0, 1))
    print(f"# process CPU (all threads), medians of 3: fit modl {c_modl:.2f} s, isotonic "
          f"{c_iso:.2f} s (x{c_modl / c_iso:.2f})")
    for k, (w, c) in phase.items():
        print(f"  {k:46s} wall {w:5.2f} s  thread CPU {c:5.2f} s")
    rest = (t_modl - phase["modl_partition"][0]
            - phase["count table of the range, pure-run merge"][0])
    print(f"  {'rest: reading, pooling into distinct scores':46s} wall {rest:5.2f} s")
    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())


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


def starts() -> None:
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from modl import count_table, make_data  # bench/modl.py

    C = modl.premerge_range(count_table(*make_data(10**7, 10**6)))[0]
    K = C.shape[0]
    saved, modl._JIT_MIN_ROWS = modl._JIT_MIN_ROWS, 0
    modl.modl_partition(C[:3000], exact_max=0)  # load the kernels
    modl._JIT_MIN_ROWS = saved
    removed, steps = modl._greedy_path(C, True)
    kept = modl._kept_starts(K, removed, steps, True)

    def timed(fn, *args):  # type: ignore[no-untyped-def]
        w, c = time.perf_counter(), time.thread_time()
        fn(*args)
        return time.perf_counter() - w, time.thread_time() - c

    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())
    print(f"# K={K:,}; (wall, thread CPU) seconds")
    with ThreadPoolExecutor(1) as pool:
        for _ in range(4):
            a = timed(modl._post_optimise, C, kept)
            b = timed(modl._coarse_top_down, C, removed, kept.shape[0])
            w0 = time.perf_counter()
            other = pool.submit(timed, modl._coarse_top_down, C, removed, kept.shape[0])
            c = timed(modl._post_optimise, C, kept)
            d = other.result()
            pair = time.perf_counter() - w0
            print(f"  alone: from greedy ({a[0]:.3f}, {a[1]:.3f}) top-down ({b[0]:.3f}, "
                  f"{b[1]:.3f}) | side by side: ({c[0]:.3f}, {c[1]:.3f}) ({d[0]:.3f}, "
                  f"{d[1]:.3f}), pair {pair:.3f}")
    print("# uptime:", subprocess.check_output(["uptime"], text=True).strip())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]))
    elif sys.argv[1:2] == ["--fit-phases"]:
        fit_phases()
    elif sys.argv[1:2] == ["--starts"]:
        starts()
    elif sys.argv[1:2] == ["--phases"]:
        phases(sys.argv[2])
    elif sys.argv[1:2] == ["--compile"]:
        compile_times(int(sys.argv[2]) if len(sys.argv) > 2 else 100_000)
    else:
        main([int(a) for a in sys.argv[1:]] or [10_000, 100_000, 1_000_000])
