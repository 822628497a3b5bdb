"""The spark-submit job: ``jobs/spark_calibrate.py SUBCOMMAND ...``.

The subcommands and options of the ``distcal`` command line with the Spark
engine, plus ``--input-table DB.TABLE`` / ``--output-table DB.TABLE`` for
tables of the session catalog. Outputs are published atomically: Parquet
and tables are written by Spark's committer under a temporary name and
swapped into place (the old output moved aside, the new one renamed in, the
old one dropped), model and report directories are written aside and
renamed. Exit 0 on success, 2 on bad input or usage, 1 otherwise, with one
line on stderr, so a scheduler marks the task failed; re-running is safe.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import UsageError
from . import hadoop

__all__ = ["SparkIO", "main"]


def add_table_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-table", default=None, help="read this catalog table")
    if p.prog.endswith(("apply",)):
        p.add_argument("--output-table", default=None, help="write this catalog table")


class SparkIO:
    """Parquet on any Hadoop-compatible path, or catalog tables; the Spark engine."""

    engine = "spark"

    def __init__(self, spark: Any, own: bool = False):
        self.spark = spark
        self.own = own

    @classmethod
    def embedded(cls) -> SparkIO:
        """A local Spark session for ``distcal ... --engine spark``."""
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName("distcal")
        builder = builder.config("spark.pyspark.python", sys.executable)
        if not SparkSession.getActiveSession():
            builder = builder.master("local[*]").config("spark.ui.enabled", "false")
        return cls(builder.getOrCreate(), own=True)

    @classmethod
    def submitted(cls, opts: dict[str, Any]) -> SparkIO:
        """The session spark-submit set up (master, configs)."""
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("distcal").getOrCreate()
        if not spark.conf.get("spark.log.level", None):
            spark.sparkContext.setLogLevel("WARN")  # keep the job's own line findable
        return cls(spark, own=False)

    # -- inputs ---------------------------------------------------------------
    def read(self, opts: dict[str, Any]) -> Any:
        if opts.get("input_table"):
            if opts.get("input"):
                raise UsageError("give --input or --input-table, not both")
            if not self.spark.catalog.tableExists(opts["input_table"]):
                raise UsageError(f"table '{opts['input_table']}' does not exist")
            return self.spark.table(opts["input_table"])
        if not opts.get("input"):
            raise UsageError("missing required option(s): --input (or --input-table)")
        if not hadoop.exists(self.spark, opts["input"]):
            raise UsageError(f"input '{opts['input']}' does not exist")
        return self.spark.read.parquet(str(opts["input"]))

    # -- outputs --------------------------------------------------------------
    def output_name(self, opts: dict[str, Any]) -> str:
        if opts.get("output_table"):
            if opts.get("output"):
                raise UsageError("give --output or --output-table, not both")
            return opts["output_table"]
        if not opts.get("output"):
            raise UsageError("missing required option(s): --output (or --output-table)")
        return str(opts["output"])

    def refuse_existing(self, target: str, overwrite: bool, table: str | None = None) -> None:
        found = (self.spark.catalog.tableExists(table) if table
                 else hadoop.exists(self.spark, target))
        if found and not overwrite:
            raise UsageError(f"output '{target}' exists (pass --overwrite to replace it)")

    def save_model(self, model: Any, path: str, overwrite: bool) -> None:
        hadoop.publish_dir(self.spark, lambda d: model.save(d), path, overwrite)

    def load_model(self, path: str) -> Any:
        from ..model import load

        return hadoop.fetch_dir(self.spark, path, load)

    def apply(self, model: Any, opts: dict[str, Any],
              before_commit: Callable[[Any], None] | None = None) -> int:
        """Write the calibrated table aside; ``before_commit(new_df)``; then swap it in."""
        out = model.transform(self.read(opts), score_col=opts["score_col"],
                              output_col=opts["output_col"])
        if opts.get("output_table"):
            return self._write_table(out, opts["output_table"], opts["overwrite"],
                                     before_commit)
        target = self.output_name(opts)
        tmp = hadoop._sibling(target, "tmp")
        out.write.parquet(tmp)  # Spark's committer: complete or absent
        try:
            written = self.spark.read.parquet(tmp)
            rows = written.count()
            if before_commit is not None:
                before_commit(written)
            hadoop.swap_into_place(self.spark, tmp, target, opts["overwrite"])
        except BaseException:
            self._drop_path(tmp)
            raise
        return rows

    def _drop_path(self, uri: str) -> None:
        import shutil

        if hadoop.is_local(uri):
            shutil.rmtree(hadoop.local_path(uri), ignore_errors=True)
        else:
            hadoop.HadoopFS(self.spark).delete(uri)

    def _write_table(self, df: Any, table: str, overwrite: bool,
                     before_commit: Callable[[Any], None] | None = None) -> int:
        """Write a new table aside, then swap names: readers never see half a table."""
        db, _, name = table.rpartition(".")
        tmp = f"{db + '.' if db else ''}_distcal_tmp_{name}_{uuid.uuid4().hex[:8]}"
        df.write.saveAsTable(tmp)
        try:
            rows = self.spark.table(tmp).count()
            if before_commit is not None:
                before_commit(self.spark.table(tmp))
            if self.spark.catalog.tableExists(table):
                if not overwrite:
                    raise UsageError(f"output '{table}' exists (pass --overwrite to replace it)")
                old = f"{db + '.' if db else ''}_distcal_old_{name}_{uuid.uuid4().hex[:8]}"
                self.spark.sql(f"ALTER TABLE {table} RENAME TO {old}")
                self.spark.sql(f"ALTER TABLE {tmp} RENAME TO {table}")
                self.spark.sql(f"DROP TABLE {old}")
            else:
                self.spark.sql(f"ALTER TABLE {tmp} RENAME TO {table}")
        except BaseException:
            self.spark.sql(f"DROP TABLE IF EXISTS {tmp}")
            raise
        return rows

    def write_report(self, reports: list, path: str, overwrite: bool) -> None:
        from ..report import write_report

        def write(d: Any) -> None:
            write_report(reports, d, overwrite=False)

        if hadoop.is_local(path):
            write_report(reports, hadoop.local_path(path), overwrite=overwrite)
        else:
            import tempfile
            from pathlib import Path

            with tempfile.TemporaryDirectory() as t:
                staged = Path(t) / "report"
                write(staged)
                hadoop.publish_dir(self.spark, lambda d: _copytree(staged, d), path, overwrite)

    def close(self) -> None:
        if self.own:
            self.spark.stop()


def _copytree(src: Any, dst: Any) -> None:
    import shutil

    shutil.copytree(src, dst)


def main(argv: Sequence[str] | None = None) -> int:
    from ..cli import run

    return run(argv, prog="spark_calibrate", io_factory=SparkIO.submitted,
               extra=add_table_options)
