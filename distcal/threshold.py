"""``distcal.optimal_threshold``: the cost-minimising rule "positive iff score >= t"."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .core.threshold import EMPTY, loss_per_score, merge_segments, summarise_segment
from .core.validate import check_on_invalid
from .engines import get_engine, resolve_engine

__all__ = ["ThresholdResult", "optimal_threshold"]


@dataclass(frozen=True)
class ThresholdResult:
    """The optimal threshold and what it does.

    ``threshold`` (+inf: predict nothing positive), ``cost`` (the minimal
    total cost; with a per-row loss, the minimal sum of z),
    ``n_positive_predicted`` (weight predicted positive), and the weighted
    confusion at the threshold (``tp``, ``fp``, ``tn``, ``fn``; NaN with a
    per-row loss, which has no labels).
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def optimal_threshold(data: Any, score_col: str = "score", label_col: str = "label",
                      weight_col: str | None = None, cost_fp: float = 1.0,
                      cost_fn: float = 1.0, loss_col: str | None = None,
                      engine: str = "auto", on_invalid: str = "raise",
                      **engine_opts: Any) -> ThresholdResult:
    """Threshold t minimising cost_fp * FP weight + cost_fn * FN weight.

    With ``loss_col``, each row carries its own loss z of being predicted
    positive (times its weight, if ``weight_col``), and t minimises the sum
    of z over rows predicted positive. Equal scores fall on the same side;
    among thresholds of equal cost the largest is returned.
    """
    check_on_invalid(on_invalid)
    cost_fp, cost_fn = float(cost_fp), float(cost_fn)
    if not (math.isfinite(cost_fp) and math.isfinite(cost_fn)):
        raise ValueError("cost_fp and cost_fn must be finite")
    name = resolve_engine(data, engine)
    if name != "local":
        return get_engine(name).optimal_threshold(
            data, score_col=score_col, label_col=label_col, weight_col=weight_col,
            cost_fp=cost_fp, cost_fn=cost_fn, loss_col=loss_col, on_invalid=on_invalid,
            **engine_opts)
    from .engines import local

    role, col = ("loss", loss_col) if loss_col is not None else ("label", label_col)
    summary = local.summarise(data, score_col, col, weight_col, on_invalid=on_invalid,
                              label_role=role, **engine_opts)
    seg = EMPTY
    with summary.store as store:
        for t in store.ranges():
            z = t.positives if loss_col is not None else loss_per_score(t, cost_fp, cost_fn)
            seg = merge_segments(seg, summarise_segment(t.score, z, t.weight, t.positives))
    return result_from_segment(seg, cost_fp, cost_fn, loss_col is not None, summary.n_rows,
                               summary.dropped_rows)


def result_from_segment(seg: Any, cost_fp: float, cost_fn: float, per_row_loss: bool,
                        n_rows: int, dropped_rows: int) -> ThresholdResult:
    """Turn the summary of all scores into the public result."""
    if per_row_loss:
        return ThresholdResult(seg.threshold, seg.best, seg.best_weight, n_rows=n_rows,
                               dropped_rows=dropped_rows)
    tp = seg.best_positives
    fp = seg.best_weight - seg.best_positives
    fn = seg.positives - tp
    tn = (seg.weight - seg.positives) - fp
    # Everything negative costs cost_fn * positives; the best suffix adds seg.best.
    cost = cost_fn * seg.positives + seg.best
    return ThresholdResult(seg.threshold, cost, seg.best_weight, tp=tp, fp=fp, tn=tn, fn=fn,
                           n_rows=n_rows, dropped_rows=dropped_rows)
