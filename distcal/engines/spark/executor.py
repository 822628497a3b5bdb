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

from ...core.distinct import DistinctTable
from ...core.partition import pool_valid_rows

__all__ = ["partition_runner", "RESULT_SCHEMA", "task_rows", "role_arrays", "summary_batch"]

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


def partition_runner(fn: Callable[[DistinctTable], Any], mode: str, columns: dict[str, str],
                   finite_scores: bool, problem_keys: list) -> Callable:
    """The function each range partition runs (shipped to executors by cloudpickle)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        data, stats = task_rows(batches)
        table = DistinctTable.empty()
        if data is not None:
            if mode == "raw":
                table = _raw_table(data, stats)
            else:
                table = _combined_table(data, stats)
        result = fn(table) if len(table) else None
        yield summary_batch(stats, not len(table), result)

    def _raw_table(data: pa.Table, stats: dict) -> DistinctTable:
        arrays, text = role_arrays(data, columns)
        table, counts = pool_valid_rows(arrays, text, columns, finite_scores)
        stats.update(counts)
        return table

    def _combined_table(data: pa.Table, stats: dict) -> DistinctTable:
        col = {name: data.column(name).to_numpy(zero_copy_only=False) for name in
               data.column_names}
        for i, key in enumerate(problem_keys):
            k = int(col[f"_p{i}"].sum())
            if k:
                stats["problems"][key] += k
        stats["rows"] = int(col["rows"].sum())
        stats["invalid"] = int(col["invalid"].sum())
        live = col["n"] > 0
        order = np.argsort(col["s"][live], kind="stable")
        table = DistinctTable(col["s"][live][order] + 0.0, col["W"][live][order],
                              col["Y"][live][order], col["n"][live][order].astype(np.int64),
                              col["ysum"][live][order], bool(col["nonbinary"].sum() == 0))
        stats["n_rows"] = int(table.count.sum())
        stats["weight_total"] = float(table.weight.sum())
        stats["sum_wyy"] = float(col["wyy"].sum())
        return table

    return run
