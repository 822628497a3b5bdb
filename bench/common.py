"""Shared by the bench scripts: the median wall time of a few runs, the Spark session."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeat: int = 3,
          clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of ``repeat`` calls of ``fn`` (wall time; ``time.process_time``: CPU)."""
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
