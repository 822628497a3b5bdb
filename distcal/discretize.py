"""``distcal.discretize``: MODL supervised discretisation of a score for any class labels.

The table of class counts per distinct score comes from the engine's keyed
pass, one key per class (every engine the same way); each contiguous score
range pre-merges the rows no MODL optimum ever cuts apart (adjacent scores
pure in the same class), or groups them beyond ``max_groups``, and the
driver finds the partition on the concatenation
(:mod:`distcal.core.discretize`, docs/modl.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .core.discretize import RangeCounts, modl_from_counts, range_rows, rows_plan
from .core.keyed import KeyedTable, KeySpec, split_global
from .core.modl import MAX_GROUPS, RangeGroups, range_summary
from .core.plans import run_plan
from .defaults import DEFAULTS
from .engines import get_engine, resolve_engine
from .errors import DataError
from .params import check_int, check_max_groups, check_on_invalid, split_engine_options

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
    return check_int(value, 2, math.inf, "max_classes must be an integer >= 2")


def _too_many(label_col: str, count: int, max_classes: int, capped: bool) -> DataError:
    return DataError(f"column '{label_col}' (label) has {'at least ' if capped else ''}{count} "
                     f"distinct classes, more than max_classes={max_classes}; discretize "
                     "counts each class in its own column (raise max_classes to allow more)")


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
        raise _too_many(label_col, len(classes), max_classes, capped)
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


def _class_counts(part: KeyedTable, classes: list[Any] | None) -> tuple[np.ndarray, np.ndarray,
                                                                        list[Any]]:
    """A range's distinct scores (ascending) and their class counts (V, J).

    The keys of the range are all rows (the global key: every distinct
    score) and one per class (its rows' scores). ``classes``: the column
    order (None: the classes present, in the range's order).
    """
    table, _, per_class = split_global(part)
    present = [k[0] for k in per_class.keys]
    order = present if classes is None else classes
    column = {c: j for j, c in enumerate(order)}
    counts = np.zeros((len(table), len(order)), dtype=np.int64)
    for i, c in enumerate(present):
        t = per_class.key_table(i)
        counts[np.searchsorted(table.score, t.score), column[c]] = t.count
    return table.score, counts, present


class _Summary:
    """Pass 1 of a range: its first score, its classes and :func:`range_summary` (classes
    numbered in the range's own order: the driver renumbers them); for more than
    ``max_classes`` classes, whose count table is never built, their number instead."""

    def __init__(self, max_classes: int):
        self.max_classes = max_classes

    def __call__(self, part: KeyedTable) -> tuple[float, list[Any], Any]:
        n_classes = len(part.keys) - 1  # every key but the global one
        if n_classes > self.max_classes:  # the first max_classes + 1 and the count
            return (float(part.table.score.min()),
                    [k[0][0] for k in part.keys if k[0] is not None][:self.max_classes + 1],
                    n_classes)
        scores, counts, present = _class_counts(part, None)
        return float(scores[0]), present, range_summary(counts)


class _Rows:
    """Pass 2 of a range: its counts in the classes' order, pre-merged or grouped."""

    def __init__(self, classes: list[Any], plan: dict[float, RangeGroups] | None):
        self.classes, self.plan = classes, plan

    def __call__(self, part: KeyedTable) -> Any:
        scores, counts, _ = _class_counts(part, self.classes)
        return range_rows(counts, scores, self.plan)


def _class_tables(data: Any, engine: str, score_col: str, label_col: str, max_groups: int,
                  max_classes: int, on_invalid: str, engine_opts: dict[str, Any]
                  ) -> tuple[list[Any], list[RangeCounts], int | None]:
    """The classes and the ranges' count tables, pre-merged or grouped (two keyed passes).

    The keyed rows have one key per class (:class:`~distcal.core.keyed.KeySpec`,
    ``target="classes"``) and the global key; the first pass brings each
    range's classes and five integers, from which the driver checks the
    classes and plans the groups; the second each range's rows
    (:func:`~distcal.core.discretize.rows_plan`).
    """
    spec = KeySpec(score_col=score_col, label_col=label_col, target="classes")
    with get_engine(engine).open_keyed(data, spec, on_invalid=on_invalid, passes=2,
                                       **engine_opts) as keyed:
        first = keyed.map(_Summary(max_classes))
        found = list(dict.fromkeys(c for _, present, _ in first for c in present))
        over = [s for _, _, s in first if isinstance(s, int)]
        if over:  # too many classes: exact when one range holds them all
            count = max(len(found), *over)
            raise _too_many(label_col, count, max_classes, capped=len(first) > 1)
        classes = _check_classes(found, label_col, max_classes)
        number = {c: j for j, c in enumerate(classes)}
        summaries = []
        for _, present, summary in first:  # the pure classes renumbered in the common order
            summary = summary.copy()
            for at in (2, 3):
                if summary[at] >= 0:
                    summary[at] = number[present[summary[at]]]
            summaries.append(summary)
        parts, groups = run_plan(rows_plan([f for f, _, _ in first], summaries, max_groups,
                                           lambda plan: _Rows(classes, plan)), keyed.map)
        return classes, parts, groups


def discretize(data: Any, score_col: str = DEFAULTS.score_col,
               label_col: str = DEFAULTS.label_col, engine: str = DEFAULTS.engine,
               exact_max: int = 1000, max_groups: int = MAX_GROUPS,
               max_classes: int = MAX_CLASSES, on_invalid: str = DEFAULTS.on_invalid,
               **engine_opts: Any) -> pd.DataFrame:
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
        table (one integer per distinct score and class) is built: each
        score range sends at most ``max_classes + 1`` labels to the driver
        to decide ("at least" when the count spans several ranges).
    on_invalid : {"raise", "drop"}
        Rows with a NaN, text or null score or a null label: a
        :class:`~distcal.DataError` counting them, or dropped. Scores of
        +-inf are valid: they fall in the first or last interval (whose
        outer bound is -inf or +inf), as in ``fit(method="modl")``.
    **engine_opts
        The engine's options, as for :func:`distcal.fit` (locally
        ``memory_rows``, ``batch_rows``, ``chunk_rows``: a Parquet path is
        streamed within them; Spark and Dask ``n_ranges``).

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
    exact_max = check_int(exact_max, 0, math.inf, "exact_max must be an integer >= 0")
    check_on_invalid(on_invalid)
    engine = resolve_engine(data, engine)
    _, engine_opts = split_engine_options("discretize", None, engine_opts,
                                          get_engine(engine).options)
    classes, parts, groups = _class_tables(data, engine, score_col, label_col, max_groups,
                                           max_classes, on_invalid, engine_opts)
    smin, smax, counts, cost, exact, groups = modl_from_counts(parts, exact_max, max_groups,
                                                               groups)
    out = pd.concat([pd.DataFrame({"score_min": smin, "score_max": smax,
                                   "n": counts.sum(axis=1)}),
                     pd.DataFrame(counts, columns=pd.Index(classes, dtype=object))], axis=1)
    out.attrs["cost"] = cost
    out.attrs["exact"] = exact
    out.attrs["groups"] = groups
    return out
