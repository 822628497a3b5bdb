"""``distcal.evaluate`` of multiclass probabilities, on every engine.

The probabilities are a vector column (``prob_col``) or one column per
class (``prob_cols``); the labels are class indices 0..K-1. The rows are
checked as for a multiclass fit (the same problems and words, plus
probabilities outside [0, 1]); then every partition computes the sums of
:func:`distcal.core.multiclass_metrics.multiclass_sums` where it lives
(the local engine: one table; Dask: each partition; Spark: one
``mapInArrow``), and the driver adds them up.

:func:`evaluate_many_multiclass` compares several multiclass predictions
(each a vector column or a list of per-class columns) over the same rows:
a row with a problem in any of them counts as invalid for all. The local
engine reads the input once and checks and sums every prediction in that
one pass; Spark and Dask make one pass per prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .core.multiclass_metrics import add_sums, metrics_from_sums, multiclass_sums
from .errors import DataError

__all__ = ["MulticlassEvaluationReport", "evaluate_multiclass", "evaluate_many_multiclass",
           "prediction_name"]


@dataclass
class MulticlassEvaluationReport:
    """Metrics of multiclass probabilities (:mod:`distcal.core.multiclass_metrics`).

    Attributes
    ----------
    log_loss, brier, accuracy : float
        scikit-learn's multiclass ``log_loss`` and ``brier_score_loss``
        (sum over classes), and the accuracy of the argmax (ties to the
        lowest class), all weighted.
    ece : float
        Top-label ECE over ``n_bins`` uniform bins on [0, 1].
    classwise_ece : float
        The mean over classes of each class's one-vs-rest ECE
        (``per_class_ece``).
    confusion_matrix : ndarray (K, K)
        Weighted counts, rows = true class, columns = argmax.
    top_label_curve, class_curves : pandas DataFrame, list of DataFrames
        Reliability curves (``prob_pred``, ``prob_true``, ``weight``, one row
        per non-empty bin): of the top label, and of every class (one-vs-rest:
        p_k against [y = k]), from the same pass as the metrics.
    prob_col : str
        The name of the prediction: its vector column, or its per-class
        columns joined by commas (``prob_cols``).
    prob_cols : list of str or None
        The per-class columns, when the prediction was given that way.
    """

    n_classes: int
    n_rows: int
    weight_total: float
    dropped_rows: int
    n_bins: int
    log_loss: float
    brier: float
    accuracy: float
    ece: float
    classwise_ece: float
    per_class_ece: list[float]
    confusion_matrix: np.ndarray
    top_label_curve: pd.DataFrame = field(repr=False)
    class_curves: list[pd.DataFrame] = field(repr=False)
    prob_col: str = "prob"
    prob_cols: list[str] | None = None

    @property
    def class_names(self) -> list[str]:
        """A label per class: its probability column, else its index."""
        if self.prob_cols is not None and len(self.prob_cols) == self.n_classes:
            return [f"{k} ({c})" for k, c in enumerate(self.prob_cols)]
        return [str(k) for k in range(self.n_classes)]

    def _repr_html_(self) -> str:
        """The metrics, the confusion matrix and the figures, for notebooks."""
        from .report import report_html_fragment

        return report_html_fragment(self)

    def plot(self, kind: str = "reliability", ax: Any = None) -> Any:
        """A figure of this report on matplotlib Axes (created if not given).

        ``kind``: "reliability" (the top-label curve: accuracy of the argmax
        against its probability), "classes" (one one-vs-rest curve per
        class; small multiples when K > 6, ``ax`` then ignored) or
        "confusion" (heatmap, rows = true class, shaded by row share).
        Returns the Axes (the first panel for small multiples).
        """
        from . import plots_multiclass as pm

        fn = {"reliability": pm.plot_top_label_reliability,
              "classes": pm.plot_class_reliability,
              "confusion": pm.plot_confusion_matrix}.get(kind)
        if fn is None:
            raise ValueError("kind must be 'reliability', 'classes' or 'confusion', "
                             f"got {kind!r}")
        return fn(self, ax)

    @property
    def calibration_curve(self) -> pd.DataFrame:
        """The top-label reliability curve."""
        return self.top_label_curve

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: numbers, lists, and the curves as lists of records."""
        return {"prob_col": self.prob_col, "prob_cols": self.prob_cols,
                "n_classes": self.n_classes, "n_rows": self.n_rows,
                "weight_total": self.weight_total, "dropped_rows": self.dropped_rows,
                "n_bins": self.n_bins, "log_loss": self.log_loss, "brier": self.brier,
                "accuracy": self.accuracy, "ece": self.ece,
                "classwise_ece": self.classwise_ece,
                "per_class_ece": [float(e) for e in self.per_class_ece],
                "confusion_matrix": self.confusion_matrix.tolist(),
                "top_label_curve": self.top_label_curve.to_dict("records"),
                "class_curves": [c.to_dict("records") for c in self.class_curves]}


class _Sums:
    """The evaluation sums of one part of the rows (shipped to the workers as is)."""

    def __init__(self, n_bins: int):
        self.n_bins = n_bins

    def __call__(self, rows: Any) -> Any:
        s = rows.score
        return multiclass_sums(_two_columns(s) if s.shape[1] == 1 else s,
                               rows.label.astype(np.intp), rows.weight, self.n_bins)


def evaluate_multiclass(data: Any, engine: str, prob_col: str | None,
                        prob_cols: list[str] | None, label_col: str, weight_col: str | None,
                        n_bins: int, on_invalid: str,
                        engine_opts: dict[str, Any]) -> MulticlassEvaluationReport:
    """The report of :class:`MulticlassEvaluationReport` on any engine (module docstring).

    One pass over the rows (the engine's ``map_rows`` of the keyed pass,
    which reads and checks them as every engine does); each part's sums
    are added on the driver.
    """
    from .core.keyed import KeySpec
    from .core.rows import check_score_args
    from .engines import get_engine

    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    cols = check_score_args(None if prob_cols is not None else prob_col, prob_cols)
    spec = KeySpec(score_col=None if cols is not None else prob_col, label_col=label_col,
                   weight_col=weight_col, score_cols=None if cols is None else tuple(cols),
                   multiclass=True, per_class=False, probabilities=True)
    with get_engine(engine).open_keyed(data, spec, on_invalid=on_invalid,
                                       **engine_opts) as rows:
        parts = rows.map_rows(_Sums(n_bins))
        k, dropped = rows.n_classes, rows.dropped_rows
    m = metrics_from_sums(add_sums(parts))
    return MulticlassEvaluationReport(n_classes=k, dropped_rows=dropped, n_bins=n_bins,
                                      prob_col=prediction_name(prob_col, prob_cols),
                                      prob_cols=prob_cols, **m)


def prediction_name(prob_col: str | None, prob_cols: list[str] | None) -> str:
    """The name of one prediction: its vector column, or its per-class columns joined."""
    if prob_cols is not None:
        return ",".join(prob_cols)
    return str(prob_col)


def evaluate_many_multiclass(data: Any, engine: str,
                             predictions: list[tuple[str | None, list[str] | None]],
                             label_col: str, weight_col: str | None, n_bins: int,
                             on_invalid: str, engine_opts: dict[str, Any]
                             ) -> dict[str, MulticlassEvaluationReport]:
    """One report per prediction ``(prob_col, None)`` or ``(None, prob_cols)``, same rows.

    The local engine reads and checks the rows once for all predictions and
    computes every prediction's sums in that pass; a row with a problem in
    any prediction is left out of every report. Spark and Dask make one
    pass per prediction, which checks that prediction only: they describe
    the same rows when no row is invalid (``on_invalid="raise"`` fails on
    any), so with several predictions a dropped row there is refused
    (:func:`_check_same_rows`) rather than risking reports over different
    rows.
    """
    if engine == "local":
        return _local_many(data, predictions, label_col, weight_col, n_bins, on_invalid)
    out = {prediction_name(c, cs): evaluate_multiclass(data, engine, c, cs, label_col,
                                                       weight_col, n_bins, on_invalid,
                                                       engine_opts)
           for c, cs in predictions}
    _check_same_rows(out)
    return out


def _check_same_rows(reports: dict[str, MulticlassEvaluationReport]) -> None:
    """Cluster engines, several predictions: no dropped row (each pass checks its own)."""
    if len(reports) > 1 and any(r.dropped_rows for r in reports.values()):
        counts = ", ".join(f"'{name}': {r.dropped_rows}" for name, r in reports.items())
        raise DataError(f"invalid rows dropped per prediction ({counts}): on Spark and Dask "
                        "each multiclass prediction is checked in its own pass, so the "
                        "reports could describe different rows; filter the invalid rows out "
                        "first, or evaluate the predictions one at a time")


def _local_many(data: Any, predictions: list[tuple[str | None, list[str] | None]],
                label_col: str, weight_col: str | None, n_bins: int, on_invalid: str
                ) -> dict[str, MulticlassEvaluationReport]:
    """Every prediction's sums from one read of a local input (see the module docstring)."""
    from .core.rows import (
        check_score_args,
        fit_rows,
        open_input,
        problems_message,
        score_names,
    )

    if on_invalid not in ("raise", "drop"):
        raise ValueError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    checked = [(c, check_score_args(c, cs)) for c, cs in predictions]
    names = [n for c, cs in checked for n in score_names(c, cs)] + [label_col]
    if weight_col is not None:
        names.append(weight_col)
    table = open_input(data, list(dict.fromkeys(names)))
    rows = [fit_rows(table, "evaluate", c, cs, label_col, weight_col) for c, cs in checked]
    bad = np.zeros(len(rows[0][1]), dtype=bool)
    items: dict[tuple[str, str], int] = {}
    for *_, problems in rows:
        bad |= problems.bad
        for column, problem, count in problems.items:  # label and weight: once
            items.setdefault((column, problem), count)
    dropped = int(np.count_nonzero(bad))
    if dropped and on_invalid == "raise":
        raise DataError(problems_message([(c, p, n) for (c, p), n in items.items()])
                        + " (pass on_invalid='drop' to drop such rows)")
    keep = ~bad
    weights = rows[0][2]
    if weights is not None:
        with np.errstate(invalid="ignore"):
            keep &= weights > 0
    if not keep.any():
        raise DataError("no rows to evaluate (after dropping invalid and zero-weight rows)")
    out: dict[str, MulticlassEvaluationReport] = {}
    for (c, cs), (scores, labels, w, k, _) in zip(checked, rows):
        s = scores[keep]
        s = _two_columns(s) if s.shape[1] == 1 else s
        sums = multiclass_sums(s, labels[keep].astype(np.intp),
                               None if w is None else w[keep], n_bins)
        out[prediction_name(c, cs)] = MulticlassEvaluationReport(
            n_classes=k, dropped_rows=dropped, n_bins=n_bins, prob_col=prediction_name(c, cs),
            prob_cols=cs, **metrics_from_sums(sums))
    return out


def _two_columns(s: np.ndarray) -> np.ndarray:
    """One probability column (of class 1) as the pair (1 - p, p)."""
    p = s[:, -1]
    return np.column_stack([1.0 - p, p])
