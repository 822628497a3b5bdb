"""``distcal.evaluate`` of multiclass probabilities, on every engine.

The probabilities are a vector column (``prob_col``) or one column per
class (``prob_cols``); the labels are class indices 0..K-1. The rows are
checked as for a multiclass fit (the same problems and words, plus
probabilities outside [0, 1]); then every partition computes the sums of
:func:`distcal.core.multiclass_metrics.multiclass_sums` where it lives
(the engine's ``map_rows``: the local engine's batches, Dask's partitions,
Spark's ``mapInArrow``), and the driver adds them up.

:func:`evaluate_multiclass` compares one or several multiclass predictions
(each a vector column or a list of per-class columns) over the same rows
(a row invalid in any of them is left out of all), one pass per prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .core.multiclass_metrics import add_sums, metrics_from_sums, multiclass_sums
from .errors import ParameterError

__all__ = ["MulticlassEvaluationReport", "evaluate_multiclass"]


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
        if s.shape[1] == 1:  # one probability column (of class 1): the pair (1 - p, p)
            s = np.column_stack([1.0 - s[:, 0], s[:, 0]])
        return multiclass_sums(s, rows.label.astype(np.intp), rows.weight, self.n_bins)


def evaluate_multiclass(data: Any, engine: str, predictions: list[str | list[str]],
                        label_col: str, weight_col: str | None, n_bins: int, on_invalid: str,
                        engine_opts: dict[str, Any]) -> dict[str, MulticlassEvaluationReport]:
    """One :class:`MulticlassEvaluationReport` per prediction (a vector column, or a list of
    per-class columns, named by its columns joined with commas) on any engine.

    One pass per prediction (the engine's ``map_rows`` of the keyed pass,
    which reads and checks the rows as every engine does; each part's sums
    are added on the driver), each checking every prediction's columns: a
    row with a problem in any prediction is left out of every report.
    """
    from .core.keyed import KeySpec
    from .core.rows import check_score_args
    from .engines import get_engine

    entries = [tuple(p) if isinstance(p, list) else p for p in predictions]
    names = [",".join(p) if isinstance(p, list) else str(p) for p in predictions]
    for i, name in enumerate(names):
        if name in names[:i]:  # one report per name: the second would replace the first
            first = predictions[names.index(name)]
            raise ParameterError(f"predictions {first!r} and {predictions[i]!r} are both "
                                 f"named {name!r} (a list of columns is named by its columns "
                                 "joined with commas); rename a column to tell them apart")
    reports = {}
    for i, p in enumerate(predictions):
        cols = check_score_args(None, p) if isinstance(p, list) else None
        spec = KeySpec(score_col=None if cols is not None else str(p), label_col=label_col,
                       weight_col=weight_col, score_cols=None if cols is None else tuple(cols),
                       multiclass=True, per_class=False, probabilities=True,
                       check_cols=tuple(e for j, e in enumerate(entries) if j != i))
        with get_engine(engine).open_keyed(data, spec, on_invalid=on_invalid,
                                           **engine_opts) as rows:
            parts = rows.map_rows(_Sums(n_bins))
            k, dropped = rows.n_classes, rows.dropped_rows
        name = names[i]
        reports[name] = MulticlassEvaluationReport(
            n_classes=k, dropped_rows=dropped, n_bins=n_bins, prob_col=name, prob_cols=cols,
            **metrics_from_sums(add_sums(parts)))
    return reports
