"""The Spark session: where data comes from, how many ranges, Arrow batch size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa

__all__ = ["with_arrow_batches", "default_ranges", "as_spark", "embedded_session"]


def with_arrow_batches(spark: Any, action: Callable[[], Any], rows: int = 100_000) -> Any:
    """Run ``action`` with Arrow batches of ``rows`` unless the user chose a size.

    A range partition is concatenated in Python anyway; 100k-row batches
    instead of Spark's 10k cut the fit by ~8% at 1e7 rows. The session's
    setting is changed only while ``action`` runs and restored afterwards,
    also on failure; a size the user set (anything but Spark's default
    10000) is left alone. Queries that other threads run on the same
    session meanwhile see the larger batches too.
    """
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    try:
        current = spark.conf.get(key, None)
    except Exception:
        current = None
    if current not in (None, "10000"):
        return action()
    spark.conf.set(key, str(rows))
    try:
        return action()
    finally:
        if current is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, current)


def default_ranges(df: Any) -> int:
    """Twice the default parallelism, at least 8 (8 was best on 2 cores, bench/RESULTS.md)."""
    try:
        return max(8, 2 * df.sparkSession.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        return 8


def as_spark(data: Any) -> Any:
    """A Spark DataFrame for ``data`` (engine="spark" forced on local data).

    Paths are read by the active session (so any Hadoop-compatible path
    works); pandas and Arrow tables are handed to it.
    """
    from ...tables import is_path
    from .. import engine_of

    if engine_of(data) == "spark":
        return data
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
    if is_path(data):
        return spark.read.parquet(str(data))
    if isinstance(data, pa.Table):
        data = data.to_pandas()
    if isinstance(data, pd.DataFrame):
        return spark.createDataFrame(data)
    raise TypeError(f"the spark engine cannot read data of type {type(data).__name__}")


def embedded_session(app_name: str = "distcal") -> Any:
    """A local Spark session for the command line and the demo (``local[*]``).

    Its Python workers run this interpreter, so they import the same
    distcal, numpy and pyarrow as the driver whatever ``python3`` is first on
    PATH. PySpark takes the workers' interpreter from the environment
    variable ``PYSPARK_PYTHON`` when the context starts (the configuration
    ``spark.pyspark.python`` is read by spark-submit only), so it is set for
    that moment and restored right after. The driver listens on loopback
    only and the web UI is off: nothing of this session is reachable from
    the network. An active session (e.g. a notebook's) is reused as it is.
    """
    import os
    import sys

    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    saved = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        return (SparkSession.builder.appName(app_name).master("local[*]")
                .config("spark.pyspark.python", sys.executable)
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.ui.enabled", "false")
                .getOrCreate())
    finally:
        if saved is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = saved
