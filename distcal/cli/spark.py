"""The Spark backend, and the spark-submit job ``jobs/spark_calibrate.py SUBCOMMAND ...``.

The subcommands and options of the ``distcal`` command line with the Spark
engine, plus ``--input-table DB.TABLE`` / ``--output-table DB.TABLE`` for
tables of the session catalog. Paths are resolved as Spark resolves them
(a path without a scheme is on the cluster's default filesystem), and every
output is published through :mod:`distcal.storage`: the calibrated Parquet
is written by Spark's committer under a temporary sibling name and
committed into place; a table is written under a temporary name and
renamed. Exit 0 on success, 2 on bad input or usage, 1 otherwise, with one
line on stderr, so a scheduler marks the task failed; re-running is safe.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..errors import DataError, UsageError
from ..model import CalibrationModel
from ..storage import (
    PARQUET,
    FileSystem,
    LocalFileSystem,
    check_commit,
    filesystem_for,
    is_local_uri,
    publishing,
)
from .backend import Backend, transform_for_cli
from .run import run

__all__ = ["SparkBackend", "main"]


def _quote_table(name: str) -> str:
    """``db.table`` as ```db`.`table``` for the SQL we build (names with odd characters)."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))


def _reader_error(exc: BaseException) -> str:
    """The line of a Spark reader's failure that says what went wrong."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if "Exception: " in ln and not ln.startswith("at "):
            return ln.split("Exception: ", 1)[1]
    return lines[0] if lines else type(exc).__name__


class SparkBackend(Backend):
    """Parquet on any Hadoop-compatible path, or catalog tables; the Spark engine."""

    engine = "spark"

    def __init__(self, spark: Any, own: bool = False):
        self.spark = spark
        self.own = own

    @classmethod
    def embedded(cls, opts: dict[str, Any] | None = None) -> SparkBackend:
        """A local session for ``distcal ... --engine spark`` (see ``embedded_session``)."""
        from ..engines.spark.session import embedded_session

        return cls(embedded_session(), own=True)

    @classmethod
    def submitted(cls, opts: dict[str, Any]) -> SparkBackend:
        """The session spark-submit set up (master, configs)."""
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName("distcal")
        if opts.get("quiet"):  # errors only, no progress bars
            builder = (builder.config("spark.log.level", "ERROR")
                       .config("spark.ui.showConsoleProgress", "false"))
        elif not opts.get("verbose"):
            # Spark's INFO lines would bury the job's own one line (unless the
            # user set a level with --conf spark.log.level=...).
            builder = builder.config("spark.log.level", "WARN")
        spark = builder.getOrCreate()
        return cls(spark, own=False)

    # -- where things are -----------------------------------------------------
    def filesystem(self, uri: str) -> FileSystem:
        """This machine's files for ``file:`` paths (and plain ones when Spark's default
        filesystem is local); the session's Hadoop FileSystem for everything else, or on
        Spark Connect (no JVM on the client) fsspec's."""
        if is_local_uri(uri) and (str(uri).startswith("file:") or self._default_fs_local()):
            return LocalFileSystem()
        from ..storage.hadoop import HadoopFileSystem

        try:
            return HadoopFileSystem(self.spark)
        except AttributeError:  # Spark Connect
            if is_local_uri(uri):
                raise UsageError(
                    f"'{uri}': the default filesystem of this Spark Connect session is not "
                    "local; give the path as a full URI (hdfs://..., s3a://...)") from None
            return filesystem_for(uri)

    def _default_fs_local(self) -> bool:
        try:
            conf = self.spark.sparkContext._jsc.hadoopConfiguration()
            default = conf.get("fs.defaultFS", "file:///")
        except AttributeError:  # Spark Connect: the session's setting, if it has one
            default = self.spark.conf.get("spark.hadoop.fs.defaultFS", "file:///")
        return str(default).startswith("file:")

    # -- inputs ---------------------------------------------------------------
    def read(self, opts: dict[str, Any]) -> Any:
        if opts.get("input_table"):
            if opts.get("input"):
                raise UsageError("give --input or --input-table, not both")
            if not self.spark.catalog.tableExists(opts["input_table"]):
                raise DataError(f"table '{opts['input_table']}' does not exist")
            return self.spark.table(opts["input_table"])
        if not opts.get("input"):
            raise UsageError("missing required option(s): --input (or --input-table)")
        if not self.filesystem(opts["input"]).exists(opts["input"]):
            raise DataError(f"input '{opts['input']}' does not exist")
        return self._read_files(str(opts["input"]), opts.get("input_format") or "parquet")

    def _read_files(self, path: str, fmt: str) -> Any:
        """Parquet, CSV (header line, inferred types), JSON lines or ORC, by Spark's readers.

        A path the reader cannot read is a ``DataError`` (one line, exit 2).
        """
        reader = self.spark.read.format(fmt)
        if fmt == "csv":
            reader = reader.option("header", True).option("inferSchema", True)
        try:
            # load() infers the schema: files the reader cannot read fail here
            # (as AnalysisException, or a Py4JJavaError around a SparkException).
            return reader.load(path)
        except Exception as exc:
            raise DataError(f"input '{path}' cannot be read as {fmt}: {_reader_error(exc)}"
                            ) from exc

    # -- outputs --------------------------------------------------------------
    def output_name(self, opts: dict[str, Any]) -> str:
        if opts.get("output_table"):
            if opts.get("output"):
                raise UsageError("give --output or --output-table, not both")
            return str(opts["output_table"])
        if not opts.get("output"):
            raise UsageError("missing required option(s): --output (or --output-table)")
        return str(opts["output"])

    def refuse_existing(self, target: str, overwrite: bool, table: str | None = None,
                        kind: str | None = None) -> None:
        if table:
            if self.spark.catalog.tableExists(table) and not overwrite:
                raise UsageError(f"output '{table}' exists (pass --overwrite to replace it)")
            return
        super().refuse_existing(target, overwrite, kind=kind)

    def apply(self, model: CalibrationModel, opts: dict[str, Any],
              before_commit: Callable[[Any], None] | None = None) -> int:
        """Write the calibrated table aside; ``before_commit(new_df)``; then commit it."""
        from ..engines.spark.session import on_executors  # bad rows: a DataError

        out = transform_for_cli(model, self.read(opts), opts)
        if opts.get("output_table"):
            return self._write_table(out, opts["output_table"], opts["overwrite"],
                                     before_commit)
        target = self.output_name(opts)
        with publishing(self.filesystem(target), target, overwrite=opts["overwrite"],
                        kind=PARQUET) as tmp:
            on_executors(lambda: out.write.parquet(tmp))  # Spark's committer: whole or absent
            written = self.spark.read.parquet(tmp)
            rows = int(written.count())
            if before_commit is not None:
                before_commit(written)
        return rows

    def _write_table(self, df: Any, table: str, overwrite: bool,
                     before_commit: Callable[[Any], None] | None = None) -> int:
        """Write a new table aside, then swap names: readers never see half a table."""
        from ..engines.spark.session import on_executors

        db, _, name = table.rpartition(".")
        prefix = f"{db}." if db else ""
        tmp = f"{prefix}_distcal_tmp_{name}_{uuid.uuid4().hex[:8]}"
        on_executors(lambda: df.write.saveAsTable(tmp))
        q = _quote_table
        try:
            rows = int(self.spark.table(tmp).count())
            if before_commit is not None:
                before_commit(self.spark.table(tmp))
            self.refuse_existing(table, overwrite, table=table)  # it may have appeared since
            check_commit()
            if self.spark.catalog.tableExists(table):
                old = f"{prefix}_distcal_old_{name}_{uuid.uuid4().hex[:8]}"
                self.spark.sql(f"ALTER TABLE {q(table)} RENAME TO {q(old)}")
                try:
                    self.spark.sql(f"ALTER TABLE {q(tmp)} RENAME TO {q(table)}")
                except BaseException:
                    self.spark.sql(f"ALTER TABLE {q(old)} RENAME TO {q(table)}")
                    raise
                self.spark.sql(f"DROP TABLE {q(old)}")
            else:
                self.spark.sql(f"ALTER TABLE {q(tmp)} RENAME TO {q(table)}")
        except BaseException:
            self.spark.sql(f"DROP TABLE IF EXISTS {q(tmp)}")
            raise
        return rows

    def close(self) -> None:
        if self.own:
            self.spark.stop()


def launcher_stderr() -> TextIO:
    """spark-submit's own stderr, where the job's one failure line belongs.

    In client mode spark-submit's PythonRunner starts this Python with its
    stderr merged into its stdout (``redirectErrorStream``), so a line printed
    to our stderr reaches the user's stdout behind Spark's log. On Linux the
    launcher's stderr is reachable as /proc/<parent>/fd/2; elsewhere (or when
    the parent is not the launcher's JVM, or the stream cannot be reopened, e.g.
    a socket) the line goes to our stderr as before.
    """
    try:
        parent = os.getppid()
        with open(f"/proc/{parent}/comm") as fh:
            if fh.read().strip() != "java":
                return sys.stderr
        return open(f"/proc/{parent}/fd/2", "w")  # noqa: SIM115 (closed by the caller)
    except OSError:
        return sys.stderr


def main(argv: Sequence[str] | None = None, *, process: bool = False) -> int:
    """Entry point of ``jobs/spark_calibrate.py`` (``process``: :func:`.run.run`)."""
    return run(argv, prog="spark_calibrate", entry_point="spark",
               backend_factory=SparkBackend.submitted, errors=launcher_stderr, process=process)
