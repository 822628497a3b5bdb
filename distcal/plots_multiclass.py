"""Matplotlib figures of multiclass evaluation reports.

Each function takes one :class:`~distcal.multiclass_evaluation.MulticlassEvaluationReport`
or several (a list, or the dict of :func:`distcal.evaluate_many`, one
colour per report) and returns the Axes it drew on:

* :func:`plot_top_label_reliability`: the top-label reliability diagram,
  accuracy of the argmax against its probability per bin (marker AREA
  proportional to the bin's weight, Wilson intervals with the weight as
  the count), the diagonal.
* :func:`plot_class_reliability`: one one-vs-rest reliability curve per
  class, p_k against [y = k]. One report with K <= 6 classes: one panel,
  one colour per class, with a legend. Otherwise small multiples, one panel
  per class, one colour per report; beyond 24 classes the 24 of highest
  ECE (in any report), so that the figure's size and drawing time stay
  bounded (every class's ECE is in the report's table).
* :func:`plot_confusion_matrix`: the weighted confusion matrix as a heatmap
  (rows = true class), each cell shaded by its share of the row (the
  recall of the class on the diagonal) and labelled with its weight while
  K <= 12, each class ticked while K <= 40; one panel per report.

Every number drawn comes from the report's sums (one pass over the data),
nothing from the rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .core.metrics import wilson_interval
from .plots import (
    as_written,
    diagonal,
    figure,
    finish,
    heaviest,
    new_ax,
    plot_bins,
    report_list,
)

__all__ = ["plot_top_label_reliability", "plot_class_reliability", "plot_confusion_matrix",
           "MAX_OVERLAID_CLASSES", "MAX_ANNOTATED_CLASSES", "MAX_CLASS_PANELS"]

#: Up to this many classes of one report share one panel; more get small multiples.
MAX_OVERLAID_CLASSES = 6
#: Confusion cells are labelled with their weight up to this many classes.
MAX_ANNOTATED_CLASSES = 12
#: At most this many small multiples: the classes of highest ECE beyond it.
MAX_CLASS_PANELS = 24
#: Every class is a tick of the confusion heatmap up to this many classes.
MAX_TICKED_CLASSES = 40


def _wilson(curve: Any) -> np.ndarray:
    """The Wilson interval of each bin, the bin's weight as the count: (lows, highs)."""
    y, w = (curve[c].to_numpy(dtype=float) for c in ("prob_true", "weight"))
    return np.array([wilson_interval(t * n, n) for t, n in zip(y, w)]).reshape(-1, 2).T


def plot_top_label_reliability(reports: Any, ax: Any = None, *, fig: Any = None) -> Any:
    """Top-label reliability diagram (module docstring); returns the Axes.

    The heaviest bin over all reports gets :data:`~distcal.plots.MARKER_AREA_MAX`.
    """
    reports = report_list(reports)
    ax = new_ax(ax, (6.4, 5.6), fig)
    diagonal(ax)
    wmax = heaviest(r.top_label_curve for r in reports)
    for i, r in enumerate(reports):
        plot_bins(ax, r.top_label_curve, wmax, f"C{i}",
                  f"{r.prob_col}: top label (area ∝ weight), ECE {r.ece:.3g}",
                  f"top:{r.prob_col}", ci=_wilson(r.top_label_curve), line=True)
    ax.set(xlabel="probability of the predicted class (argmax)",
           ylabel="accuracy (argmax = label)", title="Top-label reliability")
    return finish(ax, "upper left")


def plot_class_reliability(reports: Any, ax: Any = None, *, fig: Any = None) -> Any:
    """One-vs-rest reliability curve of every class (module docstring).

    ``ax`` is used only when one panel holds everything (one report, at
    most :data:`MAX_OVERLAID_CLASSES` classes); small multiples make their
    own figure (``fig`` if given). Returns the (first) Axes.
    """
    reports = report_list(reports)
    k = max(r.n_classes for r in reports)
    wmax = heaviest(c for r in reports for c in r.class_curves)
    if len(reports) == 1 and k <= MAX_OVERLAID_CLASSES:
        r = reports[0]
        ax = new_ax(ax, (6.4, 5.6), fig)
        diagonal(ax)
        for c, (curve, name) in enumerate(zip(r.class_curves, r.class_names)):
            plot_bins(ax, curve, wmax, f"C{c}", f"class {name}: ECE {r.per_class_ece[c]:.3g}",
                      f"class:{r.prob_col}:{c}", line=True)
        ax.set(xlabel="predicted probability of the class",
               ylabel="observed frequency of the class",
               title=f"Reliability per class (one-vs-rest), class-wise ECE "
                     f"{r.classwise_ece:.3g}")
        return finish(ax, "upper left")
    shown = list(range(k))
    if k > MAX_CLASS_PANELS:  # the worst calibrated classes, in class order
        worst = np.max([[r.per_class_ece[c] if c < r.n_classes else -np.inf
                         for c in range(k)] for r in reports], axis=0)
        shown = sorted(np.argsort(-np.nan_to_num(worst, nan=-np.inf),
                                  kind="stable")[:MAX_CLASS_PANELS].tolist())
    cols = min(4, len(shown))
    rows = math.ceil(len(shown) / cols)
    fig = figure((2.6 * cols + 0.6, 2.5 * rows + 0.8), fig)
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    for a, c in zip(axes, shown):
        diagonal(a)
        for i, r in enumerate(reports):
            if c < r.n_classes:
                plot_bins(a, r.class_curves[c], wmax, f"C{i}",
                          f"{r.prob_col}: ECE {r.per_class_ece[c]:.3g}",
                          f"class:{r.prob_col}:{c}", line=True)
        name = reports[0].class_names[c] if c < reports[0].n_classes else c
        a.set_title(f"class {as_written(name)}",
                    fontsize=9)
        a.legend(loc="upper left", fontsize=6)
    for a in axes[len(shown):]:
        a.set_axis_off()
    fig.supxlabel("predicted probability of the class")
    fig.supylabel("observed frequency of the class")
    fig.suptitle("Reliability per class (one-vs-rest)" if len(shown) == k else
                 f"Reliability per class (one-vs-rest): the {len(shown)} of {k} classes "
                 "of highest ECE")
    fig.tight_layout()
    return axes[0]


def plot_confusion_matrix(reports: Any, ax: Any = None, *, fig: Any = None) -> Any:
    """Heatmap of each report's confusion matrix (module docstring); returns the first Axes.

    ``ax`` is used for a single report; several make their own figure
    (``fig`` if given), one panel each.
    """
    reports = report_list(reports)
    if ax is None or len(reports) > 1:
        n = len(reports)
        k = max(r.n_classes for r in reports)
        side = min(3.0 + 0.35 * k, 9.0)
        fig = figure((side * n + 0.4, side), fig)
        axes = fig.subplots(1, n, squeeze=False).ravel()
    else:
        axes = np.array([ax])
    for a, r in zip(axes, reports):
        m = np.asarray(r.confusion_matrix, dtype=float)
        totals = m.sum(axis=1, keepdims=True)
        share = np.divide(m, totals, out=np.zeros_like(m), where=totals > 0)
        im = a.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
        im.set_gid(f"confusion:{r.prob_col}")
        if r.n_classes <= MAX_TICKED_CLASSES:  # (else matplotlib's own ticks)
            ticks = np.arange(r.n_classes)
            a.set_xticks(ticks, [str(t) for t in ticks], fontsize=7)
            a.set_yticks(ticks, [str(t) for t in ticks], fontsize=7)
        if r.n_classes <= MAX_ANNOTATED_CLASSES:
            for i in range(r.n_classes):
                for j in range(r.n_classes):
                    text = f"{m[i, j]:,.0f}" if m[i, j] == round(m[i, j]) else f"{m[i, j]:,.1f}"
                    a.text(j, i, text, ha="center", va="center", fontsize=7,
                           color="white" if share[i, j] > 0.5 else "black")
        a.set(xlabel="predicted class (argmax)", ylabel="true class",
              title=f"{as_written(r.prob_col)}: accuracy {r.accuracy:.3g}")
        a.figure.colorbar(im, ax=a, fraction=0.046, pad=0.04, label="share of the true class")
    axes[0].figure.tight_layout()
    return axes[0]
