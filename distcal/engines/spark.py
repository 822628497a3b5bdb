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
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.distinct import DistinctTable, estimate_distinct
from ..core.partition import add_up, pool_valid_rows
from ..core.validate import RowChecker, rules
from ..errors import DataError

__all__ = ["open_ranges", "transform", "SparkRanges"]



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
    """One double column per role (null for null/text) and a text flag per text column.

    Integer and boolean labels travel as 4-byte floats (exact for 0/1, and
    any integer beyond that is outside [0, 1] either way): a quarter less to
    shuffle and to hand to Python.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in df.schema.fields}
    cols = []
    for role, name in columns.items():
        small = role == "label" and isinstance(fields[name], (T.IntegralType, T.BooleanType))
        cols.append(F.expr(f"try_cast({_q(name)} AS {'FLOAT' if small else 'DOUBLE'})")
                    .alias(role))
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


class SparkRanges:
    """Ordered score ranges of a Spark DataFrame (see ``MapRanges``)."""

    def __init__(self, df: Any, columns: dict[str, str | None], *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1, n_ranges: int | None = None,
                 combine: bool | str = "auto", sample_rows: int = 50_000):
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
        """Combine when the scores have at most ~250k distinct values.

        Measured at 1e7 rows (bench/spark_isotonic.py, RESULTS.md): with
        962 / 9.3k / 87k distinct scores the combine cut the fit from
        3.2 / 3.5 / 3.6 s to 2.0 / 1.3 / 2.3 s; with 940k it cost 4.2 s
        instead of 3.1 s. The distinct count is estimated from the first
        ``sample_rows`` rows (a head, no pass over the data) with the
        estimator of ``distcal.core.distinct.estimate_distinct``; a head of
        sorted data shows fewer distinct values only when ties are heavy.
        """
        from pyspark.sql import functions as F

        row = (prepared.select(self.score_role).limit(sample_rows)
               .agg(F.count(F.lit(1)).alias("m"), F.countDistinct(self.score_role).alias("d"))
               .collect()[0])
        m, d = int(row["m"]), int(row["d"])
        if m == 0 or d >= m:
            return False
        return estimate_distinct(10**15, m, d) <= 250_000

    def map(self, fn: Callable[[DistinctTable], Any]) -> list:
        runner = _run_partition(fn, "combined" if self.combined else "raw", self.columns,
                                self.finite_scores, self.problem_keys)
        rows = _with_arrow_batches(self.ranged.sparkSession, lambda: self.ranged.mapInArrow(
            runner, "pid long, payload binary").collect())
        parts = [pickle.loads(r["payload"]) for r in sorted(rows, key=lambda r: r["pid"])]
        if not self.checked:
            self._check([p["stats"] for p in parts])
        return [p["result"] for p in parts if not p["empty"]]

    def _check(self, stats: list[dict]) -> None:
        totals = add_up(stats, self.columns, on_invalid=self.on_invalid,
                        finite_scores=self.finite_scores)
        self.n_rows, self.weight_total = totals.n_rows, totals.weight_total
        self.dropped_rows, self.sum_wyy = totals.dropped_rows, totals.sum_wyy
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


def _with_arrow_batches(spark: Any, action: Callable[[], Any], rows: int = 100_000) -> Any:
    """Run ``action`` with Arrow batches of ``rows`` unless the user chose a size.

    A range partition is concatenated in Python anyway; 100k-row batches
    instead of Spark's 10k cut the fit by ~8% at 1e7 rows.
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


def _default_ranges(df: Any) -> int:
    """Twice the default parallelism, at least 8 (8 was best on 2 cores, PERFORMANCE.md)."""
    try:
        return max(8, 2 * df.sparkSession.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        return 8


def as_spark(data: Any) -> Any:
    """A Spark DataFrame for ``data`` (engine="spark" forced on local data).

    Paths are read by the active session (so any Hadoop-compatible path
    works); pandas and Arrow tables are handed to it.
    """
    from ..engines import engine_of
    from ..io import is_path

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


def open_ranges(data: Any, columns: dict[str, str | None], **opts: Any) -> SparkRanges:
    return SparkRanges(as_spark(data), columns, **opts)


def evaluate_many(df: Any, columns: dict[str, str | None], prob_cols: list[str], *,
                  on_invalid: str, report: Callable[[Any, str], Any], **opts: Any) -> dict:
    """One report per probability column; a row invalid in any column is invalid for all.

    One aggregation counts every problem (the same message as locally);
    the valid rows are then persisted and range-partitioned once per column.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cols = {r: c for r, c in columns.items() if c is not None}
    df = as_spark(df)
    kinds = _check_schema(df, cols)
    prepared = _prepared(df, cols, kinds)
    flags = _problem_flags(cols, kinds, False)
    bad = F.lit(False)
    for _, _, cond in flags:
        bad = bad | cond
    row = prepared.agg(F.count(F.lit(1)).alias("rows"),
                       F.sum(F.when(bad, 1).otherwise(0)).alias("invalid"),
                       *[F.sum(F.when(cond, 1).otherwise(0)).alias(f"_p{i}")
                         for i, (_, _, cond) in enumerate(flags)]).collect()[0]
    checker = RowChecker(cols)
    for i, (role, problem, _) in enumerate(flags):
        if row[f"_p{i}"]:
            checker.problems[(role, problem)] += int(row[f"_p{i}"])
    checker.rows_seen, checker.rows_invalid = int(row["rows"]), int(row["invalid"] or 0)
    checker.raise_if_invalid(on_invalid)
    clean = prepared.where(~bad).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        out = {}
        rest = {r: r for r in cols if not r.startswith("prob:")}
        for c in prob_cols:
            one = clean.select(F.col(_q(f"prob:{c}")).alias("_prob"), *rest)
            with SparkRanges(one, {"prob": "_prob", **rest}, on_invalid="raise",
                             **opts) as ranges:
                rep = report(ranges, c)
            rep.dropped_rows = checker.rows_invalid
            out[c] = rep
        return out
    finally:
        clean.unpersist()


def transform(model: Any, df: Any, score_col: str, output_col: str) -> Any:
    """Add ``output_col`` = model.predict(score_col), lazily, inside the JVM.

    The map is small (knots or bin edges), so it is evaluated with Spark's
    own operators: Bucketizer's binary search over the knots, the knot
    values as constant arrays indexed by the bucket, and the interpolation
    as a SQL expression (``np.interp``'s formula); Platt's sigmoid is one
    expression. No Python
    worker touches the rows, which keeps transform + write as fast as
    MLlib's. The output keeps every input column (an existing
    ``output_col`` is replaced) and adds a double column.
    """
    from pyspark.sql import functions as F

    fields = {f.name: f.dataType for f in df.schema.fields}
    if score_col not in fields:
        raise DataError(f"column '{score_col}' (score) not found; the input has columns "
                        f"{list(fields)}")
    if _kind(fields[score_col]) != "number":
        raise DataError(f"column '{score_col}' (score) has type "
                        f"{fields[score_col].simpleString()}; expected numbers")
    keep = [F.col(_q(f.name)) for f in df.schema.fields if f.name != output_col]
    s = F.col(_q(score_col)).cast("double")
    if model.method == "sigmoid":
        a, b = float(model.params["a"]), float(model.params["b"])
        prob = F.lit(1.0) / (F.lit(1.0) + F.exp(s * F.lit(a) + F.lit(b)))
        return df.select(*keep, prob.alias(output_col))
    return _transform_by_table(model, df, s, keep, output_col)


def _knot_table(model: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """(sorted split points, values, how to read them) for the piecewise map."""
    if model.method == "histogram":
        edges = np.asarray(model.params["edges"], dtype=np.float64)
        return edges, np.asarray(model.params["bin_prob"], dtype=np.float64), "bins"
    b = model._blocks
    if model.params.get("interpolation", "linear") == "step":
        return b.score_min, b.prob, "step"
    x = np.concatenate([b.score_min, b.score_max])
    y = np.concatenate([b.prob, b.prob])
    finite = np.isfinite(x)
    xs, first = np.unique(x[finite], return_index=True)
    return xs, y[finite][first], "linear"


def _java_doubles(spark: Any, values: Any) -> Any:
    """A Java double[] of ``values`` in three py4j calls, whatever the length.

    (py4j converts a Python list element by element: 0.3 s for 1000 values.)
    """
    sc = spark.sparkContext
    raw = bytearray(np.asarray(values, dtype=">f8").tobytes())
    arr = sc._gateway.new_array(sc._jvm.double, len(values))
    sc._jvm.java.nio.ByteBuffer.wrap(raw).asDoubleBuffer().get(arr)
    return arr


def _const_array(spark: Any, values: list[float]) -> Any:
    """A constant array<double> column: one literal, cheap to build and to analyse."""
    from pyspark.sql import functions as F

    try:
        from pyspark.sql.column import Column

        jvm = spark.sparkContext._jvm
        return Column(jvm.org.apache.spark.sql.functions.lit(_java_doubles(spark, values)))
    except AttributeError:  # Spark Connect: the same literal as SQL text
        return F.expr("array(" + ", ".join(f"{v!r}D" for v in values) + ")")


def _bucketize(df: Any, splits: list[float], col: str) -> Any:
    """Spark ML's Bucketizer (binary search in the JVM) adding "_b" from ``col``.

    The splits go to the JVM as one byte array: pyspark's Bucketizer sends a
    list element by element over py4j, which took 0.3 s for 1000 splits.
    """
    from pyspark.sql import DataFrame

    try:
        jvm = df.sparkSession.sparkContext._jvm
        jb = (jvm.org.apache.spark.ml.feature.Bucketizer()
              .setSplits(_java_doubles(df.sparkSession, splits)).setInputCol(col)
              .setOutputCol("_b").setHandleInvalid("keep"))
        return DataFrame(jb.transform(df._jdf), df.sparkSession)
    except AttributeError:  # Spark Connect: no JVM on the client
        from pyspark.ml.feature import Bucketizer

        return Bucketizer(splits=splits, inputCol=col, outputCol="_b",
                          handleInvalid="keep").transform(df)


def _transform_by_table(model: Any, df: Any, s: Any, keep: list, output_col: str) -> Any:
    """Piecewise maps: Bucketizer finds the piece, one constant array lookup its line.

    Each bucket carries (x0, y0, slope); the value is ``slope * (s - x0) + y0``
    (``np.interp``'s formula, slope computed by numpy the same way) or the
    constant y0 where the slope is 0 (ends, steps, bins).
    """
    from pyspark.sql import functions as F

    xs, ys, kind = _knot_table(model)
    blocks = model._blocks
    nan = F.lit(float("nan"))
    base = df.select(*keep, s.alias("_s"))
    col_in = "_s"
    if kind == "bins":
        # searchsorted(edges[1:-1], s) puts s on an inner edge in the lower bin:
        # intervals (u_{j-1}, u_j] over the distinct inner edges u, which is
        # Bucketizer's [a, b) on -s. Interval j maps to the bin searchsorted gives.
        inner = xs[1:-1]
        u = np.unique(inner)
        interval_bin = np.append(np.searchsorted(inner, u), inner.shape[0])
        splits = [-np.inf, *(-u[::-1]).tolist(), np.inf]
        base = base.withColumn("_neg", -F.col("_s"))
        col_in, m = "_neg", u.shape[0]
        pieces = [(0.0, float(ys[interval_bin[m - k]]), 0.0) for k in range(m + 1)]
    elif kind == "step":
        # value of the highest block with score_min <= s; the lowest below the range
        splits = [-np.inf, *xs[1:].tolist(), np.inf]
        pieces = [(0.0, float(y), 0.0) for y in ys]
    else:
        if xs.shape[0] == 0:  # every fitted score was infinite
            p = F.when(F.col("_s") > 0, F.lit(float(blocks.prob[-1]))).otherwise(
                F.lit(float(blocks.prob[0])))
            return base.select(*keep, F.when(F.isnan("_s"), nan).otherwise(p)
                               .alias(output_col))
        splits = [-np.inf, *xs.tolist(), np.inf]
        # bucket k in 1..n-1 lies between knots k-1 and k; 0 and n are the clipped ends
        slopes = (ys[1:] - ys[:-1]) / (xs[1:] - xs[:-1])
        pieces = [(0.0, float(ys[0]), 0.0)]
        pieces += [(float(x0), float(y0), float(sl))
                   for x0, y0, sl in zip(xs[:-1], ys[:-1], slopes)]
        pieces.append((0.0, float(ys[-1]), 0.0))
    bucketed = _bucketize(base, splits, col_in)
    # The pieces as constant arrays indexed by the bucket.
    i = F.col("_b").cast("int") + F.lit(1)
    x0, y0, sl = (F.try_element_at(_const_array(df.sparkSession, [pc[j] for pc in pieces]), i)
                  for j in range(3))
    sv = F.col("_s")
    p = F.when(sl == 0.0, y0).otherwise(sl * (sv - x0) + y0)
    if kind == "linear":
        # a block holding only -inf (or +inf) has no finite knot
        if blocks.score_max[0] == -np.inf:
            p = F.when(sv == float("-inf"), F.lit(float(blocks.prob[0]))).otherwise(p)
        if blocks.score_min[-1] == np.inf:
            p = F.when(sv == float("inf"), F.lit(float(blocks.prob[-1]))).otherwise(p)
    p = F.when(sv.isNull(), F.lit(None).cast("double")).when(F.isnan(sv), nan).otherwise(p)
    return bucketed.select(*keep, p.alias(output_col))
