"""Evaluation of several probability columns of one Spark DataFrame."""

from __future__ import annotations

from typing import Any

from ...core.validate import RowChecker
from ..base import ReportFn
from .ranges import SparkRanges
from .schema import any_problem, check_schema, prepared, problem_flags, quote
from .session import as_spark

__all__ = ["evaluate_many"]


def evaluate_many(df: Any, columns: dict[str, str | None], prob_cols: list[str], *,
                  on_invalid: str, report: ReportFn, **opts: Any) -> dict[str, Any]:
    """One report per probability column; a row invalid in any column is invalid for all.

    One aggregation counts every problem (the same message as locally);
    the valid rows are then persisted and range-partitioned once per column.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cols = {r: c for r, c in columns.items() if c is not None}
    df = as_spark(df)
    kinds = check_schema(df, cols)
    rows = prepared(df, cols, kinds)
    flags = problem_flags(cols, kinds, False)
    bad = any_problem(flags)
    row = rows.agg(F.count(F.lit(1)).alias("rows"),
                       F.sum(F.when(bad, 1).otherwise(0)).alias("invalid"),
                       *[F.sum(F.when(cond, 1).otherwise(0)).alias(f"_p{i}")
                         for i, (_, _, cond) in enumerate(flags)]).collect()[0]
    checker = RowChecker(cols)
    for i, (role, problem, _) in enumerate(flags):
        if row[f"_p{i}"]:
            checker.problems[(role, problem)] += int(row[f"_p{i}"])
    checker.rows_seen, checker.rows_invalid = int(row["rows"]), int(row["invalid"] or 0)
    checker.raise_if_invalid(on_invalid)
    clean = rows.where(~bad).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        out = {}
        rest = {r: r for r in cols if not r.startswith("prob:")}
        for c in prob_cols:
            one = clean.select(F.col(quote(f"prob:{c}")).alias("_prob"), *rest)
            # Several passes (bins, partials, adaptive bins): persisted, so every
            # pass sees the same ranges.
            with SparkRanges(one, {"prob": "_prob", **rest}, on_invalid="raise", passes=4,
                             **opts) as ranges:
                rep = report(ranges, c)
            rep.dropped_rows = checker.rows_invalid
            out[c] = rep
        return out
    finally:
        clean.unpersist()
