"""Per-segment ranges of a Spark DataFrame: the score ranges, each pooled by (key, score).

The rows are prepared and checked as for an unsegmented fit
(:mod:`.schema`), the ``by`` columns ride along as ``_k0, _k1, ...``, and
``repartitionByRange(k, score)`` (Spark's own range partitioner) makes the
ranges. Each range partition validates its rows, pools them by score and by
(segment, score) (:mod:`distcal.core.segments`) and sends one small pickled
row to the driver. One job serves every segment: the number of tasks is
the number of ranges, not of segments. Rows travel raw (no map-side
``groupBy``): the segment key would make the combine's groups as many as
the rows whenever segments are many.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import pyarrow as pa

from ...core.distinct import DistinctTable
from ...core.partition import add_up
from ...core.segments import SegmentTables, check_rows, pool_range, value_roles
from ...errors import column_not_found
from ...logs import log, phase
from .executor import RESULT_SCHEMA, role_arrays, summary_batch, task_rows
from .schema import check_schema, prepared, quote
from .session import default_ranges, with_arrow_batches

__all__ = ["SparkSegmentRanges", "segment_runner"]


def segment_runner(fn: Callable[[DistinctTable, SegmentTables | None], Any],
                   columns: dict[str, str], n_keys: int, finite_scores: bool,
                   segments: bool) -> Callable[[Iterator[pa.RecordBatch]],
                                               Iterator[pa.RecordBatch]]:
    """What each range partition runs (shipped to the executors by cloudpickle)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        data, stats = task_rows(batches)
        result, empty = None, True
        if data is not None:
            arrays, text = role_arrays(data, columns)
            keep, counts = check_rows(arrays, text, columns, finite_scores)
            stats.update(counts)
            if keep is not None:
                arrays = {r: a[keep] for r, a in arrays.items()}
                data = data.filter(pa.array(keep))
            keys = [data.column(f"_k{i}") for i in range(n_keys)] if segments else []
            value, target = value_roles(columns)
            table, segs = pool_range(arrays[value], arrays[target], arrays.get("weight"),
                                     keys, segments, with_wyy=value == "prob")
            if len(table):
                result, empty = fn(table, segs), False
        yield summary_batch(stats, empty, result)

    return run


class SparkSegmentRanges:
    """Score ranges of a Spark DataFrame with the segment keys (see ``SegmentRanges``)."""

    def __init__(self, df: Any, columns: dict[str, str | None], by: list[str], *,
                 on_invalid: str = "raise", finite_scores: bool = False, passes: int = 1,
                 n_ranges: int | None = None, combine: bool | str = "auto",
                 sample_rows: int = 50_000):
        from pyspark.sql import functions as F

        self.columns = {r: c for r, c in columns.items() if c is not None}
        self.on_invalid, self.finite_scores = on_invalid, finite_scores
        fields = [f.name for f in df.schema.fields]
        for name in by:
            if name not in fields:
                raise column_not_found(name, "segment", fields)
        kinds = check_schema(df, self.columns)
        self.df, self.kinds = df, kinds  # for spearman_rows
        self.score_role, self.label_role = value_roles(self.columns)
        self.n_keys = len(by)
        keys = tuple(F.col(quote(b)).alias(f"_k{i}") for i, b in enumerate(by))
        rows = prepared(df, self.columns, kinds, keys)
        k = int(n_ranges or default_ranges(df))
        self.ranged = rows.repartitionByRange(k, value_roles(self.columns)[0])
        log.info("spark: %d range partitions by score, segments by %s", k, by)
        self.persisted = passes > 1
        if self.persisted:
            from pyspark import StorageLevel

            self.ranged = self.ranged.persist(StorageLevel.MEMORY_AND_DISK)
        self.checked = False
        self.n_rows, self.weight_total, self.dropped_rows = 0, 0.0, 0
        self.sum_wyy = float("nan")

    def _run(self, fn: Callable[[DistinctTable, SegmentTables | None], Any],
             segments: bool) -> list[Any]:
        runner = segment_runner(fn, self.columns, self.n_keys, self.finite_scores, segments)
        with phase("spark: one pass over the range partitions%s",
                   " with segments" if segments else ""):
            rows = with_arrow_batches(self.ranged.sparkSession, lambda: self.ranged.mapInArrow(
                runner, RESULT_SCHEMA).collect())
        parts = [pickle.loads(r["payload"]) for r in sorted(rows, key=lambda r: r["pid"])]
        if not self.checked:
            totals = add_up([p["stats"] for p in parts], self.columns,
                            on_invalid=self.on_invalid, finite_scores=self.finite_scores)
            self.n_rows, self.weight_total = totals.n_rows, totals.weight_total
            self.dropped_rows, self.sum_wyy = totals.dropped_rows, totals.sum_wyy
            self.checked = True
        return [p["result"] for p in parts if not p["empty"]]

    def map(self, fn: Callable[[DistinctTable], Any]) -> list[Any]:
        return self._run(lambda table, _: fn(table), False)

    def map_segments(self, fn: Callable[[DistinctTable, SegmentTables], Any]) -> list[Any]:
        return self._run(fn, True)  # type: ignore[arg-type]

    def spearman_rows(self) -> bool:
        """Sign of Spearman's rho over all valid rows, by Spark ML (as :class:`SparkRanges`)."""
        from .ranges import SparkRanges

        return SparkRanges.spearman_rows(self)  # type: ignore[arg-type]

    def close(self) -> None:
        if self.persisted:
            self.ranged.unpersist()

    def __enter__(self) -> SparkSegmentRanges:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
