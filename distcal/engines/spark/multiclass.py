"""Multiclass rows of a Spark DataFrame: validated in SQL, fitted by passes, applied in the JVM.

* The scores become one ``array<double>`` column ``_z``: a vector column
  (``ArrayType`` of numbers, or a pyspark.ml ``VectorUDT`` through
  ``pyspark.ml.functions.vector_to_array``, both in the JVM) or
  ``score_cols`` assembled with ``array(...)``. K is the most common vector
  length (one small ``groupBy(size)``), as locally.
* One aggregation counts every row problem with the local engine's words
  (:func:`distcal.multiclass.fit_rows`), the valid rows with weight > 0,
  their weight and, for temperature scaling, whether the row set looks like
  probabilities (scikit-learn's rule, :mod:`distcal.core.multiclass`).
* Temperature scaling: the valid rows are persisted; every Newton step is
  one ``mapInArrow`` returning each partition's sums of the loss and its
  first two derivatives (:func:`distcal.core.temperature.temperature_sums`),
  added on the driver.
* One-vs-rest: the valid rows are exploded to (class, score, label == class,
  weight) and range-partitioned ONCE on (class, score) with Spark's own
  ``repartitionByRange``; within a partition each class's rows are a
  contiguous score range of that class, below those of the next partition.
  One ``mapInArrow`` pass pools every (partition, class) and runs each
  class's range function, so all K fits share their passes
  (:func:`distcal.core.lockstep.run_in_lockstep`).
The transform is in :mod:`.multiclass_transform`.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.distinct import DistinctTable, pool_ties
from ...core.multiclass import to_logits
from ...core.rows import problems_message
from ...core.temperature import center_logits, temperature_sums
from ...errors import DataError, column_not_found, column_type
from ...logs import log, phase
from .executor import RESULT_SCHEMA
from .schema import column_kind, common_length, is_vector_udt, quote, vector_array
from .session import default_ranges, with_arrow_batches

__all__ = ["SparkMulticlassRows", "score_array", "looks_like_probabilities_sql", "is_vector_udt"]

_NO_ROWS = "no rows to calibrate (after dropping invalid and zero-weight rows)"


def score_array(df: Any, score_col: str | None, score_cols: list[str] | None,
                 role: str = "score") -> tuple[Any, list[Any], int | None]:
    """(the scores as one array<double> column, text flags per score column, K or None)."""
    from pyspark.sql import functions as F

    fields = {f.name: f.dataType for f in df.schema.fields}
    if score_cols is not None:
        parts, texts = [], []
        for c in score_cols:
            if c not in fields:
                raise column_not_found(c, role, fields)
            kind = column_kind(fields[c])
            if kind == "other":
                raise column_type(c, role, fields[c].simpleString())
            parts.append(F.expr(f"try_cast({quote(c)} AS DOUBLE)"))
            texts.append(F.expr(f"{quote(c)} IS NOT NULL AND try_cast({quote(c)} AS DOUBLE) "
                                "IS NULL") if kind == "text" else None)
        return F.array(*parts), texts, len(score_cols)
    assert score_col is not None
    if score_col not in fields:
        raise column_not_found(score_col, role, fields)
    dtype = fields[score_col]
    arr = vector_array(df, score_col)
    if arr is not None:
        return arr, [], None
    raise DataError(f"column '{score_col}' has type {dtype.simpleString()}; expected a vector "
                    "(list) of numbers per row, or pass one column per class as score_cols")


def _number(df: Any, name: str, role: str) -> tuple[Any, Any]:
    """(try_cast to double, text flag or False) of a scalar column."""
    from pyspark.sql import functions as F

    fields = {f.name: f.dataType for f in df.schema.fields}
    if name not in fields:
        raise column_not_found(name, role, fields)
    kind = column_kind(fields[name])
    if kind == "other":
        raise column_type(name, role, fields[name].simpleString())
    value = F.expr(f"try_cast({quote(name)} AS DOUBLE)")
    text = (F.expr(f"{quote(name)} IS NOT NULL AND try_cast({quote(name)} AS DOUBLE) IS NULL")
            if kind == "text" else F.lit(False))
    return value, text


def _common_length(df: Any) -> int:
    """The most common length of the non-null ``_z`` vectors (0 if none), ties to the shortest."""
    from pyspark.sql import functions as F

    rows = (df.where(F.col("_z").isNotNull()).groupBy(F.size("_z").alias("n")).count()
            .collect())
    return common_length({int(r["n"]): int(r["count"]) for r in rows})


def problem_conditions(score_col: str | None, score_cols: list[str] | None, label_col: str,
                       weight_col: str | None, k_cols: int, n_classes: int, finite: bool,
                       texts: list[Any], probs: bool = False) -> list[tuple[str, str, Any]]:
    """The checks of :func:`distcal.multiclass.fit_rows`, in its order, as SQL predicates.

    Over the columns ``_z`` (array<double>), ``_y``/``_yt`` (label, text
    flag) and ``_w``/``_wt`` (weight).
    """
    from pyspark.sql import functions as F

    def isnan(c: Any) -> Any:
        return c.isNull() | F.isnan(c)

    out: list[tuple[str, str, Any]] = []
    z = F.col("_z")
    if score_cols is not None:
        for i, c in enumerate(score_cols):
            v = z[i]
            text = texts[i] if texts[i] is not None else F.lit(False)
            out.append((c, "are text, not numbers", text))
            out.append((c, "are null or NaN", isnan(v) & ~text))
            if finite:
                out.append((c, "are infinite (this method needs finite scores)",
                            F.abs(v) == float("inf")))
        if probs:
            for i, c in enumerate(score_cols):
                out.append((c, "are outside [0, 1]",
                            ~F.isnan(z[i]) & ((z[i] < 0.0) | (z[i] > 1.0))))
    else:
        assert score_col is not None
        ok = z.isNotNull() & (F.size(z) == k_cols)
        out.append((score_col, "are null", z.isNull()))
        out.append((score_col, f"have a length other than {k_cols} (ragged vectors)",
                    z.isNotNull() & (F.size(z) != k_cols)))
        out.append((score_col, "contain NaN or null",
                    ok & F.exists(z, lambda x: x.isNull() | F.isnan(x))))
        if finite:
            out.append((score_col, "contain infinite values (this method needs finite scores)",
                        ok & F.exists(z, lambda x: F.abs(x) == float("inf"))))
        if probs:
            # NaN is above every number in Spark SQL, not so in numpy: excluded
            out.append((score_col, "contain values outside [0, 1]",
                        ok & F.exists(z, lambda x: ~F.isnan(x) & ((x < 0.0) | (x > 1.0)))))
    y, yt = F.col("_y"), F.col("_yt")
    nan = isnan(y) & ~yt
    fraction = ~yt & ~nan & ((F.abs(y) == float("inf")) | (F.rint(y) != y))
    out.append((label_col, "are text, not numbers", yt))
    out.append((label_col, "are null or NaN", nan))
    out.append((label_col, "are not whole numbers (class indices)", fraction))
    out.append((label_col, f"are outside the class indices 0..{n_classes - 1}",
                ~yt & ~nan & ~fraction & ((y < 0.0) | (y > float(n_classes - 1)))))
    if weight_col is not None:
        w, wt = F.col("_w"), F.col("_wt")
        out.append((weight_col, "are text, not numbers", wt))
        out.append((weight_col, "are null or NaN", isnan(w) & ~wt))
        out.append((weight_col, "are infinite", F.abs(w) == float("inf")))
        out.append((weight_col, "are negative", w < 0.0))
    return [(c, p, F.coalesce(cond, F.lit(False))) for c, p, cond in out]


def looks_like_probabilities_sql(z: Any) -> Any:
    """scikit-learn's probability test of one row, as SQL (``looks_like_probabilities``)."""
    from pyspark.sql import functions as F

    in01 = F.forall(z, lambda x: (x >= 0.0) & (x <= 1.0) & ~F.isnan(x))
    total = F.aggregate(z, F.lit(0.0), lambda a, x: a + x)
    return F.coalesce(in01 & (F.abs(total - 1.0) <= 1e-8 + 1e-5), F.lit(False))


class SparkMulticlassRows:
    """The valid multiclass rows of a Spark DataFrame (see ``MulticlassRows``)."""

    def __init__(self, df: Any, *, method: str, score_col: str | None,
                 score_cols: list[str] | None, label_col: str, weight_col: str | None,
                 on_invalid: str, n_ranges: int | None = None, **_: Any):
        from pyspark.sql import functions as F

        self.df = df
        z, texts, k_cols = score_array(df, score_col, score_cols)
        y, yt = _number(df, label_col, "label")
        cols = [z.alias("_z"), y.alias("_y"), yt.alias("_yt")]
        if weight_col is not None:
            w, wt = _number(df, weight_col, "weight")
            cols += [w.alias("_w"), wt.alias("_wt")]
        base = df.select(*cols, *[t.alias(f"_zt{i}") for i, t in enumerate(texts)
                                  if t is not None])
        texts = [F.col(f"_zt{i}") if t is not None else None for i, t in enumerate(texts)]
        if k_cols is None:
            with phase("spark: vector lengths"):
                k_cols = _common_length(base)
        self.k_cols = k_cols
        self.n_classes = 2 if k_cols == 1 else k_cols
        if self.n_classes < 2:
            raise DataError(f"column '{score_col}': no vectors to calibrate (need K >= 2 "
                            "entries)")
        flags = problem_conditions(score_col, score_cols, label_col, weight_col, k_cols,
                                   self.n_classes, method not in ("isotonic", "evaluate"),
                                   texts, probs=method == "evaluate")
        bad = F.lit(False)
        for flag in flags:
            bad = bad | flag[2]
        live = ~bad & (F.col("_w") > 0.0) if weight_col is not None else ~bad
        wcol = F.col("_w") if weight_col is not None else F.lit(1.0)
        aggs = [F.sum(flag[2].cast("long")).alias(f"_p{i}") for i, flag in enumerate(flags)]
        aggs += [F.sum(bad.cast("long")).alias("bad"), F.sum(live.cast("long")).alias("n"),
                 F.sum(F.when(live, wcol)).alias("wt")]
        if method == "temperature" and k_cols >= 2:
            aggs.append(F.min(F.when(live, looks_like_probabilities_sql(F.col("_z"))
                                     .cast("int"))).alias("probs"))
        with phase("spark: checking the multiclass rows"):
            row = base.agg(*aggs).collect()[0]
        items = [(flag[0], flag[1], int(row[f"_p{i}"] or 0)) for i, flag in enumerate(flags)]
        self.dropped_rows = int(row["bad"] or 0)
        if self.dropped_rows and on_invalid == "raise":
            raise DataError(problems_message(items) + " (pass on_invalid='drop' to drop such "
                            "rows)")
        self.n_rows = int(row["n"] or 0)
        if self.n_rows == 0:
            raise DataError(_NO_ROWS)
        self.weight_total = float(row["wt"])
        self.kind = ("probabilities" if method == "temperature" and k_cols >= 2
                     and row["probs"] == 1 else "logits")
        keep = [F.col("_z"), F.col("_y").cast("int").alias("_y")]
        if weight_col is not None:
            keep.append(F.col("_w"))
        self.weighted = weight_col is not None
        self.valid = base.where(live).select(*keep)
        self.n_ranges = int(n_ranges or default_ranges(df))
        self._persisted: list[Any] = []
        log.info("spark: multiclass, K = %d, %d rows used (weight %g), %d dropped",
                 self.n_classes, self.n_rows, self.weight_total, self.dropped_rows)

    # -- temperature scaling -------------------------------------------------
    def temperature_parts(self, beta: float) -> list[np.ndarray]:
        """Per-partition [loss, grad, hess] at ``beta`` (one ``mapInArrow``)."""
        from pyspark import StorageLevel

        if not self._persisted:
            self.valid = self.valid.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted.append(self.valid)
        runner = _temperature_runner(beta, self.kind, self.k_cols, self.weighted)
        with phase("spark: one temperature pass (beta = %.6g)", beta):
            rows = with_arrow_batches(self.valid.sparkSession, lambda: self.valid.mapInArrow(
                runner, RESULT_SCHEMA).collect())
        return [pickle.loads(r["payload"]) for r in rows]

    def map_rows(self, fn: Callable[[np.ndarray, np.ndarray, np.ndarray | None], Any]
                 ) -> list[Any]:
        """``fn(scores, labels, weights)`` on each partition's valid rows (one ``mapInArrow``)."""
        runner = _rows_runner(fn, self.k_cols, self.weighted)
        with phase("spark: one pass over the rows"):
            rows = with_arrow_batches(self.valid.sparkSession, lambda: self.valid.mapInArrow(
                runner, RESULT_SCHEMA).collect())
        return [r for r in (pickle.loads(r["payload"]) for r in rows) if r is not None]

    # -- one-vs-rest -----------------------------------------------------------
    def class_ranges(self, passes: int) -> None:
        """Explode to (class, score, label == class, weight) and range-partition once."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        w = [F.col("_w").alias("w")] if self.weighted else []
        if self.n_classes == 2:
            # Only class 1 is calibrated, on the last score column (p0 = 1 - p1).
            rows = self.valid.select(F.lit(1).alias("c"),
                                     (F.element_at("_z", -1) + F.lit(0.0)).alias("s"),
                                     (F.col("_y") == 1).cast("double").alias("l"), *w)
        else:
            # + 0.0 makes -0.0 into 0.0, so that equal scores range together.
            rows = (self.valid.select(F.posexplode("_z").alias("c", "s"), "_y", *w)
                    .select(F.col("c").cast("int").alias("c"),
                            (F.col("s") + F.lit(0.0)).alias("s"),
                            (F.col("_y") == F.col("c")).cast("double").alias("l"),
                            *(["w"] if self.weighted else [])))
        ranged = rows.repartitionByRange(self.n_ranges, "c", "s")
        log.info("spark: %d range partitions by (class, score) for %d classes",
                 self.n_ranges, self.n_classes)
        if passes > 1:
            ranged = ranged.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted.append(ranged)
        self.ranged = ranged

    def map_classes(self, fns: dict[int, Callable[[DistinctTable], Any]]) -> dict[int, list]:
        """One pass: ``fns[c]`` over class c's ranges, in ascending score order."""
        runner = _class_runner(fns, self.weighted)
        with phase("spark: one pass over the (class, score) ranges"):
            rows = with_arrow_batches(self.ranged.sparkSession, lambda: self.ranged.mapInArrow(
                runner, RESULT_SCHEMA).collect())
        out: dict[int, list[Any]] = {c: [] for c in fns}
        for r in sorted(rows, key=lambda r: r["pid"]):
            for c, res in pickle.loads(r["payload"]).items():
                out[c].append(res)
        return out

    def close(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted = []

    def __enter__(self) -> SparkMulticlassRows:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _vectors(batch: pa.RecordBatch | pa.Table, name: str, k: int) -> np.ndarray:
    """An array<double> column of equal-length rows as an (n, k) matrix."""
    import pyarrow.compute as pc

    col = batch.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float64).reshape(-1, k)


def _one_row(payload: Any) -> pa.RecordBatch:
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "runs inside a Spark task"
    return pa.RecordBatch.from_pydict(
        {"pid": [context.partitionId()],
         "payload": [pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)]},
        schema=pa.schema([("pid", pa.int64()), ("payload", pa.binary())]))


def _temperature_runner(beta: float, kind: str, k_cols: int, weighted: bool) -> Callable:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        total = np.zeros(3)
        for b in batches:
            if not b.num_rows:
                continue
            zc = center_logits(to_logits(_vectors(b, "_z", k_cols), kind))
            y = b.column("_y").to_numpy(zero_copy_only=False).astype(np.intp)
            w = (b.column("_w").to_numpy(zero_copy_only=False).astype(np.float64)
                 if weighted else None)
            total += temperature_sums(zc, y, w, beta, centered=True)
        yield _one_row(total)

    return run


def _rows_runner(fn: Callable, k_cols: int, weighted: bool) -> Callable:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        nonempty = [b for b in batches if b.num_rows]
        out = None
        if nonempty:
            data = pa.Table.from_batches(nonempty)
            w = (data.column("_w").to_numpy().astype(np.float64) if weighted else None)
            out = fn(_vectors(data, "_z", k_cols),
                     data.column("_y").to_numpy().astype(np.intp), w)
        yield _one_row(out)

    return run


def _class_runner(fns: dict[int, Callable[[DistinctTable], Any]], weighted: bool) -> Callable:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        nonempty = [b for b in batches if b.num_rows]
        out: dict[int, Any] = {}
        if nonempty:
            data = pa.Table.from_batches(nonempty)
            c = data.column("c").to_numpy().astype(np.int64)
            s = data.column("s").to_numpy().astype(np.float64)
            lab = data.column("l").to_numpy().astype(np.float64)
            w = data.column("w").to_numpy().astype(np.float64) if weighted else None
            order = np.argsort(c, kind="stable")
            cs = c[order]
            starts = np.flatnonzero(np.concatenate(([True], cs[1:] != cs[:-1])))
            ends = np.append(starts[1:], cs.shape[0])
            for a, b in zip(starts, ends):
                cls = int(cs[a])
                if cls not in fns:
                    continue
                idx = order[a:b]
                table = pool_ties(s[idx], lab[idx], None if w is None else w[idx])
                out[cls] = fns[cls](table)
        yield _one_row(out)

    return run
