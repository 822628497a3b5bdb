"""``distcal.evaluate``: calibration and discrimination of predicted probabilities."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .core import calibration_metrics as cm
from .core import metrics as m
from .core.bins import bin_edges
from .core.calibration_tests import calibration_test_partials, calibration_tests
from .core.distinct import DistinctTable
from .core.interval_widths import width_summary
from .core.keyed import GLOBAL, KeyedTable, KeySpec, global_ww
from .core.segment_metrics import combine_segment_partials, curve_frame, segment_partials
from .defaults import DEFAULTS
from .engines import get_engine, resolve_engine
from .errors import DataError, ParameterError, sums_overflow
from .jsonsafe import json_safe, key_value
from .logs import log, phase
from .params import (
    check_column_name,
    check_distinct_columns,
    check_finite,
    check_int,
    check_n_bins,
    check_on_invalid,
    check_roles,
    check_score_index,
    check_strategy,
    split_engine_options,
)

__all__ = ["EvaluationReport", "evaluate", "evaluate_many", "report_from_ranges"]


@dataclass
class EvaluationReport:
    """Metrics of one probability column (see :func:`evaluate`)."""

    prob_col: str
    n_rows: int
    weight_total: float
    dropped_rows: int
    brier: float
    log_loss: float
    ece: float
    mce: float
    auc: float
    reliability: float
    resolution: float
    uncertainty: float
    calibration_curve: pd.DataFrame
    roc: pd.DataFrame
    roc_hull: pd.DataFrame
    threshold: float
    confusion: dict[str, float]
    accuracy: float
    accuracy_interval: tuple[float, float]
    precision: float = float("nan")
    recall: float = float("nan")
    f1: float = float("nan")
    confidence: float = 0.95
    bin_edges: list[float] = field(default_factory=list)
    # Murphy's decomposition with one bin per distinct probability: exact,
    # brier = reliability_exact - resolution_exact + uncertainty.
    reliability_exact: float = float("nan")
    resolution_exact: float = float("nan")
    # ECE over equal-weight bins (as many as n_bins), and the smooth ECE of
    # Blasiok & Nakkiran (relplot's smECE) with its kernel bandwidth: relplot's
    # number for unit weights, unchanged when every weight is multiplied by one
    # factor (distcal.core.smooth_ece).
    adaptive_ece: float = float("nan")
    adaptive_mce: float = float("nan")
    smece: float = float("nan")
    smece_sigma: float = float("nan")
    smooth_curve: dict[str, Any] = field(default_factory=dict)
    # Number of distinct probabilities; ``roc`` holds every point of the
    # exact curve (one per distinct probability, plus (0, 0)) only when
    # roc_complete, else at most roc_points of them (hull vertices included).
    n_distinct: int = 0
    roc_complete: bool = True
    # evaluate(..., by=cols): one row per segment (the by columns, n_rows,
    # weight, base_rate, mean_prob, log_loss, brier, ece, mce, auc), the
    # worst calibrated (highest ECE) first; None without by.
    segments: pd.DataFrame | None = field(default=None, compare=False)
    # Spiegelhalter's (1986) z and its two-sided p-value, calibration-in-the-large
    # (mean p minus mean y) and its 95% normal interval (distcal.core.calibration_tests).
    spiegelhalter_z: float = float("nan")
    spiegelhalter_p: float = float("nan")
    citl: float = float("nan")
    citl_low: float = float("nan")
    citl_high: float = float("nan")
    # evaluate(..., interval_cols=("p0", "p1")): the distribution of the widths p1 - p0
    # (a dict: distcal.core.interval_widths.width_summary); None without interval_cols.
    interval_widths: Any = None

    def attach_segments(self, by: list[str], sums: Any) -> None:
        """Set ``segments`` from the ``by`` columns and every key's sums
        (:class:`~distcal.core.segment_metrics.SegmentEvaluation`)."""
        self.segments = sums.table(by)
        self._segments = (list(by), sums)

    @property
    def segment_by(self) -> list[str]:
        """The ``by`` columns of ``segments`` (empty without segments)."""
        seg = getattr(self, "_segments", None)
        return list(seg[0]) if seg is not None else []

    def segment_curve(self, key: Any) -> pd.DataFrame:
        """One segment's calibration curve (columns as ``calibration_curve``).

        ``key``: a value, or a tuple of values for several ``by`` columns.
        Over the report's bins; from the sums of the same pass as
        ``segments``. A key with no row is a ``KeyError``.
        """
        seg = getattr(self, "_segments", None)
        if seg is None:
            raise KeyError("this report has no segments (evaluate(..., by=...))")
        curve: pd.DataFrame = seg[1].curve(key if isinstance(key, tuple) else (key,),
                                           self.confidence)
        return curve

    def __repr__(self) -> str:
        return (f"EvaluationReport(prob_col={self.prob_col!r}, n_rows={self.n_rows}, "
                f"brier={self.brier:.4g}, log_loss={self.log_loss:.4g}, ece={self.ece:.4g}, "
                f"auc={self.auc:.4g})")

    def _repr_html_(self) -> str:
        """The metrics table and figures, for notebooks."""
        from .report import report_html_fragment

        return report_html_fragment(self)

    def plot(self, kind: str = "reliability", ax: Any = None, **kwargs: Any) -> Any:
        """A figure of this report on matplotlib Axes (created if not given).

        ``kind``: "reliability" (marker area proportional to bin weight,
        Wilson intervals, the diagonal), "roc" (with the convex hull) or
        "cost" (total cost against threshold, ``cost_fp``/``cost_fn``).
        Returns the Axes, as scikit-learn's ``CalibrationDisplay`` does.
        """
        from . import plots

        fn = {"reliability": plots.plot_reliability, "roc": plots.plot_roc,
              "cost": plots.plot_cost_curve}.get(kind)
        if fn is None:
            raise ValueError(f"kind must be 'reliability', 'roc' or 'cost', got {kind!r}")
        return fn(self, ax, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite numbers become None; :mod:`distcal.jsonsafe`)."""
        out = {k: json_safe(getattr(self, k)) for k in self.__dataclass_fields__
               if k != "segments"}
        if self.segments is not None:  # ±inf and NaN keys as text, not null
            keys = set(self.segment_by)
            out["segments"] = {c: [key_value(v) for v in col] if c in keys else json_safe(col)
                               for c, col in ((str(c), self.segments[c].tolist())
                                              for c in self.segments.columns)}
            out["segment_by"] = self.segment_by
        return out


def check_roc_points(roc_points: Any) -> int | None:
    """None (the whole curve) or an int >= 2."""
    if roc_points is None:
        return None
    return check_int(roc_points, 2, math.inf, "roc_points must be an integer >= 2 or None")


def _global_table(part: KeyedTable) -> DistinctTable:
    """A range's table of all rows (every valid row has the global key)."""
    g = part.global_index()
    assert g is not None
    return part.key_table(g)


def report_from_ranges(keyed: Any, *, prob_col: str, by: list[str] | None = None,
                       n_bins: int = 10, strategy: str = "uniform", bins: Any = None,
                       threshold: float = 0.5, confidence: float = 0.95,
                       roc_points: int | None = None) -> EvaluationReport:
    """Every metric from the keyed ranges of one probability column (any engine).

    ``keyed``: the engine's :class:`~distcal.engines.base.KeyedRanges`, keyed
    by the global key and, with ``by``, by segment. The sums every key needs
    (:mod:`distcal.core.segment_metrics`) are those of the global report
    and, with ``by``, of ``segments``, from one pass. ``prob_col`` (the
    column named in the report), ``n_bins``, ``strategy``, ``bins``,
    ``threshold``, ``confidence`` and ``roc_points``: as for :func:`evaluate`.

    With ``roc_points``, the ranges send only their ROC hull candidates in
    the first pass; the points at evenly spaced ranks ride along with the
    next pass that ``extra_metrics`` makes (the adaptive bins, which also
    need the ranges' offsets), so the curve costs no pass of its own
    (:func:`distcal.core.metrics.roc_plan`).
    """
    def global_map(fn: Any) -> list[Any]:
        return list(keyed.map(lambda part: fn(_global_table(part))))

    # More bins than rows (beyond the default's 10) is refused by the first, cheap pass,
    # before any bin is computed (a million bins on 2,000 rows took minutes).
    edges = (np.asarray(bins, dtype=np.float64) if bins is not None
             else bin_edges(global_map, n_bins, strategy,
                            rows_for_bins=n_bins > DEFAULTS.n_bins))
    check_bins(edges)
    full = roc_points is None

    def partials(part: KeyedTable) -> dict[str, Any]:
        t = _global_table(part)
        return {**m.range_partials(t, threshold, full), "keys": segment_partials(part, edges),
                "extra": cm.extra_range_partials(t),
                "tests": calibration_test_partials(t, global_ww(part))}

    parts = keyed.map(partials)
    sums = combine_segment_partials([q["keys"] for q in parts], keyed.spec.weight_col)
    g = sums.index(GLOBAL)
    w_total, positives = float(sums.metrics["weight"][g]), float(sums.y[g])
    if not math.isfinite(w_total):  # weights near 1e308: every metric would be NaN
        raise sums_overflow()
    res = m.combine_partials(parts, positives, float(sums.neg[g]))
    map_ranges = global_map
    samples: list[Any] = []
    plan: dict[str, Any] = {}
    if not full and parts:
        assert roc_points is not None
        plan = m.roc_plan(parts, [q["extra"]["first"] for q in parts], roc_points)
        at = plan["at"]

        def sample(t: Any) -> Any:
            return m.roc_sample(t, at)

        def map_ranges(fn: Any) -> list[Any]:  # the next pass also samples the curve
            if samples:
                return global_map(fn)
            both = global_map(lambda t: (fn(t), sample(t)))
            samples.extend(b[1] for b in both)
            return [b[0] for b in both]

    extra = cm.extra_metrics(map_ranges, [q["extra"] for q in parts], n_bins=len(edges) - 1,
                             sum_wyy=float(sums.wyy[g]))
    if plan:
        if not samples:
            samples = global_map(sample)
        roc = m.roc_select(plan, samples)
        hx, hy = plan["hull_fpr"], plan["hull_tpr"]
    else:
        roc = res["roc"]
        hx, hy = m.roc_hull(res["roc_pos"], res["roc_neg"])
    curve = curve_frame(sums.bins[g], confidence)
    true = curve["prob_true"].to_numpy()
    share = curve["weight"].to_numpy() / w_total
    gap = true - curve["prob_pred"].to_numpy()
    ybar = positives / w_total
    conf = res["confusion"]
    correct = conf["tp"] + conf["tn"]
    tp, fp, fn = conf["tp"], conf["fp"], conf["fn"]
    precision = tp / (tp + fp) if tp + fp > 0 else math.nan
    recall = tp / (tp + fn) if tp + fn > 0 else math.nan
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else math.nan
    test_sums = np.sum([q["tests"] for q in parts], axis=0)
    if np.isinf(test_sums).any():  # sums of w^2: weights from ~1e154 on
        raise sums_overflow("weights (their products)", keyed.spec.weight_col, keyed.n_rows)
    tests = calibration_tests(test_sums, w_total, positives)
    report = EvaluationReport(
        prob_col=prob_col, n_rows=keyed.n_rows, weight_total=w_total,
        dropped_rows=keyed.dropped_rows, brier=float(sums.metrics["brier"][g]),
        log_loss=float(sums.metrics["log_loss"][g]), ece=float(sums.metrics["ece"][g]),
        mce=float(sums.metrics["mce"][g]), auc=float(sums.metrics["auc"][g]),
        reliability=float(np.sum(share * gap * gap)),
        resolution=float(np.sum(share * (true - ybar) ** 2)), uncertainty=extra["uncertainty"],
        calibration_curve=curve,
        roc=pd.DataFrame(roc), roc_hull=pd.DataFrame({"fpr": hx, "tpr": hy}),
        threshold=float(threshold), confusion=conf, accuracy=correct / w_total,
        accuracy_interval=m.wilson_interval(correct, w_total, confidence),
        precision=precision, recall=recall, f1=f1, confidence=confidence,
        bin_edges=[float(e) for e in edges], reliability_exact=extra["reliability"],
        resolution_exact=extra["resolution"], adaptive_ece=extra["adaptive_ece"],
        adaptive_mce=extra["adaptive_mce"], smece=extra["smece"],
        smece_sigma=extra["smece_sigma"], smooth_curve=extra["smooth_curve"],
        n_distinct=int(res["n_distinct"]), roc_complete=len(roc["fpr"]) == res["n_distinct"] + 1,
        **tests)
    if by is not None:
        report.attach_segments(by, sums)
        log.info("evaluate by %s: %d segments", by, len(sums.keys) - 1)
    return report


def check_interval_cols(interval_cols: Any, roles: dict[str, Any]) -> tuple[str, str] | None:
    """``interval_cols`` as a pair of column names (None: not given), before any read.

    Two distinct non-empty names, neither one of the other ``roles``'
    columns (a ``DataError`` as for any column given twice).
    """
    if interval_cols is None:
        return None
    if isinstance(interval_cols, str) or not isinstance(interval_cols, (list, tuple)) \
            or len(interval_cols) != 2:
        raise ParameterError("interval_cols must be two column names (p0, p1), got "
                             f"{interval_cols!r}")
    for c in interval_cols:
        check_column_name(c, "each of interval_cols")
    check_distinct_columns({**roles, "interval_cols": list(interval_cols)})
    return str(interval_cols[0]), str(interval_cols[1])


def check_bins(bins: Any) -> None:
    """Explicit bin edges: at least two numbers, non-decreasing, finite (a bin of
    probabilities has finite edges; an infinite one could not be drawn)."""
    try:
        edges = np.asarray(bins, dtype=np.float64)
    except (TypeError, ValueError):  # text, ragged lists
        edges = np.full(1, np.nan)
    if edges.ndim != 1 or edges.shape[0] < 2 or not np.all(np.diff(edges) >= 0) \
            or not np.isfinite(edges).all():
        raise ParameterError(f"bins must be at least two non-decreasing finite edges, got "
                             f"{bins!r}")


def _check_evaluation_params(n_bins: int, strategy: str, threshold: float,
                             confidence: float, on_invalid: str, bins: Any = None) -> None:
    check_on_invalid(on_invalid)
    if bins is not None:
        check_bins(bins)
    check_n_bins(n_bins)
    check_strategy(strategy)
    check_finite(threshold, "threshold")
    c = check_finite(confidence, "confidence")
    if not (c is not None and 0.0 < c < 1.0):
        raise ParameterError(f"confidence must be in (0, 1), got {confidence!r}")


def evaluate(data: Any, prob_col: str = DEFAULTS.prob_col, label_col: str = DEFAULTS.label_col,
             weight_col: str | None = DEFAULTS.weight_col, n_bins: int = DEFAULTS.n_bins,
             strategy: str = DEFAULTS.strategy, threshold: float = DEFAULTS.threshold,
             engine: str = DEFAULTS.engine, *, bins: Any = None,
             confidence: float = DEFAULTS.confidence, on_invalid: str = DEFAULTS.on_invalid,
             roc_points: int | None = 1000, score_index: int | None = None,
             prob_cols: list[str] | None = None, by: str | list[str] | None = None,
             interval_cols: tuple[str, str] | None = None, **engine_opts: Any) -> Any:
    """Calibration and discrimination metrics of the probabilities in ``prob_col``.

    Every metric is an exact sum over the ordered ranges of distinct
    probabilities, so every engine gives the same numbers.

    Parameters
    ----------
    data : pandas.DataFrame, pyarrow.Table, str or path, Spark or Dask DataFrame
        The rows; or summaries of rows (:func:`distcal.summarize`, as for
        :func:`distcal.fit`), whose scores are evaluated as probabilities
        (``prob_col`` is then the summaries' score column).
    prob_col, label_col, weight_col : str
        Probabilities in [0, 1], labels 0/1 (or rates), weights (None: all 1).
    n_bins, strategy : int, {"uniform", "quantile"}
        The calibration curve's bins, scikit-learn's: edges
        ``linspace(0, 1, n_bins + 1)`` or the (weighted) quantiles; ``bins``
        gives explicit edges instead (a row's bin is scikit-learn's
        ``searchsorted(edges[1:-1], p)``: rows below the first edge count in
        the first bin, rows above the last in the last). More bins than valid rows (and more
        than the default 10) is a :class:`~distcal.errors.ParameterError`,
        raised before any bin is computed.
    threshold : float
        The confusion, accuracy, precision, recall and F1 are those of the
        rule "positive iff prob >= threshold".
    engine, on_invalid, **engine_opts
        As for :func:`distcal.fit`.
    confidence : float
        Of the Wilson intervals (accuracy, each bin's observed rate), which
        read the weights as counts of rows.
    roc_points : int or None
        At most this many points of the exact ROC curve in ``roc``: all of
        them when there are fewer distinct probabilities, else points at
        evenly spaced ranks plus every vertex of the convex hull and both
        ends (the hull alone may exceed it). Only these points reach the
        driver. None: every point, one per distinct probability. The AUC,
        the hull and the best cost read from the curve are exact either way.
    score_index : int, optional
        ``prob_col`` holds vectors (e.g. a pyspark.ml ``probability``) and
        this element of each is the probability (as for :func:`distcal.fit`;
        not with ``by``).
    prob_cols : list of str, optional
        Multiclass probabilities, one column per class (or pass a vector
        column as ``prob_col``); labels are then class indices 0..K-1 and
        the result is a
        :class:`~distcal.multiclass_evaluation.MulticlassEvaluationReport`
        (log loss, Brier summed over classes, accuracy, top-label and
        class-wise ECE over ``n_bins`` uniform bins, confusion matrix);
        ``strategy``, ``bins``, ``threshold``, ``confidence`` and
        ``roc_points`` do not apply (given, a ParameterError).
    by : str or list of str, optional
        Also evaluate each distinct value (tuple) of these columns:
        ``rep.segments`` is a DataFrame with one row per segment (the ``by``
        columns, ``n_rows``, ``weight``, ``base_rate``, ``mean_prob``,
        ``log_loss``, ``brier``, ``ece``, ``mce`` over the report's bins,
        ``auc``: NaN where one class is missing), the highest ECE first;
        ``rep.segment_curve(key)`` one segment's calibration curve. The rest
        of the report is the global one, as without ``by``. One range
        shuffle for all segments (docs/segments.md); rows with a null key
        count in the global report only.
    interval_cols : (str, str), optional
        Two columns holding an interval [p0, p1] per row, as a Venn-Abers
        model's ``transform(..., interval_cols=("p0", "p1"))`` writes them:
        ``rep.interval_widths`` then describes the widths p1 - p0 over the
        rows evaluated (weighted): ``rows``, ``weight``, ``mean``, ``min``,
        ``max`` (exact), ``median`` and ``p90`` (read from a fixed histogram
        of 100 log-spaced bins per decade: within 2.33% relative, 1e-6
        absolute below 1e-6) and ``histogram`` (``edges``, ``weight``: 10
        bins per decade, the report's figure). Computed with the row checks
        of the same pass. Both columns are checked as probabilities (in
        [0, 1]) and p0 <= p1: a row breaking either is invalid (a
        ``DataError`` naming the column and the count, or dropped with
        ``on_invalid="drop"``). Binary probabilities only.

    Returns
    -------
    EvaluationReport
        Brier score and Murphy's decomposition over the bins (reliability -
        resolution + uncertainty equals the Brier score only when every bin
        holds one distinct probability), log loss (probabilities clipped to
        [eps, 1 - eps], eps float64's epsilon for any input type), ECE and MCE,
        exact AUC (ties count one half), the ROC curve and its convex hull, the
        confusion matrix and accuracy.

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"prob": [.1, .4, .35, .8], "label": [0, 0, 1, 1]})
    >>> rep = distcal.evaluate(df)
    >>> rep.auc, round(rep.brier, 4)
    (0.75, 0.1581)
    """
    _check_evaluation_params(n_bins, strategy, threshold, confidence, on_invalid, bins)
    roc_points = check_roc_points(roc_points)
    score_index = check_score_index(score_index)
    check_roles(score_col=prob_col, score_cols=prob_cols, label_col=label_col,
                weight_col=weight_col, score="prob")
    interval_cols = check_interval_cols(interval_cols, {
        "prob_cols" if prob_cols is not None else "prob_col":
            list(prob_cols) if prob_cols is not None else prob_col,
        "label_col": label_col, "weight_col": weight_col})
    if interval_cols is not None and prob_cols is not None:
        raise ParameterError("interval_cols goes with one binary probability column "
                             "(prob_col), not with prob_cols")
    from .summary import summary_source

    source = summary_source(data)
    if source is not None:  # summaries: their scores are the probabilities evaluated
        if interval_cols is not None:
            raise ParameterError("a summary holds no intervals: interval_cols does not apply")
        if prob_cols is not None or score_index is not None:
            raise ParameterError("a summary holds one score per row: prob_cols and "
                                 "score_index do not apply")
        prob_col, label_col, weight_col, by = source.own_columns(
            "evaluate", prob_col=(prob_col, DEFAULTS.prob_col),
            label_col=(label_col, DEFAULTS.label_col), weight_col=(weight_col, None),
            by=(by, None))
        data = source
    columns = {"prob": prob_col, "label": label_col, "weight": weight_col}
    name = resolve_engine(data, engine)
    engine_impl = get_engine(name)
    _, engine_opts = split_engine_options("evaluate", None, engine_opts, engine_impl.options)
    names = None
    if by is not None:
        from .keyed_fit import check_by

        names = check_by(by, columns, 0.0)
        if score_index is not None or prob_cols is not None:
            raise ParameterError("by= evaluates one plain probability column; score_index and "
                                 "prob_cols cannot be combined with by= in this version")
        if engine_impl.is_vector_column(data, prob_col):
            raise DataError(f"column '{prob_col}' (prob) holds vectors (multiclass "
                            "probabilities); evaluate(by=) takes one probability per row in "
                            "this version")
    if score_index is None and (prob_cols is not None
                                or engine_impl.is_vector_column(data, prob_col)):
        from .multiclass_evaluation import evaluate_multiclass

        if interval_cols is not None:
            raise DataError(f"column '{prob_col}' (prob) holds vectors (multiclass "
                            "probabilities); interval_cols goes with one probability per row")
        _refuse_binary_options(strategy, bins, threshold, confidence, roc_points)
        prediction = prob_col if prob_cols is None else [str(c) for c in prob_cols]
        return next(iter(evaluate_multiclass(data, name, [prediction], label_col, weight_col,
                                             n_bins, on_invalid, engine_opts).values()))
    return _report(engine_impl, data, KeySpec(score_col=prob_col, label_col=label_col,
                                             weight_col=weight_col, by=tuple(names or ()),
                                             probabilities=True, score_index=score_index,
                                             interval_cols=interval_cols),
                   on_invalid, engine_opts, prob_col=prob_col, by=names, n_bins=n_bins,
                   strategy=strategy, bins=bins, threshold=threshold, confidence=confidence,
                   roc_points=roc_points)


def _refuse_binary_options(strategy: str, bins: Any, threshold: float, confidence: float,
                           roc_points: int | None) -> None:
    """A multiclass report has its bins (``n_bins`` uniform) and no threshold, interval or
    ROC: these options, given, are a ParameterError rather than ignored."""
    given = [name for name, on in (
        ("strategy", strategy != DEFAULTS.strategy), ("bins", bins is not None),
        ("threshold", threshold != DEFAULTS.threshold),
        ("confidence", confidence != DEFAULTS.confidence), ("roc_points", roc_points != 1000))
        if on]
    if given:
        raise ParameterError(f"{', '.join(given)}: binary evaluation only; a multiclass "
                             "report takes n_bins (uniform bins of the top-label and "
                             "class-wise ECE)")


def _report(engine_impl: Any, data: Any, spec: KeySpec, on_invalid: str,
            engine_opts: dict[str, Any], **kw: Any) -> EvaluationReport:
    """:func:`report_from_ranges` over the keyed rows of one probability column."""
    # The bins' passes, then the partials and the adaptive bins (offsets from
    # the partials): cluster engines keep the ranges between passes.
    passes = 2 if kw["bins"] is not None or kw["strategy"] == "uniform" else 4
    by = list(spec.by)
    with engine_impl.open_keyed(data, spec, on_invalid=on_invalid, passes=passes,
                                **engine_opts) as keyed:
        with phase("evaluate by %s", by) if by else nullcontext():
            report = report_from_ranges(keyed, **kw)
        if spec.interval_cols is not None:
            report.interval_widths = width_summary(keyed.interval_widths, spec.interval_cols)
    return report


def evaluate_many(data: Any, prob_cols: list[Any], label_col: str = DEFAULTS.label_col,
                  weight_col: str | None = DEFAULTS.weight_col, n_bins: int = DEFAULTS.n_bins,
                  strategy: str = DEFAULTS.strategy, threshold: float = DEFAULTS.threshold,
                  engine: str = DEFAULTS.engine, *, bins: Any = None,
                  confidence: float = DEFAULTS.confidence,
                  on_invalid: str = DEFAULTS.on_invalid, roc_points: int | None = 1000,
                  interval_cols: tuple[str, str] | None = None,
                  by: str | list[str] | None = None,
                  **engine_opts: Any) -> dict[str, Any]:
    """:func:`evaluate` for several probability columns (e.g. raw and calibrated).

    A row with a problem in any of the columns counts as invalid for all,
    so the reports describe the same rows, with ``by`` (binary columns:
    each report's ``segments``, as :func:`evaluate`'s) as without. Each column has its own keyed
    pass over the input (each orders the rows differently), which checks
    every column.

    Multiclass predictions (several models compared): each entry of
    ``prob_cols`` is a vector/array column of K probabilities, or a list of
    K per-class columns; labels are class indices 0..K-1 and every report
    is a :class:`~distcal.multiclass_evaluation.MulticlassEvaluationReport`
    (see :func:`~distcal.multiclass_evaluation.evaluate_multiclass`:
    the same rows for all of them). Binary and multiclass
    predictions cannot be mixed.

    ``interval_cols`` (binary columns only): as for :func:`evaluate`; every
    column's pass checks the interval, and every report carries the same
    ``interval_widths``. The other parameters are as for :func:`evaluate`.

    Returns
    -------
    dict
        Column name -> :class:`EvaluationReport`, in the order given (a list
        of per-class columns is named by its columns joined with commas).

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"raw": [.1, .4, .35, .8], "cal": [.0, .5, .5, 1.],
    ...                    "label": [0, 0, 1, 1]})
    >>> {c: r.auc for c, r in distcal.evaluate_many(df, ["raw", "cal"]).items()}
    {'raw': 0.75, 'cal': 0.875}
    """
    _check_evaluation_params(n_bins, strategy, threshold, confidence, on_invalid, bins)
    roc_points = check_roc_points(roc_points)
    if isinstance(prob_cols, str):
        raise TypeError("prob_cols must be a list of column names")
    entries = [[str(c) for c in e] if isinstance(e, (list, tuple)) else e for e in prob_cols]
    # dict keys dedupe in order; a list of per-class columns is keyed by its tuple
    entries = list({tuple(e) if isinstance(e, list) else e: e for e in entries}.values())
    if not entries:
        raise ValueError("prob_cols is empty")
    for e in entries:  # each prediction's columns distinct, none the label or the weight
        check_roles(score_col=e, score_cols=e if isinstance(e, list) else None,
                    label_col=label_col, weight_col=weight_col, score="prob")
        interval_cols = check_interval_cols(interval_cols, {
            "prob_cols": e, "label_col": label_col, "weight_col": weight_col})
    name = resolve_engine(data, engine)
    engine_impl = get_engine(name)
    _, engine_opts = split_engine_options("evaluate_many", None, engine_opts,
                                          engine_impl.options)
    multi = [isinstance(e, list) or engine_impl.is_vector_column(data, e) for e in entries]
    names = None
    if by is not None:
        from .keyed_fit import check_by

        names = check_by(by, {"label": label_col, "weight": weight_col}, 0.0)
        for n in names:
            if any(n == e or (isinstance(e, list) and n in e) for e in entries):
                raise ParameterError(f"by column {n!r} is also a prob column")
        if any(multi):
            raise ParameterError("by= evaluates probability columns of one binary "
                                 "probability per row, not multiclass predictions")
    if any(multi):
        if not all(multi):
            plain = [e for e, m in zip(entries, multi) if not m]
            raise ValueError("prob_cols mixes multiclass predictions (vector columns or lists "
                             f"of per-class columns) with probability columns {plain}; "
                             "evaluate them separately")
        from .multiclass_evaluation import evaluate_multiclass

        if interval_cols is not None:
            raise ParameterError("interval_cols goes with binary probability columns, not "
                                 "with multiclass predictions")
        _refuse_binary_options(strategy, bins, threshold, confidence, roc_points)

        return evaluate_multiclass(data, name, entries, label_col, weight_col, n_bins,
                                   on_invalid, engine_opts)
    kw = {"n_bins": n_bins, "strategy": strategy, "bins": bins, "threshold": threshold,
          "confidence": confidence, "roc_points": roc_points}
    # One keyed pass per column (each orders the rows by its own values); a row
    # invalid in any column is invalid for all (``check_cols``).
    cols = [str(e) for e in entries]
    return {c: _report(engine_impl, data,
                       KeySpec(score_col=c, label_col=label_col, weight_col=weight_col,
                               by=tuple(names or ()), probabilities=True,
                               check_cols=tuple(e for e in cols if e != c),
                               interval_cols=interval_cols),
                       on_invalid, engine_opts, prob_col=c, by=names, **kw) for c in cols}
