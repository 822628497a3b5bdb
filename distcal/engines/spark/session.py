"""The Spark session: where data comes from, how many ranges, Arrow batch size."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa

__all__ = ["with_arrow_batches", "parallelism", "default_ranges", "as_spark", "embedded_session",
           "on_executors", "worker_error", "result_bytes"]

# The last "SomeError: message" line of a Python worker's traceback (a class outside
# the builtins is named with its module: "distcal.errors.DataError: ...").
_WORKER_ERROR = re.compile(r"^((?:\w+\.)*\w+(?:Error|Exception)): (.*)$", re.MULTILINE)
_MISSING = re.compile(r"No module named '([^']+)'")


def worker_error(exc: BaseException) -> str | None:
    """The Python worker's own exception line inside a Spark ``PythonException``, if any."""
    found = _WORKER_ERROR.findall(str(exc))
    found = [f for f in found if f[0] not in ("PythonException", "Py4JJavaError")]
    return f"{found[-1][0]}: {found[-1][1].strip()}" if found else None


def on_executors(action: Callable[[], Any]) -> Any:
    """Run a Spark action that calls distcal in Python workers; explain a broken setup.

    A worker whose Python cannot import distcal (or numpy, pandas,
    pyarrow, scipy) fails every task with a ``ModuleNotFoundError`` that
    Spark wraps as "An exception was thrown from the Python worker". That
    becomes one :class:`~distcal.errors.EngineSetupError` naming the module,
    the worker's exception and the two fixes; any other failure passes
    through unchanged, but a worker's :class:`~distcal.errors.DataError` (bad rows
    found where they are read, e.g. as a transform is written) is raised again as one,
    with the worker's message.
    """
    from ...errors import DataError, EngineSetupError

    try:
        return action()
    except Exception as exc:
        capped = _RESULT_CAP.search(str(exc))
        if capped is not None:
            tasks, size, cap = capped.groups()
            raise EngineSetupError(
                f"the results of {tasks} tasks of one pass ({size}) exceed "
                f"spark.driver.maxResultSize ({cap}): raise that setting; with by= they grow "
                "with the segments times the classes and the score ranges (docs/scale.md)"
            ) from exc
        line = worker_error(exc)
        name, _, message = (line or "").partition(": ")
        if name.startswith("distcal.") and _is_data_error(name):
            raise DataError(message) from exc
        missing = _MISSING.search(line or "")
        if line is None or missing is None or not line.startswith(("ModuleNotFoundError",
                                                                    "ImportError")):
            raise
        module = missing.group(1).split(".")[0]
        raise EngineSetupError(
            f"the Spark executors' Python cannot import {module!r} ({line}): install distcal "
            "and numpy, pandas, pyarrow, scipy on the executors, or ship distcal as a zip "
            "('make zip' builds dist/distcal.zip) with spark-submit --py-files "
            "dist/distcal.zip or the spark.submit.pyFiles setting; the executors' Python is "
            "PYSPARK_PYTHON / spark.pyspark.python") from exc


# Spark's message when a job's results pass the driver's cap.
_RESULT_CAP = re.compile(r"serialized results of (\d+) tasks \(([^)]+)\) is bigger than "
                         r"spark\.driver\.maxResultSize \(([^)]+)\)")


def _is_data_error(qualified_name: str) -> bool:
    """Whether the distcal class ``module.Class`` is a DataError."""
    import importlib

    from ...errors import DataError

    module, _, name = qualified_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, DataError)


def result_bytes(spark: Any) -> int | None:
    """A quarter of ``spark.driver.maxResultSize`` (None when it is 0: no limit).

    What one job may bring to the driver, with room for what the size
    estimates of results leave out (pickling, keys). Spark's size strings:
    a number of bytes, or with a unit k, m, g, t (kb, mb, ...).
    """
    try:
        text = str(spark.conf.get("spark.driver.maxResultSize", "1g")).strip().lower()
    except Exception:  # a session that does not say: Spark's default
        text = "1g"
    digits = text.rstrip("bkmgtp")
    scale = 1024 ** "bkmgtp".index((text[len(digits):] or "b")[0])
    size = int(float(digits) * scale)
    return size // 4 if size > 0 else None


def with_arrow_batches(spark: Any, action: Callable[[], Any], rows: int = 100_000) -> Any:
    """Run ``action`` with Arrow batches of ``rows`` unless the user chose a size.

    A Python worker gathers a range's batches into chunks of 2^19 rows
    (``CHUNK_ROWS`` in :mod:`.keyed`) and pools one chunk at a time;
    100k-row batches instead of Spark's 10k cut the fit by ~8% at 1e7
    rows. The session's setting is changed only while ``action`` runs and
    restored afterwards, also on failure; a size the user set (anything
    but Spark's default 10000) is left alone. Queries that other threads
    run on the same session meanwhile see the larger batches too.
    """
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    try:
        current = spark.conf.get(key, None)
    except Exception:
        current = None
    if current not in (None, "10000"):
        return on_executors(action)
    spark.conf.set(key, str(rows))

    def restore() -> None:
        if current is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, current)

    try:
        result = on_executors(action)
    except BaseException as exc:
        # The action's error is the one to report: restoring is one more call to the
        # session, whose own failure must not replace it, and which is not tried when a
        # Connect server is unreachable (it would wait out the client's retries again).
        if type(exc).__name__ != "SparkConnectGrpcException":
            with contextlib.suppress(Exception):
                restore()
        raise
    restore()
    return result


def parallelism(df: Any) -> int:
    """Spark's default parallelism (the cores of the executors); 2 when unknown."""
    try:
        return int(df.sparkSession.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        return 2


def default_ranges(df: Any) -> int:
    """Twice the default parallelism, at least 8 (8 was best on 2 cores, bench/RESULTS.md)."""
    return max(8, 2 * parallelism(df))


def as_spark(data: Any) -> Any:
    """A Spark DataFrame for ``data`` (engine="spark" forced on local data).

    Paths are read by the active session (so any Hadoop-compatible path
    works); pandas and Arrow tables are handed to it.
    """
    from ...tables import is_path
    from ..frames import engine_of

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
