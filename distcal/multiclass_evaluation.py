"""``distcal.evaluate`` of multiclass probabilities, on every engine.

The probabilities are a vector column (``prob_col``) or one column per
class (``prob_cols``); the labels are class indices 0..K-1. The rows are
checked as for a multiclass fit (the same problems and words, plus
probabilities outside [0, 1]); then every partition computes the sums of
:func:`distcal.core.multiclass_metrics.multiclass_sums` where it lives
(the local engine: one table; Dask: each partition; Spark: one
``mapInArrow``), and the driver adds them up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .core.multiclass_metrics import add_sums, metrics_from_sums, multiclass_sums

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
        per non-empty bin): of the top label, and of every class.
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

    @property
    def calibration_curve(self) -> pd.DataFrame:
        """The top-label reliability curve."""
        return self.top_label_curve

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: numbers, lists, and the curves as lists of records."""
        return {"n_classes": self.n_classes, "n_rows": self.n_rows,
                "weight_total": self.weight_total, "dropped_rows": self.dropped_rows,
                "n_bins": self.n_bins, "log_loss": self.log_loss, "brier": self.brier,
                "accuracy": self.accuracy, "ece": self.ece,
                "classwise_ece": self.classwise_ece,
                "per_class_ece": [float(e) for e in self.per_class_ece],
                "confusion_matrix": self.confusion_matrix.tolist(),
                "top_label_curve": self.top_label_curve.to_dict("records"),
                "class_curves": [c.to_dict("records") for c in self.class_curves]}


def _local_sums(data: Any, prob_col: str | None, prob_cols: list[str] | None, label_col: str,
                weight_col: str | None, on_invalid: str, n_bins: int
                ) -> tuple[list[dict[str, np.ndarray]], int, int]:
    from .multiclass_rows import read_fit_input

    # prob_cols, when given, is the prediction (prob_col then keeps its default)
    scores, labels, weights, k, dropped, _ = read_fit_input(
        data, "evaluate", None if prob_cols is not None else prob_col, prob_cols, label_col,
        weight_col, on_invalid)
    s = _two_columns(scores) if scores.shape[1] == 1 else scores
    return [multiclass_sums(s, labels, weights, n_bins)], dropped, k


def evaluate_multiclass(data: Any, engine: str, prob_col: str | None,
                        prob_cols: list[str] | None, label_col: str, weight_col: str | None,
                        n_bins: int, on_invalid: str,
                        engine_opts: dict[str, Any]) -> MulticlassEvaluationReport:
    """The report of :class:`MulticlassEvaluationReport` on any engine (module docstring)."""
    if engine == "local":
        parts, dropped, k = _local_sums(data, prob_col, prob_cols, label_col, weight_col,
                                        on_invalid, n_bins)
    else:
        from .multiclass_engines import open_multiclass_rows

        with open_multiclass_rows(engine, data, method="evaluate", score_col=prob_col,
                                  score_cols=prob_cols, label_col=label_col,
                                  weight_col=weight_col, on_invalid=on_invalid,
                                  **engine_opts) as rows:
            k, dropped = rows.n_classes, rows.dropped_rows
            k_cols = rows.k_cols

            def sums(s: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> Any:
                return multiclass_sums(_two_columns(s) if k_cols == 1 else s, y, w, n_bins)

            parts = rows.map_rows(sums)
    m = metrics_from_sums(add_sums(parts))
    return MulticlassEvaluationReport(n_classes=k, dropped_rows=dropped, n_bins=n_bins, **m)


def _two_columns(s: np.ndarray) -> np.ndarray:
    """One probability column (of class 1) as the pair (1 - p, p)."""
    p = s[:, -1]
    return np.column_stack([1.0 - p, p])
