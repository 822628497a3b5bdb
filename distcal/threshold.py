"""``distcal.optimal_threshold``: the cost-minimising rule "positive iff score >= t".

It opens the keyed rows of the input (:meth:`~distcal.engines.base.Engine.open_keyed`:
the global key, and with ``by=`` one key per segment), so one range shuffle
on the score serves the global result and every segment. Restricted to one
key, the ranges are that key's own ordered ranges: each range sends the
threshold summary of every key's table (:mod:`distcal.core.threshold`), and
the driver merges each key's summaries in score order. Rows with a null in
a ``by`` column belong to no segment; they count in the global result only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from .core.distinct import DistinctTable
from .core.keyed import GLOBAL, KeyedTable, KeySpec, in_key_order
from .core.threshold import (
    EMPTY,
    SegmentSummary,
    loss_mass,
    loss_per_score,
    merge_segments,
    summarise_segment,
)
from .defaults import DEFAULTS
from .engines import get_engine, resolve_engine
from .errors import DataError, ParameterError, sums_overflow
from .jsonsafe import json_safe, key_value
from .logs import log, phase
from .params import check_finite, check_on_invalid, check_score_index, split_engine_options

__all__ = ["ThresholdResult", "ThresholdTracker", "optimal_threshold"]


@dataclass(frozen=True)
class ThresholdResult:
    """The optimal threshold and what it does.

    The rule is "positive iff score >= ``threshold``", with one exception:
    ``predict_none`` is True when the best rule predicts nothing positive;
    ``threshold`` is then +inf but no row is positive, not even rows whose
    score is +inf. (When ``threshold`` is +inf and ``predict_none`` is
    False, the rows scored +inf, and only they, are predicted positive.)
    ``cost`` (the minimal
    total cost; with a per-row loss, the minimal sum of z),
    ``n_positive_predicted`` (weight predicted positive), and the weighted
    confusion at the threshold (``tp``, ``fp``, ``tn``, ``fn``; NaN with a
    per-row loss, which has no labels). With ``optimal_threshold(...,
    by=cols)``, ``segments`` holds one row per segment (the ``by`` columns,
    ``n_rows``, ``weight``, ``threshold``, ``cost``, ``fp``, ``fn``, ``tp``,
    ``tn``, ``predict_none``); the other fields are the global result's.
    """

    threshold: float
    cost: float
    n_positive_predicted: float
    tp: float = math.nan
    fp: float = math.nan
    tn: float = math.nan
    fn: float = math.nan
    n_rows: int = 0
    dropped_rows: int = 0
    predict_none: bool = False
    segments: pd.DataFrame | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The fields as standard JSON holds them: ``json.dumps(result.to_dict(),
        allow_nan=False)`` works, and any JSON parser reads the text back.

        As the command line's JSON line: a non-finite number (``threshold``
        +inf when no threshold beats the rule ``predict_none`` says, ``tp``
        ... ``fn`` NaN with a per-row loss) is None, and the dict holding it
        gains ``"why_null": {field: reason}``; numpy scalars are Python
        numbers. ``segments`` (when present) is a list of row dicts made
        the same way, whose segment keys that are ±inf or NaN are the
        strings "Infinity", "-Infinity", "NaN" (None is the null key);
        other keys JSON cannot hold (dates) are their text.
        """
        out = json_safe({f.name: getattr(self, f.name) for f in fields(self)
                         if f.name != "segments"}, why=True)
        if self.segments is not None:
            keys = [c for c in self.segments.columns if c not in _SEGMENT_FIELDS]
            out["segments"] = [
                json_safe({str(k): key_value(v) if k in keys else v for k, v in row.items()},
                          why=True)
                for row in self.segments.to_dict(orient="records")]
        return out


# The columns of ThresholdResult.segments besides the by columns (the keys).
_SEGMENT_FIELDS = ("n_rows", "weight", "threshold", "cost", "fp", "fn", "tp", "tn",
                   "predict_none")


def optimal_threshold(data: Any, score_col: str = DEFAULTS.score_col,
                      label_col: str = DEFAULTS.label_col,
                      weight_col: str | None = DEFAULTS.weight_col,
                      cost_fp: float = DEFAULTS.cost_fp, cost_fn: float = DEFAULTS.cost_fn,
                      loss_col: str | None = DEFAULTS.loss_col, engine: str = DEFAULTS.engine,
                      on_invalid: str = DEFAULTS.on_invalid, *,
                      score_index: int | None = None, by: str | list[str] | None = None,
                      **engine_opts: Any) -> ThresholdResult:
    """Threshold t of the rule "positive iff score >= t" minimising the total cost.

    The cost is ``cost_fp`` * (weight of negatives predicted positive) +
    ``cost_fn`` * (weight of positives predicted negative). It is found
    exactly by merging the ordered segment summaries of the score ranges
    (docs/design.md).

    Parameters
    ----------
    data : pandas.DataFrame, pyarrow.Table, str or path, Spark or Dask DataFrame
        The rows.
    score_col, label_col, weight_col : str
        Column names (as for :func:`distcal.fit`).
    cost_fp, cost_fn : float
        Cost of a false positive and of a false negative (finite; any sign).
    loss_col : str, optional
        Instead of labels and class costs, each row's own loss z of being
        predicted positive (times its weight, if ``weight_col``); t then
        minimises the sum of z over the rows predicted positive.
    engine, on_invalid, score_index, **engine_opts
        As for :func:`distcal.fit` (``score_index``: element of a vector
        ``score_col``; not with ``by``).
    by : str or list of str, optional
        Also the optimal threshold of each distinct value (tuple) of these
        columns, in ``res.segments`` (one pass for every segment;
        docs/segments.md). Rows with a null key count in the global result
        only.

    Returns
    -------
    ThresholdResult
        ``threshold`` (+inf and ``predict_none``: predict nothing positive;
        +inf alone: predict the +inf scores positive), ``cost``,
        ``n_positive_predicted`` and the weighted confusion. Equal scores
        fall on the same side; among thresholds of equal cost the largest
        is returned.

    Examples
    --------
    The worked example of "Optimally Efficient Sequential Calibration of
    Binary Classifiers to Minimize Classification Error":

    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"score": [1, 8, 5, 4, 6, 3, 7, 2],
    ...                    "z": [1, -2, 3, -4, 5, -6, 7, -8]})
    >>> res = distcal.optimal_threshold(df, loss_col="z")
    >>> res.threshold, res.cost
    (2.0, -5.0)
    """
    check_on_invalid(on_invalid)
    score_index = check_score_index(score_index)
    c_fp = check_finite(cost_fp, "cost_fp")
    c_fn = check_finite(cost_fn, "cost_fn")
    assert c_fp is not None and c_fn is not None
    cost_fp, cost_fn = c_fp, c_fn
    per_row_loss = loss_col is not None
    from .summary import summary_source

    source = summary_source(data)
    if source is not None:  # summaries: the columns and segments they were made from
        if per_row_loss or score_index is not None:
            raise ParameterError("a summary holds labels, not losses, and one score per row: "
                                 "loss_col and score_index do not apply")
        score_col, label_col, weight_col, by = source.own_columns(
            "optimal_threshold", score_col=(score_col, DEFAULTS.score_col),
            label_col=(label_col, DEFAULTS.label_col), weight_col=(weight_col, None),
            by=(by, None))
        data = source
    columns = {"score": score_col, "weight": weight_col,
               **({"loss": loss_col} if per_row_loss else {"label": label_col})}
    engine_impl = get_engine(resolve_engine(data, engine))
    _, engine_opts = split_engine_options("optimal_threshold", None, engine_opts,
                                          engine_impl.options)

    def summary(t: DistinctTable) -> SegmentSummary:
        if per_row_loss:
            z, mass = t.positives, t.label_sum  # sum w z, sum |w z| (pool_magnitudes)
        else:
            z, mass = loss_per_score(t, cost_fp, cost_fn), loss_mass(t, cost_fp, cost_fn)
        return summarise_segment(t.score, z, mass, t.weight, t.positives)

    names: list[str] = []
    if by is not None:
        from .keyed_fit import check_by

        names = check_by(by, columns, 0.0)
        if score_index is not None:
            raise ParameterError("by= reads a plain score column; score_index cannot be "
                                 "combined with by= in this version")
    # One pass for every segment (none without by=) and the key of all rows.
    spec = KeySpec(score_col=str(score_col),
                   label_col=str(loss_col if per_row_loss else label_col),
                   weight_col=weight_col, by=tuple(names),
                   target="loss" if per_row_loss else "label", score_index=score_index)
    with engine_impl.open_keyed(data, spec, on_invalid=on_invalid, passes=1,
                                **engine_opts) as keyed:
        with phase("threshold by %s", names):
            ranges = keyed.map(_Summaries(summary))
        n_rows, dropped = keyed.n_rows, keyed.dropped_rows
    merged: dict[Any, list[Any]] = {}
    for part in ranges:  # ascending ranges: each key's own order
        for segment, n, w, s in part:
            entry = merged.setdefault(segment, [0, 0.0, EMPTY])
            entry[0] += n
            entry[1] += w
            entry[2] = merge_segments(entry[2], s)
    glob = result_from_segment(merged.pop(GLOBAL, [0, 0.0, EMPTY])[2], cost_fp, cost_fn,
                               per_row_loss, n_rows, dropped)
    if by is None:
        return glob
    rows = []
    for key in in_key_order(merged):
        n, w, s = merged[key]
        r = result_from_segment(s, cost_fp, cost_fn, per_row_loss, n, 0)
        rows.append((*key, n, w, r.threshold, r.cost, r.fp, r.fn, r.tp, r.tn, r.predict_none))
    log.info("threshold by %s: %d segments", names, len(rows))
    return replace(glob, segments=pd.DataFrame(rows, columns=[*names, *_SEGMENT_FIELDS]))


class _Summaries:
    """Every key's ``summary`` in one range, with its rows and weight."""

    def __init__(self, summary: Callable[[DistinctTable], SegmentSummary]):
        self.summary = summary

    def __call__(self, part: KeyedTable) -> list[tuple[Any, int, float, SegmentSummary]]:
        n_rows, weight = part.key_totals()
        return [(key[0], int(n), float(w), self.summary(part.key_table(i)))
                for i, (key, n, w) in enumerate(zip(part.keys, n_rows.tolist(),
                                                    weight.tolist()))]


def result_from_segment(seg: Any, cost_fp: float, cost_fn: float, per_row_loss: bool,
                        n_rows: int, dropped_rows: int) -> ThresholdResult:
    """Turn the summary of all scores into the public result.

    The best suffix is empty (nothing predicted positive) exactly when its
    sum is not negative: ties prefer the shorter suffix. Sums that
    overflowed float64 are a :class:`~distcal.DataError`, never a NaN cost.
    """
    none = not seg.best < 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        # Everything negative costs cost_fn * positives; the best suffix adds seg.best.
        cost = cost_fn * seg.positives + seg.best
    sums = (seg.z, seg.best, seg.weight, seg.positives, seg.best_weight, seg.best_positives,
            cost)
    if not all(math.isfinite(v) for v in sums):
        raise sums_overflow("weights (times the costs or losses)")
    if per_row_loss:
        return ThresholdResult(seg.threshold, seg.best, seg.best_weight, n_rows=n_rows,
                               dropped_rows=dropped_rows, predict_none=none)
    tp = seg.best_positives
    fp = seg.best_weight - seg.best_positives
    fn = seg.positives - tp
    tn = (seg.weight - seg.positives) - fp
    return ThresholdResult(seg.threshold, cost, seg.best_weight, tp=tp, fp=fp, tn=tn, fn=fn,
                           n_rows=n_rows, dropped_rows=dropped_rows, predict_none=none)


class ThresholdTracker:
    """The optimal threshold of all rows seen so far, updated in O(log n).

    Feed rows one at a time (:meth:`update`) or in batches
    (:meth:`update_many`); ``threshold`` and ``cost`` are those
    :func:`optimal_threshold` would return for all rows so far. Each update
    and each query costs O(log n) for n distinct scores (a crit-bit tree of
    segment summaries, :mod:`distcal.core.tracker`). A row carries a 0/1 (or
    fractional) label and the class costs, or its own loss ``loss`` of being
    predicted positive.

    >>> t = ThresholdTracker()
    >>> for s, z in [(1, 1), (8, -2), (5, 3), (4, -4), (6, 5), (3, -6), (7, 7), (2, -8)]:
    ...     t.update(s, loss=z)
    >>> t.threshold, t.cost
    (2.0, -5.0)
    """

    def __init__(self, cost_fp: float = 1.0, cost_fn: float = 1.0):
        from .core.tracker import SummaryTree

        c_fp, c_fn = check_finite(cost_fp, "cost_fp"), check_finite(cost_fn, "cost_fn")
        assert c_fp is not None and c_fn is not None
        self.cost_fp, self.cost_fn = c_fp, c_fn
        self._tree = SummaryTree()
        self.n_rows = 0
        # Weight and positives of the rows scored +inf: the tree's sums at or
        # above a threshold cannot single them out.
        self._inf_w = self._inf_p = 0.0
        self._losses = False  # a row came with its own loss: no confusion to report

    def update(self, score: float, label: float | None = None, weight: float = 1.0, *,
               loss: float | None = None) -> None:
        """Add one row: ``label`` in [0, 1] (class costs) or ``loss`` (its own z).

        ``score``: the row's score (any number but NaN; +-inf allowed).
        ``weight``: finite and >= 0 (default 1); a row of weight 0 is not
        counted. Give exactly one of ``label`` and ``loss`` (finite).
        """
        # Comparisons written so that NaN fails them: one test per rule.
        score = float(score)
        if score != score:
            raise DataError("score is NaN")
        if not 0.0 <= weight < math.inf:
            raise DataError(f"weight must be finite and >= 0, got {weight!r}")
        if loss is None:
            if label is None:
                raise ValueError("give one of label and loss")
            if not 0.0 <= label <= 1.0:
                raise DataError(f"label must be in [0, 1], got {label!r}")
            wy = weight * label
            z = self.cost_fp * (weight - wy) - self.cost_fn * wy
            mass = abs(self.cost_fp) * (weight - wy) + abs(self.cost_fn) * wy
        else:
            if label is not None:
                raise ValueError("give only one of label and loss")
            if not -math.inf < loss < math.inf:
                raise DataError(f"loss must be finite, got {loss!r}")
            wy = 0.0
            z = weight * loss
            mass = abs(z)
        if weight:
            self._tree.add(score, float(z), float(mass), float(weight), float(wy))
            self.n_rows += 1
            self._losses |= loss is not None
            if score == math.inf:
                self._inf_w += float(weight)
                self._inf_p += float(wy)

    def update_many(self, scores: Any, labels: Any = None, weights: Any = None, *,
                    losses: Any = None) -> None:
        """Add many rows: validated and pooled by distinct score with numpy first.

        ``scores``, and either ``labels`` in [0, 1] (the class costs) or
        ``losses`` (each row's own loss, as ``loss`` of :meth:`update`),
        with ``weights`` (None: all 1): arrays of one length.
        """
        from .core.distinct import pool_ties
        from .core.rows import Problems

        if (labels is None) == (losses is None):
            raise ValueError("give exactly one of labels and losses")
        s = np.asarray(scores, dtype=np.float64).ravel()
        values = np.asarray(labels if losses is None else losses, dtype=np.float64).ravel()
        w = None if weights is None else np.asarray(weights, dtype=np.float64).ravel()
        if values.shape != s.shape or (w is not None and w.shape != s.shape):
            raise ValueError("scores, labels/losses and weights must have one length")
        name, role = ("labels", "label") if losses is None else ("losses", "loss")
        # No columns here: the message names the arguments instead.
        problems = Problems(s.shape[0])
        problems.check("scores", "score", s)
        problems.check(name, role, values)
        if w is not None:
            problems.check("weights", "weight", w)
        if problems.bad.any():
            raise DataError(problems.message("argument") + " (leave such rows out)")
        if w is not None:
            keep = w > 0
            s, values, w = s[keep], values[keep], w[keep]
        table = pool_ties(s, values, w)
        if losses is None:
            z = loss_per_score(table, self.cost_fp, self.cost_fn)
            mass = loss_mass(table, self.cost_fp, self.cost_fn)
            pos = table.positives
        else:
            # Each row's |w z| pooled: the mass of the terms of the pooled z.
            z, pos = table.positives, np.zeros(len(table))
            mass = pool_ties(s, np.abs(values), w).positives
        add = self._tree.add
        for args in zip(table.score.tolist(), z.tolist(), mass.tolist(), table.weight.tolist(),
                        pos.tolist()):
            add(*args)
        if len(table) and table.score[-1] == np.inf:
            self._inf_w += float(table.weight[-1])
            self._inf_p += float(pos[-1])
        self.n_rows += int(s.shape[0])
        self._losses |= losses is not None and len(table) > 0

    @property
    def threshold(self) -> float:
        """Predict positive iff score >= threshold (see :attr:`predict_none`)."""
        return self._tree.best()[1]

    @property
    def predict_none(self) -> bool:
        """Whether the best rule predicts nothing positive (not even +inf scores)."""
        return not self._tree.best()[0] < 0.0

    @property
    def cost(self) -> float:
        """Minimal total cost so far (class costs plus per-row losses)."""
        return self.cost_fn * self._tree.positives_total + self._tree.best()[0]

    @property
    def n_distinct(self) -> int:
        return len(self._tree)

    def summary(self) -> Any:
        """The segment summary of all rows so far (:class:`SegmentSummary`)."""
        tree = self._tree
        best, t, best_mass = tree.best()
        if t == math.inf:  # the rows scored +inf, or (best == 0) none
            bw, bp = (self._inf_w, self._inf_p) if best < 0.0 else (0.0, 0.0)
        else:
            bw, bp = tree.sums_at_or_above(t)
        return SegmentSummary(tree.total_z(), best, t, tree.weight_total, tree.positives_total,
                              bw, bp, tree.total_mass(), best_mass)

    def result(self) -> ThresholdResult:
        """What :func:`optimal_threshold` returns for these rows: with the confusion of
        the rows' labels, NaN once a row came with its own loss (as ``loss_col``'s)."""
        out = result_from_segment(self.summary(), self.cost_fp, self.cost_fn, False,
                                  self.n_rows, 0)
        if self._losses:
            return replace(out, tp=math.nan, fp=math.nan, tn=math.nan, fn=math.nan)
        return out
