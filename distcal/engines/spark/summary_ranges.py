"""Summaries as keyed ranges on Spark: the summaries' pooled rows merged on the cluster.

A summary's rows are already pooled by (key, score) (:mod:`distcal.core.summary`),
so they need no Python map side: the Parquet tables of the saved summaries
(or the in-memory ones, handed to the session) are read by Spark, range
partitioned on the score in the JVM (equal scores in one partition,
partitions in ascending score order), and each range
pools its pre-pooled rows by (key, score) as they stream in
(:func:`~distcal.core.summary.summary_keyed`, merged with
:class:`~.keyed.KeyedRuns`): the same keyed tables a pass over the rows
builds, so every plan runs unchanged. Only ``fn``'s results reach the driver.

The range bounds come from the score samples that saved summaries carry in
their Parquet footers (:func:`~distcal.core.summary.score_sample`), and each
row goes to its range's partition by ``repartitionById`` (Spark 4.1 and
later): no sampling job reads the summaries first. Summaries saved without
samples, and older Spark, take ``repartitionByRange`` (a sampling job).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.keyed import KeyedTable, KeySpec, range_bounds
from ...core.rows import RowPart
from ...logs import log, phase
from .keyed import (
    CHUNK_ROWS,
    RANGE_ROWS,
    KeyedRuns,
    SparkRanges,
    chunks,
    collect_results,
    range_result,
)

__all__ = ["SparkSummaryRanges"]


def summary_runner(fn: Callable[[KeyedTable], Any], source: Any, spec: KeySpec,
                   finite_scores: bool, drop: bool, chunk_rows: int = CHUNK_ROWS
                   ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A range partition of summary rows to one row: its partition id and the pickled
    ``fn`` result (None for an empty partition); ``drop``: the rows with problems are
    dropped (:meth:`~distcal.core.summary.SummarySource.read_piece`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        runs = KeyedRuns()
        problems: list[dict[str, float]] = []
        for data in chunks(batches, chunk_rows):
            runs.add(source.read_piece(data, spec, finite_scores, problems, drop))
        yield range_result(fn, runs, not source.refused(problems), problems=problems)

    return run


def range_id(score: Any, bounds: np.ndarray) -> Any:
    """The column ``searchsorted(bounds, score, side="right")``: scores below
    ``bounds[0]`` are range 0, and so on (a binary search as nested ``when``)."""
    from pyspark.sql import functions as F

    def search(lo: int, hi: int) -> Any:  # the range of a score among ranges lo..hi
        if lo == hi:
            return F.lit(lo)
        mid = (lo + hi) // 2
        return F.when(score < float(bounds[mid]), search(lo, mid)).otherwise(
            search(mid + 1, hi))

    return search(0, bounds.shape[0])


class SparkSummaryRanges(SparkRanges):
    """The keyed ranges of summaries on Spark (module docstring; ``KeyedRanges``).

    Options as :class:`~.keyed.SparkKeyedRanges`: ``range_rows`` (summary
    rows per range, so the number of ranges is the rows over it, at least
    the session's default parallelism), ``n_ranges`` (a fixed number).
    """

    def __init__(self, source: Any, spec: KeySpec, *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1, n_ranges: int | None = None,
                 range_rows: int = RANGE_ROWS, sample_rows: int = 0,
                 chunk_rows: int = CHUNK_ROWS):
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        from .session import default_ranges

        self.source, self.spec, self.finite_scores = source, spec, finite_scores
        self.on_invalid, self.chunk_rows = on_invalid, chunk_rows
        self.spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        # Only the columns the pass reads move; the files' schema is the first footer's,
        # given to Spark (no job to infer it).
        names = source.columns_read(spec)
        frames = []
        if source.files:
            schema = from_arrow_schema(pq.read_schema(source.files[0]))
            frames.append(self.spark.read.schema(schema).parquet(*source.files))
        frames += [self.spark.createDataFrame(t) for t in source.tables]
        df = frames[0].select(*names)
        for other in frames[1:]:
            df = df.unionByName(other.select(*names), allowMissingColumns=False)
        # The summary rows and score samples, from the Parquet footers and the tables.
        by_id = hasattr(df, "repartitionById")  # Spark 4.1 and later
        samples = source.score_samples() if by_id else None
        total = sum(n for _, n in samples) if samples is not None else sum(
            pq.ParquetFile(f).metadata.num_rows for f in source.files) + sum(
            t.num_rows for t in source.tables)
        self.k = int(n_ranges) if n_ranges else max(default_ranges(df),
                                                     math.ceil(total / max(range_rows, 1)))
        if samples is not None:
            # Bounds from the samples, each row sent to its range's partition:
            # no sampling job.
            bounds = range_bounds(samples, self.k)
            bounds = bounds[np.isfinite(bounds)]
            self.k = bounds.shape[0] + 1
            self.ranged = df.repartitionById(self.k, range_id(F.col("score"), bounds))
        else:
            self.ranged = df.repartitionByRange(self.k, "score")
        self.persisted = []
        if passes > 1:
            self.ranged = self.persist(self.ranged)
        self.n_classes = 0
        self.n_rows, self.weight_total = source.n_rows, source.weight_total
        self.dropped_rows = source.dropped_rows
        log.info("spark: %d summary rows of %d table(s) in %d ranges by score", total,
                 len(frames), self.k)

    def map(self, fn: Callable[[KeyedTable], Any]) -> list[Any]:
        runner = summary_runner(fn, self.source, self.spec, self.finite_scores,
                                self.on_invalid == "drop", self.chunk_rows)
        with phase("spark: one keyed pass over %d ranges of summary rows", self.k):
            parts = [p for _, p in collect_results(self.ranged, runner)]
        self.n_rows, self.weight_total, self.dropped_rows = self.source.add_up(
            [q for p in parts for q in p["problems"]])
        return [p["result"] for p in parts if not p["empty"]]

    def map_rows(self, fn: Callable[[RowPart], Any]) -> list[Any]:
        raise self.source.no_rows()
