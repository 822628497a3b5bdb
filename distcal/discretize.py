"""``distcal.discretize``: MODL supervised discretisation of a score for any class labels.

The table of class counts per distinct score comes from the engine (one
``groupBy(score).pivot(label)`` on Spark, a grouped count per partition on
Dask, a count in this process locally); each contiguous score range
pre-merges the rows no MODL optimum ever cuts apart (adjacent scores pure in
the same class), and the driver finds the partition on the concatenation
(:mod:`distcal.core.discretize`, docs/modl.md).
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from .core.discretize import MAX_GROUPS, RangeCounts, modl_from_counts
from .core.modl import (
    RangeGroups,
    group_range,
    join_groups,
    plan_groups,
    premerge_range,
    range_summary,
)
from .defaults import DEFAULTS
from .engines import resolve_engine
from .errors import DataError, ParameterError, column_not_found
from .params import check_max_groups
from .tables import is_path, open_dataset

__all__ = ["discretize", "MAX_CLASSES", "OWN_COLUMNS"]

# The default bound on the number of classes. The count table holds one
# integer per (distinct score, class) and MODL's search costs grow with the
# classes: 1,000 classes of 2e5 rows took 250 s and 21 GB. 100 classes of
# 2e5 distinct scores are a 160 MB table.
MAX_CLASSES = 100
# discretize's own output columns: a class may not be named like one of them.
OWN_COLUMNS = ("score_min", "score_max", "n")


def check_max_classes(value: Any) -> int:
    """``max_classes``: an int >= 2 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 2:
        raise ParameterError(f"max_classes must be an integer >= 2, got {value!r}")
    return int(value)


def _check_classes(classes: Any, label_col: str, max_classes: int, capped: bool = False
                   ) -> list[Any]:
    """The distinct labels, sorted, once they can name the output's count columns.

    More than ``max_classes`` labels, a label whose column name (its text)
    is one of :data:`OWN_COLUMNS`, or two labels with the same text (1 and
    "1") are a :class:`~distcal.DataError`, raised before the count table
    is built. ``capped``: the engine stopped counting at ``max_classes + 1``.
    """
    classes = list(classes)
    if len(classes) > max_classes:
        count = f"at least {len(classes)}" if capped else str(len(classes))
        raise DataError(f"column '{label_col}' (label) has {count} distinct classes, "
                        f"more than max_classes={max_classes}; discretize "
                        "counts each class in its own column (raise max_classes to allow more)")
    texts: dict[str, list[Any]] = {}
    for c in classes:
        texts.setdefault(str(c), []).append(c)
    own = sorted(t for t in texts if t in OWN_COLUMNS)
    if own:
        plural = "s" if len(own) > 1 else ""
        raise DataError(f"column '{label_col}' (label): the class label{plural} "
                        f"{', '.join(repr(t) for t in own)} would name a count column like "
                        f"discretize's own columns {', '.join(OWN_COLUMNS)}; rename "
                        f"{'those classes' if len(own) > 1 else 'that class'}")
    same = [v for v in texts.values() if len(v) > 1]
    if same:
        shown = "; ".join(" and ".join(repr(c) for c in v) for v in same[:3])
        raise DataError(f"column '{label_col}' (label): {len(same)} pair"
                        f"{'s' if len(same) > 1 else ''} of class labels of different types "
                        f"would name the same count column ({shown}); make the labels one type")
    # Numbers before text when a column mixes them (Python cannot order 1 and "a").
    return sorted(classes, key=lambda c: (isinstance(c, str), c))


def _counts_table(score: np.ndarray, label: np.ndarray, classes: list[Any]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Distinct scores (ascending) and their class counts (V, J)."""
    values, inverse = np.unique(score, return_inverse=True)
    codes = pd.Categorical(label, categories=classes).codes
    counts = np.zeros((values.shape[0], len(classes)), dtype=np.int64)
    np.add.at(counts, (inverse, codes), 1)
    return values, counts


def _check_rows(score: np.ndarray, label: pd.Series, score_col: str, label_col: str) -> None:
    k = int(np.count_nonzero(np.isnan(score)))
    if k:
        raise DataError(f"column '{score_col}': {k} row{'s' if k > 1 else ''} "
                        f"{'are' if k > 1 else 'is'} null or NaN")
    k = int(label.isna().sum())
    if k:
        raise DataError(f"column '{label_col}': {k} row{'s' if k > 1 else ''} "
                        f"{'are' if k > 1 else 'is'} null")
    if score.shape[0] == 0:
        raise DataError("no rows to discretise")


def _local_columns(data: Any, score_col: str, label_col: str) -> tuple[np.ndarray, pd.Series]:
    if is_path(data):
        dataset = open_dataset(data)
        for c, role in ((score_col, "score"), (label_col, "label")):
            if c not in dataset.schema.names:
                raise column_not_found(c, role, dataset.schema.names)
        data = dataset.to_table(columns=[score_col, label_col]).to_pandas()
    if hasattr(data, "to_pandas") and not isinstance(data, pd.DataFrame):
        data = data.to_pandas()
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"cannot read data of type {type(data).__name__}")
    for c, role in ((score_col, "score"), (label_col, "label")):
        if c not in data.columns:
            raise column_not_found(c, role, map(str, data.columns))
    score = pd.to_numeric(data[score_col], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    return score, data[label_col]


def _local(data: Any, score_col: str, label_col: str, max_classes: int
           ) -> tuple[list[Any], list[RangeCounts]]:
    score, label = _local_columns(data, score_col, label_col)
    _check_rows(score, label, score_col, label_col)
    classes = _check_classes(pd.unique(label).tolist(), label_col, max_classes)
    values, counts = _counts_table(score, label.to_numpy(), classes)
    return classes, [premerge_range(counts, values)]


def _first_distinct(labels: pd.Series, limit: int) -> pd.Series:
    return pd.Series(pd.unique(labels.dropna()))[:limit]


def _dask(data: Any, score_col: str, label_col: str, max_classes: int
          ) -> tuple[list[Any], list[RangeCounts]]:
    for c, role in ((score_col, "score"), (label_col, "label")):
        if c not in data.columns:
            raise column_not_found(c, role, data.columns)
    # The classes first, at most max_classes + 1 per partition: too many stop here.
    firsts = data[label_col].map_partitions(_first_distinct, max_classes + 1,
                                            meta=data[label_col]._meta).compute()
    found = pd.unique(firsts)
    _check_classes(found[:max_classes + 1].tolist(), label_col, max_classes,
                   capped=len(found) > max_classes)
    # One row per (score, class) with its count: distinct-sized, not row-sized.
    grouped = data[[score_col, label_col]].groupby([score_col, label_col],
                                                   dropna=False).size().compute()
    frame = grouped.reset_index(name="n")
    score = frame[score_col].to_numpy(np.float64)
    _check_rows(score, frame[label_col], score_col, label_col)
    classes = _check_classes(pd.unique(frame[label_col]).tolist(), label_col, max_classes)
    values, inverse = np.unique(score, return_inverse=True)
    codes = pd.Categorical(frame[label_col], categories=classes).codes
    counts = np.zeros((values.shape[0], len(classes)), dtype=np.int64)
    np.add.at(counts, (inverse, codes), frame["n"].to_numpy(np.int64))
    return classes, [premerge_range(counts, values)]


def _spark_range(step: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """One range partition of (score, count per class) rows: ``step(counts, scores)``, pickled."""
    import pyarrow as pa
    from pyspark import TaskContext

    tables = [b for b in batches if b.num_rows]
    ctx = TaskContext.get()
    pid = ctx.partitionId() if ctx is not None else 0
    part = None
    if tables:
        t = pa.Table.from_batches(tables)
        s = t.column(0).to_numpy(zero_copy_only=False).astype(np.float64)
        c = np.column_stack([t.column(i).to_numpy(zero_copy_only=False).astype(np.int64)
                             for i in range(1, t.num_columns)])
        order = np.argsort(s, kind="stable")
        part = step(c[order], s[order])
    yield pa.RecordBatch.from_pydict({"pid": [pid], "payload": [pickle.dumps(part)]},
                                     schema=pa.schema([("pid", pa.int64()),
                                                       ("payload", pa.binary())]))


def _summary(counts: np.ndarray, scores: np.ndarray) -> tuple[float, np.ndarray]:
    return float(scores[0]), range_summary(counts)


def _grouped(plan: dict[float, RangeGroups], counts: np.ndarray, scores: np.ndarray) -> Any:
    return group_range(counts, plan[float(scores[0])], scores)


def _spark(data: Any, score_col: str, label_col: str, max_groups: int, max_classes: int
           ) -> tuple[list[Any], list[RangeCounts], int | None]:
    """Class counts per range, pre-merged or, beyond ``max_groups`` rows, grouped on the executors.

    Two passes over the range-partitioned counts (persisted between them):
    five integers per range, from which the driver plans the groups
    (:func:`~distcal.core.modl.plan_groups`), then each range's rows.
    """
    from pyspark.sql import functions as F

    from .engines.spark.schema import quote
    from .engines.spark.session import default_ranges, on_executors

    fields = [f.name for f in data.schema.fields]
    for c, role in ((score_col, "score"), (label_col, "label")):
        if c not in fields:
            raise column_not_found(c, role, fields)
    s = F.col(quote(score_col)).cast("double")
    bad = data.where(s.isNull() | F.isnan(s) | F.col(quote(label_col)).isNull()).count()
    if bad:
        raise DataError(f"columns '{score_col}'/'{label_col}': {bad} rows have a null or NaN "
                        "score or a null label")
    # At most max_classes + 1 labels reach the driver: too many stop here.
    first = data.select(quote(label_col)).distinct().limit(max_classes + 1).collect()
    classes = _check_classes([r[0] for r in first], label_col, max_classes,
                             capped=len(first) > max_classes)
    pivot = (data.select(s.alias("s"), F.col(quote(label_col)).alias("y"))
             .groupBy("s").pivot("y", classes).count().na.fill(0))
    # Renamed by position: a class named "s" would otherwise be a second column "s".
    pivot = pivot.toDF("s", *[f"c{j}" for j in range(len(classes))])
    # Persisted: both passes must see the same ranges.
    ranged = pivot.repartitionByRange(default_ranges(data), "s").persist()

    def run(step: Any) -> list[Any]:
        rows = on_executors(lambda: ranged.mapInArrow(
            lambda it: _spark_range(step, it), "pid long, payload binary").collect())
        parts = [pickle.loads(r["payload"]) for r in sorted(rows, key=lambda r: r["pid"])]
        return [p for p in parts if p is not None]

    try:
        summaries = run(_summary)
        plan = plan_groups([x for _, x in summaries], max_groups)
        if plan is None:
            return classes, run(premerge_range), None
        by_first = {f: g for (f, _), g in zip(summaries, plan)}
        table = join_groups(run(functools.partial(_grouped, by_first)))
        return classes, [table], int(table[0].shape[0])
    finally:
        ranged.unpersist()


def discretize(data: Any, score_col: str = DEFAULTS.score_col,
               label_col: str = DEFAULTS.label_col, engine: str = DEFAULTS.engine,
               exact_max: int = 1000, max_groups: int = MAX_GROUPS,
               max_classes: int = MAX_CLASSES) -> pd.DataFrame:
    """MODL's Bayes-optimal partition of ``score_col`` into intervals, given the classes.

    Minimises the MODL criterion (Boullé 2006) over partitions whose cuts
    lie between distinct scores: log N + log C(N+I-1, I-1) + sum_i log
    C(N_i+J-1, J-1) + sum_i log(N_i! / prod_j N_ij!), for N rows, I
    intervals and J classes. Exact when at most ``exact_max`` rows remain
    after merging adjacent scores pure in the same class; beyond, at least
    as good as greedy bottom-up merging. When more than ``max_groups``
    rows remain, the scores are first grouped into at most ``max_groups``
    contiguous groups of about equal row counts (Khiops' granularisation,
    on the executors for Spark) and both guarantees hold for the grouped
    table; ``.attrs["groups"]`` holds the number of groups (None: none).

    Parameters
    ----------
    data : pandas.DataFrame, pyarrow.Table, Parquet path, Spark or Dask DataFrame
        The rows (unit weights: each row counts once).
    score_col : str
        A numeric column (NaN or null is a :class:`~distcal.DataError`).
    label_col : str
        Any class labels: ints or strings. Each class names a count column
        of the result (by its text), so a label "score_min", "score_max" or
        "n", or two labels of different types with the same text (1 and
        "1"), is a :class:`~distcal.DataError` naming them: the output's
        own columns are never overwritten.
    engine : {"auto", "local", "spark", "dask"}
        As for :func:`distcal.fit`; every engine gives the same partition.
    exact_max : int
        Largest table (after merging pure runs) solved exactly.
    max_groups : int
        Most rows of the count table the driver receives and searches.
    max_classes : int
        Most distinct labels (default 100): more is a
        :class:`~distcal.DataError` naming the label column, the count and
        the limit, raised once the labels are counted, before the count
        table (one integer per distinct score and class) is built. Spark
        and Dask bring at most ``max_classes + 1`` labels to the driver to
        decide.

    Returns
    -------
    pandas.DataFrame
        One row per interval, ascending: ``score_min``, ``score_max`` (the
        lowest and highest score in it), ``n``, and one count column per
        class (named by the class, in sorted order); ``.attrs["cost"]``
        holds the criterion and ``.attrs["exact"]`` whether it is the
        proven optimum.

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"score": range(40), "label": ["a"] * 20 + ["b"] * 20})
    >>> out = distcal.discretize(df)
    >>> out[["score_min", "score_max"]].values.tolist()
    [[0.0, 19.0], [20.0, 39.0]]
    >>> out[["n", "a", "b"]].values.tolist()
    [[20, 20, 0], [20, 0, 20]]
    """
    max_groups = check_max_groups(max_groups)
    max_classes = check_max_classes(max_classes)
    name = resolve_engine(data, engine)
    groups = None
    if name == "spark":
        from .engines.spark.session import as_spark

        classes, parts, groups = _spark(as_spark(data), score_col, label_col, max_groups,
                                        max_classes)
    elif name == "dask":
        from .engines.dask import as_dask

        classes, parts = _dask(as_dask(data), score_col, label_col, max_classes)
    else:
        classes, parts = _local(data, score_col, label_col, max_classes)
    smin, smax, counts, cost, exact, groups = modl_from_counts(parts, exact_max, max_groups,
                                                               groups)
    out = pd.concat([pd.DataFrame({"score_min": smin, "score_max": smax,
                                   "n": counts.sum(axis=1)}),
                     pd.DataFrame(counts, columns=pd.Index(classes, dtype=object))], axis=1)
    out.attrs["cost"] = cost
    out.attrs["exact"] = exact
    out.attrs["groups"] = groups
    return out
