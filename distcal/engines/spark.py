"""The Spark engine: range partitions by score, the core on Arrow batches.

The pipeline of ARCHITECTURE.md on a Spark DataFrame:

1. Columns are cast to double in Spark SQL (``try_cast``, so text gives
   null and a flag instead of an error under ANSI mode).
2. Optionally a map-side combine: ``groupBy(score)`` with conditional sums
   (weight, weighted positives, counts, and the count of every validation
   problem), which shrinks the shuffle when scores repeat. Chosen
   automatically from a sample (rows per distinct score >= 3), as measured
   in bench/spark_isotonic.py.
3. ``repartitionByRange(k, score)``: Spark's own sampler and range
   partitioner; equal scores land in one partition, partition i holds a
   contiguous score range below partition i + 1.
4. One ``mapInArrow`` per pass: each range partition validates its rows
   (the same rules and messages as the local engine), pools equal scores
   into a distinct-score table, calls the core function it was given, and
   returns one row: its partition index and the pickled (small) result.
   Only those rows reach the driver; the core merges them in score order.

Validation problems are counted in the first pass and raised as
``DataError`` on the driver before anything is written. Methods that need
several passes (Platt's Newton steps, quantile bins) get the range-
partitioned rows persisted between passes.
"""

from __future__ import annotations

import pickle
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.distinct import DistinctTable, estimate_distinct, pool_ties
from ..core.validate import RowChecker, rules
from ..errors import DataError

__all__ = ["open_ranges", "transform", "SparkRanges"]

_STAT_ROLES = ("score", "prob", "label", "loss", "weight")


def _kind(dtype: Any) -> str:
    from pyspark.sql import types as T

    if isinstance(dtype, (T.NumericType, T.BooleanType, T.NullType)):
        return "number"
    if isinstance(dtype, (T.StringType, T.VarcharType, T.CharType)):
        return "text"
    return "other"


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _check_schema(df: Any, columns: dict[str, str]) -> dict[str, str]:
    fields = {f.name: f.dataType for f in df.schema.fields}
    kinds = {}
    for role, name in columns.items():
        if name not in fields:
            raise DataError(f"column '{name}' ({role}) not found; the input has columns "
                            f"{list(fields)}")
        kinds[role] = _kind(fields[name])
        if kinds[role] == "other":
            raise DataError(f"column '{name}' ({role}) has type {fields[name].simpleString()}; "
                            "expected numbers")
    return kinds


def _prepared(df: Any, columns: dict[str, str], kinds: dict[str, str]) -> Any:
    """One double column per role (null for null/text) and a text flag per text column."""
    from pyspark.sql import functions as F

    cols = []
    for role, name in columns.items():
        cols.append(F.expr(f"try_cast({_q(name)} AS DOUBLE)").alias(role))
        if kinds[role] == "text":
            cols.append(F.expr(f"{_q(name)} IS NOT NULL AND try_cast({_q(name)} AS DOUBLE) "
                               "IS NULL").alias(f"_text_{role}"))
    return df.select(*cols)


def _problem_flags(columns: dict[str, str], kinds: dict[str, str],
                   finite_scores: bool) -> list[tuple[str, str, Any]]:
    """The validation rules as Spark SQL predicates over the prepared columns."""
    from pyspark.sql import functions as F

    out = []
    for role in columns:
        v = F.col(role)
        text = F.col(f"_text_{role}") if kinds[role] == "text" else F.lit(False)
        for problem, kind in rules(role, finite_scores):
            if kind == "text":
                if kinds[role] != "text":
                    continue
                cond = text
            elif kind == "null":
                cond = (v.isNull() | F.isnan(v)) & ~text
            elif kind == "inf":
                cond = F.abs(v) == float("inf")
            elif kind == "range01":
                cond = (v < 0.0) | (v > 1.0)
            else:  # negative
                cond = v < 0.0
            out.append((role, problem, F.coalesce(cond, F.lit(False))))
    return out


def _combined(prepared: Any, columns: dict[str, str], kinds: dict[str, str],
              finite_scores: bool, score_role: str, label_role: str) -> tuple[Any, list]:
    """Map-side combine: one row per distinct score with sums and problem counts."""
    from pyspark.sql import functions as F

    flags = _problem_flags(columns, kinds, finite_scores)
    bad = F.lit(False)
    for _, _, cond in flags:
        bad = bad | cond
    w = F.col("weight") if "weight" in columns else F.lit(1.0)
    y = F.col(label_role)
    live = ~bad & (w > 0)

    def s(expr: Any) -> Any:
        return F.sum(F.when(live, expr).otherwise(F.lit(0.0)))

    aggs = [s(w).alias("W"), s(w * y).alias("Y"),
            F.sum(F.when(live, 1).otherwise(0)).cast("long").alias("n"),
            s(y).alias("ysum"),
            F.sum(F.when(live & (y != 0.0) & (y != 1.0), 1).otherwise(0)).alias("nonbinary"),
            s(w * y * y).alias("wyy"), F.count(F.lit(1)).alias("rows"),
            F.sum(F.when(bad, 1).otherwise(0)).alias("invalid")]
    aggs += [F.sum(F.when(cond, 1).otherwise(0)).alias(f"_p{i}")
             for i, (_, _, cond) in enumerate(flags)]
    # NaN and null scores form groups of their own (all invalid rows).
    grouped = prepared.groupBy(F.col(score_role).alias("s")).agg(*aggs)
    return grouped, [(role, problem) for role, problem, _ in flags]


def _run_partition(fn: Callable[[DistinctTable], Any], mode: str, columns: dict[str, str],
                   finite_scores: bool, problem_keys: list) -> Callable:
    """The function each range partition runs (shipped to executors by cloudpickle)."""
    score_role = "prob" if "prob" in columns else "score"
    label_role = "loss" if "loss" in columns else "label"

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        batches = [b for b in batches if b.num_rows]
        stats: dict[str, Any] = {"problems": Counter(), "rows": 0, "invalid": 0, "n_rows": 0,
                                 "weight_total": 0.0, "sum_wyy": 0.0}
        table = DistinctTable.empty()
        if batches:
            data = pa.Table.from_batches(batches)
            if mode == "raw":
                table = _raw_table(data, stats)
            else:
                table = _combined_table(data, stats)
        result = fn(table) if len(table) else None
        payload = pickle.dumps({"stats": stats, "empty": not len(table), "result": result},
                               protocol=pickle.HIGHEST_PROTOCOL)
        yield pa.RecordBatch.from_pydict({"pid": [TaskContext.get().partitionId()],
                                          "payload": [payload]},
                                         schema=pa.schema([("pid", pa.int64()),
                                                           ("payload", pa.binary())]))

    def _raw_table(data: pa.Table, stats: dict) -> DistinctTable:
        arrays, text = {}, {}
        for role in columns:
            arrays[role] = data.column(role).to_numpy(zero_copy_only=False).astype(np.float64)
            if f"_text_{role}" in data.column_names:
                text[role] = data.column(f"_text_{role}").to_numpy(zero_copy_only=False)
        checker = RowChecker(dict(columns), finite_scores=finite_scores)
        ok = checker.check(arrays, text)
        stats["problems"].update(checker.problems)
        stats["rows"] = checker.rows_seen
        stats["invalid"] = checker.rows_invalid
        if ok is not None:
            arrays = {k: v[ok] for k, v in arrays.items()}
        w = arrays.get("weight")
        if w is not None:
            keep = w > 0
            arrays = {k: v[keep] for k, v in arrays.items()}
            w = arrays["weight"]
        s, y = arrays[score_role], arrays[label_role]
        stats["n_rows"] = int(s.shape[0])
        stats["weight_total"] = float(w.sum()) if w is not None else float(s.shape[0])
        if score_role == "prob":
            stats["sum_wyy"] = float(np.dot(y * w, y) if w is not None else np.dot(y, y))
        return pool_ties(s, y, w)

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


class SparkRanges:
    """Ordered score ranges of a Spark DataFrame (see ``MapRanges``)."""

    def __init__(self, df: Any, columns: dict[str, str | None], *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1, n_ranges: int | None = None,
                 combine: bool | str = "auto", sample_rows: int = 200_000):
        self.df = df
        self.columns = {r: c for r, c in columns.items() if c is not None}
        self.on_invalid = on_invalid
        self.finite_scores = finite_scores
        self.kinds = _check_schema(df, self.columns)
        self.score_role = "prob" if "prob" in self.columns else "score"
        self.label_role = "loss" if "loss" in self.columns else "label"
        prepared = _prepared(df, self.columns, self.kinds)
        if combine == "auto":
            combine = self._ties_pay(prepared, sample_rows)
        self.combined = bool(combine)
        k = int(n_ranges or _default_ranges(df))
        if self.combined:
            grouped, self.problem_keys = _combined(prepared, self.columns, self.kinds,
                                                   finite_scores, self.score_role,
                                                   self.label_role)
            self.ranged = grouped.repartitionByRange(k, "s")
        else:
            self.problem_keys = []
            self.ranged = prepared.repartitionByRange(k, self.score_role)
        self.persisted = passes > 1
        if self.persisted:
            from pyspark import StorageLevel

            self.ranged = self.ranged.persist(StorageLevel.MEMORY_AND_DISK)
        self.checked = False
        self.n_rows = 0
        self.weight_total = 0.0
        self.dropped_rows = 0
        self.sum_wyy = float("nan")

    def _ties_pay(self, prepared: Any, sample_rows: int) -> bool:
        """Estimate rows per distinct score from a sample: combine when >= 3."""
        from pyspark.sql import functions as F

        n = prepared.count()
        if n == 0:
            return False
        frac = min(1.0, sample_rows / n)
        row = (prepared.sample(False, frac, seed=17)
               .agg(F.count(F.lit(1)).alias("m"), F.countDistinct(self.score_role).alias("d"))
               .collect()[0])
        return n / estimate_distinct(n, int(row["m"]), int(row["d"])) >= 3.0

    def map(self, fn: Callable[[DistinctTable], Any]) -> list:
        runner = _run_partition(fn, "combined" if self.combined else "raw", self.columns,
                                self.finite_scores, self.problem_keys)
        rows = self.ranged.mapInArrow(runner, "pid long, payload binary").collect()
        parts = [pickle.loads(r["payload"]) for r in sorted(rows, key=lambda r: r["pid"])]
        if not self.checked:
            self._check([p["stats"] for p in parts])
        return [p["result"] for p in parts if not p["empty"]]

    def _check(self, stats: list[dict]) -> None:
        checker = RowChecker(self.columns, finite_scores=self.finite_scores)
        for st in stats:
            checker.problems.update(st["problems"])
            checker.rows_seen += st["rows"]
            checker.rows_invalid += st["invalid"]
        checker.raise_if_invalid(self.on_invalid)
        self.n_rows = sum(st["n_rows"] for st in stats)
        if self.n_rows == 0:
            raise DataError(f"no rows with weight > 0 to use ({checker.rows_seen} rows read, "
                            f"{checker.rows_invalid} invalid)")
        self.weight_total = float(sum(st["weight_total"] for st in stats))
        self.dropped_rows = checker.rows_invalid
        if self.score_role == "prob":
            self.sum_wyy = float(sum(st["sum_wyy"] for st in stats))
        self.checked = True

    def spearman_rows(self) -> bool:
        """Sign of Spearman's rho over the valid rows (labels not all 0/1), by Spark ML."""
        from pyspark.ml.feature import VectorAssembler
        from pyspark.ml.stat import Correlation
        from pyspark.sql import functions as F

        prepared = _prepared(self.df, self.columns, self.kinds)
        flags = _problem_flags(self.columns, self.kinds, self.finite_scores)
        bad = F.lit(False)
        for _, _, cond in flags:
            bad = bad | cond
        live = prepared.where(~bad)
        if "weight" in self.columns:
            live = live.where(F.col("weight") > 0)
        vec = VectorAssembler(inputCols=[self.score_role, self.label_role],
                              outputCol="_v").transform(live)
        rho = Correlation.corr(vec, "_v", "spearman").head()[0][0, 1]
        return not (rho < 0)

    def close(self) -> None:
        if self.persisted:
            self.ranged.unpersist()

    def __enter__(self) -> SparkRanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _default_ranges(df: Any) -> int:
    """Twice the default parallelism, at least 8 (8 was best on 2 cores, PERFORMANCE.md)."""
    try:
        return max(8, 2 * df.sparkSession.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        return 8


def open_ranges(data: Any, columns: dict[str, str | None], **opts: Any) -> SparkRanges:
    return SparkRanges(data, columns, **opts)


def transform(model: Any, df: Any, score_col: str, output_col: str) -> Any:
    """Add ``output_col`` = model.predict(score_col), lazily, per Arrow batch.

    The model (small) is broadcast once; the output keeps every input column
    (an existing ``output_col`` is replaced) and adds a double column.
    """
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    if score_col not in fields:
        raise DataError(f"column '{score_col}' (score) not found; the input has columns "
                        f"{list(fields)}")
    if _kind(fields[score_col]) != "number":
        raise DataError(f"column '{score_col}' (score) has type "
                        f"{fields[score_col].simpleString()}; expected numbers")
    keep = [f for f in df.schema.fields if f.name != output_col]
    schema = T.StructType(keep + [T.StructField(output_col, T.DoubleType(), True)])
    try:
        shipped = df.sparkSession.sparkContext.broadcast(model)
    except Exception:  # Spark Connect: the closure carries the model
        shipped = None
    local_model = model if shipped is None else None
    names = [f.name for f in keep]

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        m = shipped.value if shipped is not None else local_model
        for b in batches:
            s = pc.cast(b.column(score_col), pa.float64()).to_numpy(zero_copy_only=False)
            arrays = [b.column(n) for n in names] + [pa.array(m.predict(s), type=pa.float64())]
            yield pa.RecordBatch.from_arrays(arrays, names=names + [output_col])

    return df.mapInArrow(apply, schema)


def session_python() -> str:
    """The interpreter executors should run: this one (same distcal, numpy, scipy)."""
    return sys.executable
