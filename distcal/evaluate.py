"""``distcal.evaluate``: calibration and discrimination of predicted probabilities."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .core import metrics as m
from .core.distinct import DistinctTable
from .core.validate import check_on_invalid
from .engines import get_engine, resolve_engine

__all__ = ["EvaluationReport", "evaluate", "report_from_table"]


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
    confidence: float = 0.95
    bin_edges: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite numbers become None)."""

        def clean(v: Any) -> Any:
            if isinstance(v, pd.DataFrame):
                return {c: [clean(x) for x in v[c].tolist()] for c in v.columns}
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            if isinstance(v, (float, np.floating)):
                return float(v) if math.isfinite(v) else None
            if isinstance(v, np.integer):
                return int(v)
            return v

        return {k: clean(getattr(self, k)) for k in self.__dataclass_fields__}


def report_from_table(table: DistinctTable, sum_wyy: float, *, prob_col: str, n_rows: int,
                      dropped_rows: int, n_bins: int = 10, strategy: str = "uniform",
                      bins: Any = None, threshold: float = 0.5,
                      confidence: float = 0.95) -> EvaluationReport:
    """Every metric from the distinct-probability table (engine-independent)."""
    w_total = float(table.weight.sum())
    cal = m.calibration_bins(table, n_bins, strategy, edges=bins)
    share = cal["weight"] / w_total
    gap = cal["prob_true"] - cal["prob_pred"]
    ybar = float(table.positives.sum()) / w_total
    roc = m.roc_points(table)
    hx, hy = m.roc_hull(roc["fpr"], roc["tpr"])
    conf = m.confusion_at(table, threshold)
    correct = conf["tp"] + conf["tn"]
    return EvaluationReport(
        prob_col=prob_col, n_rows=n_rows, weight_total=w_total, dropped_rows=dropped_rows,
        brier=m.brier(table, sum_wyy), log_loss=m.log_loss(table),
        ece=float(np.sum(share * np.abs(gap))), mce=float(np.max(np.abs(gap))),
        auc=m.auc(table), reliability=float(np.sum(share * gap * gap)),
        resolution=float(np.sum(share * (cal["prob_true"] - ybar) ** 2)),
        uncertainty=ybar * (1.0 - ybar),
        calibration_curve=pd.DataFrame({"prob_pred": cal["prob_pred"],
                                        "prob_true": cal["prob_true"],
                                        "weight": cal["weight"]}),
        roc=pd.DataFrame(roc), roc_hull=pd.DataFrame({"fpr": hx, "tpr": hy}),
        threshold=float(threshold), confusion=conf, accuracy=correct / w_total,
        accuracy_interval=m.wilson_interval(correct, w_total, confidence),
        confidence=confidence, bin_edges=[float(e) for e in cal["edges"]])


def evaluate(data: Any, prob_col: str = "prob", label_col: str = "label",
             weight_col: str | None = None, n_bins: int = 10, strategy: str = "uniform",
             threshold: float = 0.5, engine: str = "auto", *, bins: Any = None,
             confidence: float = 0.95, on_invalid: str = "raise",
             **engine_opts: Any) -> EvaluationReport:
    """Calibration and discrimination metrics of the probabilities in ``prob_col``.

    Brier score and Murphy's decomposition over the bins, log loss, the
    calibration curve with scikit-learn's bins (``strategy`` "uniform" or
    "quantile", or explicit ``bins`` edges), ECE and MCE, exact AUC (ties
    count one half), the ROC curve and its convex hull, the confusion,
    accuracy and its Wilson interval at ``threshold`` (positive iff
    prob >= threshold).
    """
    check_on_invalid(on_invalid)
    name = resolve_engine(data, engine)
    if name != "local":
        return get_engine(name).evaluate(
            data, prob_col=prob_col, label_col=label_col, weight_col=weight_col, n_bins=n_bins,
            strategy=strategy, threshold=threshold, bins=bins, confidence=confidence,
            on_invalid=on_invalid, **engine_opts)
    from .engines import local

    summary = local.summarise(data, prob_col, label_col, weight_col, on_invalid=on_invalid,
                              label_role="label", score_role="prob", **engine_opts)
    with summary.store as store:
        table = store.table()
    sum_wyy = summary.sum_wyy
    return report_from_table(table, sum_wyy, prob_col=prob_col, n_rows=summary.n_rows,
                             dropped_rows=summary.dropped_rows, n_bins=n_bins,
                             strategy=strategy, bins=bins, threshold=threshold,
                             confidence=confidence)
