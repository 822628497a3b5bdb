"""Shared by the bench scripts: the median wall time of a few runs, the Spark session, and
the peak resident memory of a child process and its descendants."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeat: int = 3,
          clock: Callable[[], float] = time.perf_counter, warmup: bool = False) -> float:
    """Median seconds of ``repeat`` calls of ``fn`` (wall time; ``time.process_time``: CPU),
    after one untimed call with ``warmup`` (a JIT compile, a cold session or cluster)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def spark_session(app: str = "distcal-bench"):  # type: ignore[no-untyped-def]
    """Spark local[2] as the benchmarks run it: 4 GB driver, 8 shuffle partitions, no UI."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g")
             .config("spark.sql.shuffle.partitions", "8")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def tree_rss(pid: int) -> int:
    """Resident bytes of process ``pid`` and all its descendants (Linux /proc)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) << 10
            for task in os.listdir(f"/proc/{p}/task"):  # children of every thread
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return total


def run_with_peak_rss(cmd: list[str], every: float = 0.05) -> tuple[str, int]:
    """Run ``cmd``; its stdout and the peak of :func:`tree_rss` over it, sampled
    every ``every`` seconds (a thread of this benchmark process, not of distcal)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak, stop = 0, threading.Event()

    def poll() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(every)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    out, _ = proc.communicate()
    stop.set()
    th.join()
    return out, peak
