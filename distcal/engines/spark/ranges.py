"""The ordered score ranges of a Spark DataFrame: range partitions, one Arrow map per pass.

1. Columns are prepared and checked in Spark SQL (:mod:`.schema`).
2. Optionally a map-side combine, ``groupBy(score)`` with conditional sums,
   chosen automatically from an estimate of the number of distinct scores
   (:meth:`SparkRanges._ties_pay`).
3. ``repartitionByRange(k, score)``: Spark's own sampler and range
   partitioner; equal scores land in one partition, and partition i holds a
   contiguous score range below partition i + 1.
4. One ``mapInArrow`` per pass (:mod:`.executor`): each range partition
   validates its rows, pools equal scores, calls the core function and
   returns one row, its partition index and the pickled (small) result.
   Only those rows reach the driver, which orders them by partition.

Validation problems are counted in the first pass and raised as
``DataError`` on the driver before anything is written. Methods that need
several passes get the range-partitioned rows persisted between passes.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ...core.distinct import DistinctTable, estimate_distinct
from ...core.partition import add_up
from ...logs import log, phase
from .executor import RESULT_SCHEMA, partition_runner
from .schema import (
    any_problem,
    check_schema,
    combined,
    prepared,
    problem_flags,
    with_vector_element,
)
from .session import default_ranges, parallelism, with_arrow_batches

__all__ = ["SparkRanges"]

# At most this many hot scores are grouped (the most frequent in the head).
MAX_HOT = 1000
# A score with a share f of the rows keeps one task busy while the other C - 1
# cores share the rest: ~f * C times the balanced time. Grouping only the hot
# scores costs ~3.4x the raw path (1e7 rows, 40% at one score, local[2]:
# 26.0 s against 7.7 s, bench/RESULTS.md), so it is chosen from f * C >= 4.
HOT_GROUPING_PAYS = 4.0


class SparkRanges:
    """Ordered score ranges of a Spark DataFrame (see ``MapRanges``)."""

    def __init__(self, df: Any, columns: dict[str, str | None], *, on_invalid: str = "raise",
                 finite_scores: bool = False, passes: int = 1, n_ranges: int | None = None,
                 combine: bool | str = "auto", sample_rows: int = 50_000,
                 score_index: int | None = None):
        self.columns = {r: c for r, c in columns.items() if c is not None}
        value_role = "prob" if "prob" in self.columns else "score"
        self.df = df = with_vector_element(df, self.columns[value_role], score_index, value_role)
        self.on_invalid = on_invalid
        self.finite_scores = finite_scores
        self.kinds = check_schema(df, self.columns)
        self.score_role = "prob" if "prob" in self.columns else "score"
        self.label_role = "loss" if "loss" in self.columns else "label"
        rows = prepared(df, self.columns, self.kinds)
        k = int(n_ranges or default_ranges(df))
        self.hot: list[float] = []
        if combine in ("auto", "hot"):
            ties, hot, share = self._ties_pay(rows, sample_rows, k)
            if combine == "hot" or (not ties and hot and
                                    share * parallelism(df) >= HOT_GROUPING_PAYS):
                combine, self.hot = False, hot
            else:
                combine = ties
        self.combined = bool(combine) or bool(self.hot)
        self.problem_keys: list[Any] = []
        if self.combined:
            grouped, self.problem_keys = combined(rows, self.columns, self.kinds,
                                                  finite_scores, self.score_role,
                                                  self.label_role, hot=self.hot or None)
            self.ranged = grouped.repartitionByRange(k, "s")
        else:
            self.ranged = rows.repartitionByRange(k, self.score_role)
        log.info("spark: %d range partitions by %s, %s", k, self.score_role,
                 f"{len(self.hot)} hot score(s) grouped, other rows raw" if self.hot else
                 "map-side combine (groupBy score)" if self.combined else "raw rows")
        self.persisted = passes > 1
        if self.persisted:
            from pyspark import StorageLevel

            self.ranged = self.ranged.persist(StorageLevel.MEMORY_AND_DISK)
        self.checked = False
        self.n_rows = 0
        self.weight_total = 0.0
        self.dropped_rows = 0
        self.sum_wyy = float("nan")

    def _ties_pay(self, rows: Any, sample_rows: int,
                  ranges: int) -> tuple[bool, list[float], float]:
        """Whether to combine all rows; the hot scores and the largest one's share of rows.

        Combine when the scores have at most ~250k distinct values. Measured
        at 1e7 rows (bench/spark_isotonic.py, RESULTS.md): with 962 / 9.3k /
        87k distinct scores the combine cut the fit from 3.2 / 3.5 / 3.6 s to
        2.0 / 1.3 / 2.3 s; with 940k it cost 4.2 s instead of 3.1 s.

        A hot score is one that holds at least a range partition's share
        (1 / ``ranges``) of the rows: a range partitioner never splits equal
        keys, so without grouping, its range partition would hold all of
        them (one task doing 40% of the work when a default score of 0 fills
        40% of the rows). Grouping only the hot scores collapses each to one
        row per map task before the shuffle, the other rows going as groups
        of one; ``combine="hot"`` asks for that, and "auto" picks it when the
        largest share times the cores reaches ``HOT_GROUPING_PAYS``.

        Both come from the first ``sample_rows`` rows (a head, no pass over
        the data): the distinct count of the scores other than the hot ones
        with the estimator of ``distcal.core.distinct.estimate_distinct``.
        A head of sorted data shows fewer distinct values only when ties are
        heavy, and a hot score only if the head reaches it.
        """
        from pyspark.sql import functions as F

        score = F.col(self.score_role)
        counts = (rows.select(self.score_role).limit(sample_rows).groupBy(self.score_role)
                  .agg(F.count(F.lit(1)).alias("c")))
        named = score.isNotNull() & ~F.isnan(score)
        summary = counts.agg(F.sum("c").alias("m"), F.count(F.when(named, 1)).alias("d"),
                             F.max(F.when(named, F.col("c"))).alias("top")).collect()[0]
        m, d, top = int(summary["m"] or 0), int(summary["d"]), int(summary["top"] or 0)
        hot: list[float] = []
        share = top / m if m else 0.0
        if m and top * ranges >= m and top > 1:
            found = (counts.where(named & (F.col("c") * ranges >= m) & (F.col("c") > 1))
                     .orderBy(F.col("c").desc()).limit(MAX_HOT).collect())
            hot = [float(r[self.score_role]) for r in found]
            m -= sum(int(r["c"]) for r in found)
            d -= len(found)
        if hot and m == 0:
            return True, hot, share  # the head is all hot scores: group every score
        if m > 0 and d < m and estimate_distinct(10**15, m, d) <= 250_000:
            return True, hot, share  # every score grouped, the hot ones with the rest
        return False, hot, share

    def map(self, fn: Callable[[DistinctTable], Any]) -> list[Any]:
        runner = partition_runner(fn, "combined" if self.combined else "raw", self.columns,
                                  self.finite_scores, self.problem_keys)
        with phase("spark: one pass over the range partitions"):
            rows = with_arrow_batches(self.ranged.sparkSession, lambda: self.ranged.mapInArrow(
                runner, RESULT_SCHEMA).collect())
        parts = [pickle.loads(r["payload"]) for r in sorted(rows, key=lambda r: r["pid"])]
        if not self.checked:
            self._check([p["stats"] for p in parts])
        return [p["result"] for p in parts if not p["empty"]]

    def _check(self, stats: list[dict[str, Any]]) -> None:
        totals = add_up(stats, self.columns, on_invalid=self.on_invalid,
                        finite_scores=self.finite_scores)
        self.n_rows, self.weight_total = totals.n_rows, totals.weight_total
        self.dropped_rows, self.sum_wyy = totals.dropped_rows, totals.sum_wyy
        self.checked = True
        log.info("spark: %d rows used (weight %g), %d dropped", self.n_rows, self.weight_total,
                 self.dropped_rows)

    def spearman_rows(self) -> bool:
        """Sign of Spearman's rho over the valid rows (labels not all 0/1), by Spark ML."""
        from pyspark.ml.feature import VectorAssembler
        from pyspark.ml.stat import Correlation
        from pyspark.sql import functions as F

        rows = prepared(self.df, self.columns, self.kinds)
        live = rows.where(~any_problem(problem_flags(self.columns, self.kinds,
                                                    self.finite_scores)))
        if "weight" in self.columns:
            live = live.where(F.col("weight") > 0)
        vec = VectorAssembler(inputCols=[self.score_role, self.label_role],
                              outputCol="_v").transform(live)
        row = Correlation.corr(vec, "_v", "spearman").head()
        assert row is not None
        rho = row[0][0, 1]
        return not (rho < 0)

    def close(self) -> None:
        if self.persisted:
            self.ranged.unpersist()

    def __enter__(self) -> SparkRanges:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
