"""What runs on the executors: one range partition to one pickled summary row.

Only this module (and the core it calls) is imported in Spark's Python
workers. It needs numpy, pandas, pyarrow and scipy — what PySpark's Arrow
path needs plus scipy — and nothing optional, so that distcal reaches a
cluster as one zip on ``--py-files``.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.distinct import DistinctTable, merge_tables
from ...core.partition import pool_valid_rows

__all__ = ["partition_runner", "RESULT_SCHEMA", "task_rows", "role_arrays", "summary_batch",
           "PooledRuns", "chunks", "CHUNK_ROWS"]

RESULT_SCHEMA = "pid long, payload binary"


def task_rows(batches: Iterator[pa.RecordBatch]) -> tuple[pa.Table | None, dict[str, Any]]:
    """A range partition's rows as one table (None when it has none) and its zeroed statistics."""
    nonempty = [b for b in batches if b.num_rows]
    stats: dict[str, Any] = {"problems": Counter(), "rows": 0, "invalid": 0, "n_rows": 0,
                             "weight_total": 0.0, "sum_wyy": 0.0}
    return (pa.Table.from_batches(nonempty) if nonempty else None), stats


def role_arrays(data: pa.Table, columns: dict[str, str]
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each role's column as float64, and the text of the columns that were cast from text
    (``_text_<role>``, kept to name bad values in errors)."""
    arrays, text = {}, {}
    for role in columns:
        arrays[role] = data.column(role).to_numpy(zero_copy_only=False).astype(np.float64)
        if f"_text_{role}" in data.column_names:
            text[role] = data.column(f"_text_{role}").to_numpy(zero_copy_only=False)
    return arrays, text


def summary_batch(stats: dict[str, Any], empty: bool, result: Any) -> pa.RecordBatch:
    """The one row a range partition sends to the driver: its id and the pickled summary."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "runs inside a Spark task"
    payload = pickle.dumps({"stats": stats, "empty": empty, "result": result},
                           protocol=pickle.HIGHEST_PROTOCOL)
    return pa.RecordBatch.from_pydict({"pid": [context.partitionId()], "payload": [payload]},
                                      schema=pa.schema([("pid", pa.int64()),
                                                        ("payload", pa.binary())]))


# Rows gathered before pooling: one sort of ~1M rows keeps numpy efficient,
# and a partition's memory stays one chunk plus its distinct scores.
CHUNK_ROWS = 1 << 20


class PooledRuns:
    """A range partition's pooled chunks, merged as they come (memory: distinct scores).

    Each chunk of rows is pooled by distinct score on its own; the pooled runs
    are merged pairwise whenever the newest is at least half the size of the
    one before it (the merge rule of timsort's run stack), so at most
    ~log2(rows / chunk) runs are held and every pooled row takes part in
    O(log) merges. Pooling equal scores commutes with every other pooling
    (docs/design.md), so the result is the table of the whole partition.
    """

    def __init__(self) -> None:
        self.runs: list[DistinctTable] = []

    def add(self, table: DistinctTable) -> None:
        if not len(table):
            return
        self.runs.append(table)
        while len(self.runs) > 1 and 2 * len(self.runs[-1]) >= len(self.runs[-2]):
            last = self.runs.pop()
            self.runs[-1] = merge_tables([self.runs[-1], last])

    def table(self) -> DistinctTable:
        return merge_tables(self.runs)


def chunks(batches: Iterator[pa.RecordBatch], rows: int = CHUNK_ROWS) -> Iterator[pa.Table]:
    """The partition's non-empty batches gathered into tables of at least ``rows`` rows."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(pending)
            pending, count = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def add_stats(total: dict[str, Any], part: dict[str, Any]) -> None:
    """Add one chunk's validation counts and sums to the partition's."""
    for key, value in part.items():
        if key == "problems":
            total["problems"].update(value)
        else:
            total[key] += value


def partition_runner(fn: Callable[[DistinctTable], Any], mode: str, columns: dict[str, str],
                   finite_scores: bool, problem_keys: list) -> Callable:
    """The function each range partition runs (shipped to executors by cloudpickle).

    The partition's rows are pooled chunk by chunk (:class:`PooledRuns`), so
    a partition holding a hot score (say 40% of all rows with the same
    default score) needs memory for one chunk and its distinct scores, not
    for its rows.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        stats: dict[str, Any] = {"problems": Counter(), "rows": 0, "invalid": 0, "n_rows": 0,
                                 "weight_total": 0.0, "sum_wyy": 0.0}
        runs = PooledRuns()
        pool = _raw_table if mode == "raw" else _combined_table
        for data in chunks(batches):
            table, counts = pool(data)
            add_stats(stats, counts)
            runs.add(table)
            del data
        table = runs.table()
        result = fn(table) if len(table) else None
        yield summary_batch(stats, not len(table), result)

    def _raw_table(data: pa.Table) -> tuple[DistinctTable, dict[str, Any]]:
        arrays, text = role_arrays(data, columns)
        return pool_valid_rows(arrays, text, columns, finite_scores)

    def _combined_table(data: pa.Table) -> tuple[DistinctTable, dict[str, Any]]:
        col = {name: data.column(name).to_numpy(zero_copy_only=False) for name in
               data.column_names}
        problems: Counter = Counter()
        for i, key in enumerate(problem_keys):
            k = int(col[f"_p{i}"].sum())
            if k:
                problems[key] += k
        live = col["n"] > 0
        order = np.argsort(col["s"][live], kind="stable")
        score = col["s"][live][order] + 0.0  # -0.0 is 0.0
        # After groupBy(score) the scores are distinct; rows that skipped it
        # (scores outside the hot list) may tie and are pooled here.
        starts = (np.flatnonzero(np.concatenate(([True], score[1:] != score[:-1])))
                  if len(score) else np.zeros(0, np.int64))

        def pooled(name: str) -> np.ndarray:
            values = col[name][live][order]
            return values if len(starts) == len(score) else np.add.reduceat(values, starts)

        table = DistinctTable(score[starts], pooled("W"), pooled("Y"),
                              pooled("n").astype(np.int64), pooled("ysum"),
                              bool(col["nonbinary"].sum() == 0))
        return table, {"problems": problems, "rows": int(col["rows"].sum()),
                       "invalid": int(col["invalid"].sum()), "n_rows": int(table.count.sum()),
                       "weight_total": float(table.weight.sum()),
                       "sum_wyy": float(col["wyy"].sum())}

    return run
