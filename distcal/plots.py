"""Matplotlib figures of evaluation reports and calibration models.

Each ``plot_*`` function draws on ``ax`` (a new figure when None) and
returns the Axes, in the spirit of scikit-learn's ``CalibrationDisplay``:

* :func:`plot_reliability`: reliability diagram of one or more
  :class:`~distcal.EvaluationReport` s. One marker per non-empty bin at
  (mean prediction, observed rate) whose AREA is proportional to the bin's
  weight (the same scale for every report), Wilson interval bars, the
  diagonal, the smoothed curve of the smooth ECE (relplot's kernel at the
  smECE bandwidth) with an approximate 95% band, and below it the weight per
  bin on a log scale.
* :func:`plot_calibration_map`: a :class:`~distcal.CalibrationModel`'s
  map from score to probability; for isotonic and histogram models the
  blocks with their Wilson intervals.
* :func:`plot_roc`: ROC curves with their convex hulls and AUCs.
* :func:`plot_cost_curve`: total cost c_fp FP(t) + c_fn FN(t) against the
  threshold t (positive iff p >= t), the minimum marked.
* :func:`plot_interval_widths`: the histogram of a Venn-Abers output's
  interval widths p1 - p0 (``evaluate(..., interval_cols=...)``) on a log
  scale, mean, median and 90th percentile marked.

:func:`distcal.report.report_html_fragment` gives the HTML of one report (metrics and
figures, images embedded), for a notebook's ``_repr_html_``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .core import calibration_metrics as cm
from .params import check_finite

__all__ = ["plot_reliability", "plot_calibration_map", "plot_roc", "plot_cost_curve",
           "plot_interval_widths", "MARKER_AREA_MAX"]

#: Area (points^2) of the marker of the heaviest bin; others scale linearly.
MARKER_AREA_MAX = 400.0
#: The smoothed curve is not drawn where the kernel averages fewer rows than this.
MIN_EFFECTIVE = 10.0


def as_written(text: Any) -> str:
    """User text (column names, class names, segment keys, periods) to show as written:
    matplotlib reads "$...$" in text as math (``$\\frac$`` raised, ``US$ 10 - US$ 20``
    came out in italics); an escaped dollar is a dollar. Per text, rather than
    matplotlib's global ``text.parse_math``, which every thread's figures share."""
    return str(text).replace("$", r"\$")


def _plain_log_labels(axis: Any) -> None:
    """Log-axis tick labels as plain text (1, 10, 1e-05) rather than matplotlib's math
    ($10^{1}$)."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def check_costs(cost_fp: Any, cost_fn: Any) -> tuple[float, float]:
    """The cost curve's costs as floats (a ``ParameterError`` unless finite numbers)."""
    c_fp, c_fn = check_finite(cost_fp, "cost_fp"), check_finite(cost_fn, "cost_fn")
    assert c_fp is not None and c_fn is not None
    return c_fp, c_fn


def report_list(reports: Any) -> list:
    """One report, a list (any iterable) of them or a dict of them (by name) as a list
    (the input of the figures and of :func:`distcal.report.build_document`)."""
    if isinstance(reports, dict):
        return list(reports.values())
    if hasattr(reports, "prob_col"):  # one report, binary or multiclass
        return [reports]
    return list(reports)


def figure(figsize: tuple[float, float], fig: Any = None) -> Any:
    """``fig`` resized (the report passes a pyplot-free Figure), else a new pyplot figure."""
    if fig is not None:
        fig.set_size_inches(*figsize)
        return fig
    import matplotlib.pyplot as plt

    return plt.figure(figsize=figsize)


def new_ax(ax: Any, figsize: tuple[float, float], fig: Any = None) -> Any:
    """``ax``, else the Axes of :func:`figure` ``(figsize, fig)``."""
    return ax if ax is not None else figure(figsize, fig).subplots()


def finish(ax: Any, legend_loc: str) -> Any:
    """``ax`` with its legend (at ``legend_loc``), its figure's layout tightened."""
    ax.legend(loc=legend_loc, fontsize=7)
    ax.figure.tight_layout()
    return ax


def heaviest(curves: Any) -> float:
    """The largest bin weight of reliability curves (1 when all are empty): the bin drawn
    with :data:`MARKER_AREA_MAX`."""
    return max((float(c["weight"].max()) for c in curves if len(c)), default=1.0)


def diagonal(ax: Any) -> None:
    """The line of perfect calibration, on the unit square."""
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1, label="perfectly calibrated")
    ax.set(xlim=(0, 1), ylim=(0, 1))


def plot_bins(ax: Any, curve: Any, wmax: float, color: str, label: str, gid: str,
              ci: Any = None, line: bool = False) -> None:
    """A reliability curve's bins (``prob_pred``, ``prob_true``, ``weight``): interval bars
    (``ci``: the low and the high end per bin), the line through the bins if ``line``,
    and markers of area proportional to the weight (:data:`MARKER_AREA_MAX` at ``wmax``)."""
    x, y, w = (curve[c].to_numpy(dtype=float) for c in ("prob_pred", "prob_true", "weight"))
    if ci is not None:
        ax.errorbar(x, y, yerr=np.clip(np.vstack([y - ci[0], ci[1] - y]), 0.0, None),
                    fmt="none", ecolor=color, elinewidth=1, capsize=2, alpha=0.8)
    if line:
        ax.plot(x, y, color=color, lw=1, alpha=0.8)
    sc = ax.scatter(x, y, s=MARKER_AREA_MAX * w / wmax, color=color, alpha=0.6,
                    edgecolors="k", linewidths=0.5, label=as_written(label))
    sc.set_gid(gid)


def _effective_rows(curve: dict[str, np.ndarray], n_rows: int, sigma: float) -> np.ndarray:
    return n_rows * curve["density"] * 2.0 * math.sqrt(math.pi) * sigma


def smooth_band(curve: dict[str, np.ndarray], n_rows: int, sigma: float,
                z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """Approximate pointwise band of the smoothed curve.

    A Gaussian kernel of width sigma averages about n_eff(t) = n f(t) 2
    sqrt(pi) sigma rows near t (n the rows of positive weight, f the weight
    density, 1 / int K^2 = 2 sqrt(pi) sigma), so mu(t) +- z sqrt(mu (1 - mu)
    / n_eff). Rows, not the total weight: the band does not change when every
    weight is multiplied by one factor. An approximation for display, not an
    exact interval.
    """
    mu = curve["mu"]
    n_eff = np.maximum(_effective_rows(curve, n_rows, sigma), 1e-9)
    half = z * np.sqrt(np.clip(mu * (1 - mu), 0, None) / n_eff)
    return np.clip(mu - half, 0, 1), np.clip(mu + half, 0, 1)


def plot_reliability(reports: Any, ax: Any = None, *, hist_ax: Any = None,
                     smooth: bool = True, metrics: list[dict[str, Any]] | None = None) -> Any:
    """Reliability diagram (see the module docstring); returns the main Axes.

    With ``ax=None`` a figure with the diagram and, below it, the weight
    histogram is made; with a given ``ax`` the histogram is drawn only on
    ``hist_ax`` if given. ``metrics``: :func:`~distcal.core.calibration_metrics.
    metrics_from_report` of each report (computed when needed and None).
    The heaviest bin over all reports gets :data:`MARKER_AREA_MAX`.
    """
    reports = report_list(reports)
    if ax is None:
        ax, hist_ax = figure((6.4, 7.0)).subplots(2, 1, sharex=True,
                                                  gridspec_kw={"height_ratios": [3, 1]})
    if smooth and metrics is None:
        metrics = [cm.metrics_from_report(r) for r in reports]
    diagonal(ax)
    wmax = heaviest(r.calibration_curve for r in reports)
    for i, r in enumerate(reports):
        cc = r.calibration_curve
        color = f"C{i}"
        plot_bins(ax, cc, wmax, color, f"{r.prob_col}: bins (area ∝ weight), ECE {r.ece:.3g}",
                  f"bins:{r.prob_col}", ci=(cc["ci_low"].to_numpy(), cc["ci_high"].to_numpy()))
        if smooth and metrics is not None:
            mt = metrics[i]
            curve = mt["smooth_curve"]
            lo, hi = smooth_band(curve, r.n_rows, mt["smece_sigma"])
            # drawn only where the kernel averages enough rows to mean something
            sparse = _effective_rows(curve, r.n_rows, mt["smece_sigma"]) < MIN_EFFECTIVE
            mu = np.where(sparse, np.nan, curve["mu"])
            ax.fill_between(curve["t"], lo, hi, where=~sparse, color=color, alpha=0.15, lw=0)
            ax.plot(curve["t"], mu, color=color, lw=1.5,
                    label=f"{as_written(r.prob_col)}: smoothed (smECE {mt['smece']:.3g}, "
                          f"σ {mt['smece_sigma']:.3g})")
        if hist_ax is not None:
            edges = np.asarray(r.bin_edges, dtype=float)
            hist_ax.stairs(_bin_weights(r, edges), edges, color=color, alpha=0.35, fill=True,
                           label=as_written(r.prob_col))
    ax.set(ylabel="observed positive rate", xlim=(0, 1), ylim=(0, 1),
           title="Reliability diagram")
    ax.legend(loc="upper left", fontsize=7)
    if hist_ax is not None:
        hist_ax.set_yscale("log")
        _plain_log_labels(hist_ax.yaxis)
        hist_ax.set(xlabel="predicted probability", ylabel="weight per bin (log)", xlim=(0, 1))
        hist_ax.legend(loc="upper right", fontsize=7)
    else:
        ax.set_xlabel("predicted probability")
    ax.figure.tight_layout()
    return ax


def _bin_weights(r: Any, edges: np.ndarray) -> np.ndarray:
    # calibration_curve lists the non-empty bins only; place them back by mean prediction.
    full = np.zeros(edges.shape[0] - 1)
    mids = r.calibration_curve["prob_pred"].to_numpy()
    idx = np.clip(np.searchsorted(edges[1:-1], mids), 0, full.shape[0] - 1)
    np.add.at(full, idx, r.calibration_curve["weight"].to_numpy())
    return full


def plot_calibration_map(model: Any, ax: Any = None, *, confidence: float = 0.95) -> Any:
    """The fitted map score -> probability; blocks and Wilson intervals when it has blocks."""
    from .core.metrics import wilson_interval

    ax = new_ax(ax, (6.4, 4.8))
    blocks: Any = getattr(model, "blocks", None)  # isotonic and histogram models only
    has_blocks = blocks is not None and len(blocks) > 0
    if has_blocks:
        lo_s = blocks["score_min"].to_numpy(dtype=float)
        hi_s = blocks["score_max"].to_numpy(dtype=float)
        finite = np.concatenate([lo_s[np.isfinite(lo_s)], hi_s[np.isfinite(hi_s)]])
        smin, smax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    else:
        smin, smax = model.params.get("score_min", 0.0), model.params.get("score_max", 1.0)
    span = smax - smin or 1.0
    pad = 0.02 * span
    grid = np.linspace(smin - pad, smax + pad, 801)
    ax.plot(grid, model.predict(grid), color="C0", lw=1.5,
            label=f"{model.method} map"
                  + (f" ({model.params.get('interpolation')})"
                     if model.method == "isotonic" else ""))
    if has_blocks:
        ci = np.array([wilson_interval(pos, w, confidence)
                       for pos, w in zip(blocks["positives"], blocks["weight"])])
        lo_c = np.clip(lo_s, smin - pad, smax + pad)
        hi_c = np.clip(hi_s, smin - pad, smax + pad)
        for k in range(len(blocks)):
            ax.fill_between([lo_c[k], max(hi_c[k], lo_c[k] + 1e-3 * span)],
                            ci[k, 0], ci[k, 1], color="C1", alpha=0.25, lw=0,
                            label=f"Wilson {confidence:.0%} interval per block" if k == 0 else None)
        ax.hlines(blocks["prob"], lo_c, hi_c, color="C1", lw=2.5, label="blocks")
    elif model.method == "sigmoid":
        a, b = model.params["a"], model.params["b"]
        ax.text(0.02, 0.95, f"p(s) = 1 / (1 + exp({a:.4g} s {b:+.4g}))",
                transform=ax.transAxes, va="top", fontsize=8)
    elif model.method == "venn_abers":
        p0, p1 = model.predict_interval(grid)
        ax.fill_between(grid, p0, p1, step="mid", color="C1", alpha=0.3, lw=0,
                        label="Venn-Abers interval (p0, p1)")
    ax.set(xlabel="score", ylabel="calibrated probability", ylim=(0, 1),
           title="Calibration map")
    return finish(ax, "lower right")


def plot_roc(reports: Any, ax: Any = None) -> Any:
    """ROC curve of each report with its convex hull; AUC in the legend."""
    reports = report_list(reports)
    ax = new_ax(ax, (6.0, 5.6))
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1, label="chance")
    for i, r in enumerate(reports):
        ax.plot(r.roc["fpr"], r.roc["tpr"], lw=1.5, color=f"C{i}",
                label=f"{as_written(r.prob_col)} (AUC {r.auc:.4f})")
        ax.plot(r.roc_hull["fpr"], r.roc_hull["tpr"], ls=":", marker=".", color=f"C{i}",
                label=f"{as_written(r.prob_col)} convex hull")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", xlim=(0, 1),
           ylim=(0, 1.01), title="ROC curve", aspect="equal")
    return finish(ax, "lower right")


def plot_cost_curve(reports: Any, ax: Any = None, *, cost_fp: float = 1.0,
                    cost_fn: float = 1.0, curves: list[dict[str, Any]] | None = None) -> Any:
    """Total cost against the threshold, the optimum of each report marked.

    The cost is a step function: for t in (p_(k+1), p_k] (distinct
    probabilities descending) the rows with p >= p_k are positive.
    """
    reports = report_list(reports)
    cost_fp, cost_fn = check_costs(cost_fp, cost_fn)
    ax = new_ax(ax, (6.4, 4.4))
    if curves is None:
        curves = [cm.cost_curve(r, cost_fp, cost_fn) for r in reports]
    for i, (r, c) in enumerate(zip(reports, curves)):
        thr, cost = c["threshold"], c["cost"]
        finite = np.isfinite(thr)
        x = thr[finite][::-1]
        y = cost[finite][::-1]
        # beyond the highest probability nothing is positive
        x = np.append(x, 1.0 if x.size == 0 or x[-1] < 1.0 else x[-1])
        y = np.append(y, cost[~finite][0] if (~finite).any() else y[-1])
        line, = ax.step(x, y, where="pre", color=f"C{i}", lw=1.5,
                        label=as_written(r.prob_col))
        line.set_gid(f"cost:{r.prob_col}")
        bt = c["best_threshold"]
        ax.plot([min(bt, 1.0)], [c["best_cost"]], marker="v", ms=9, color=f"C{i}",
                markeredgecolor="k", gid=f"best:{r.prob_col}",
                label=f"{as_written(r.prob_col)} optimum: t = {bt:.4g}, "
                      f"cost {c['best_cost']:,.4g}")
        ax.axvline(min(bt, 1.0), color=f"C{i}", ls=":", lw=1)
    ax.set(xlabel="threshold t (positive iff p ≥ t)",
           ylabel=f"total cost = {cost_fp:g}·FP + {cost_fn:g}·FN", xlim=(0, 1),
           title="Cost curve")
    return finish(ax, "best")


def plot_interval_widths(report: Any, ax: Any = None) -> Any:
    """Histogram of the interval widths p1 - p0 of a report (``rep.interval_widths``).

    Bars of weight per bin, 10 bins per decade on a log scale (the bin of
    widths below 1e-6, zero included, drawn hatched left of 1e-6); the
    weighted mean, median and 90th percentile as vertical lines.
    """
    w = report.interval_widths
    if not w:
        raise ValueError("this report has no interval widths (evaluate(..., interval_cols=...))")
    ax = new_ax(ax, (6.4, 4.4))
    edges = np.asarray(w["histogram"]["edges"], dtype=float)
    weight = np.asarray(w["histogram"]["weight"], dtype=float)
    if edges.shape[0] >= 2:
        zero = 1 if edges[0] == 0 else 0  # the bin from 0 is drawn apart, hatched
        lo, hi = edges[zero:-1], edges[zero + 1:]
        ax.bar(lo, weight[zero:], width=hi - lo, align="edge", color="C0", edgecolor="white",
               lw=0.5, label=f"weight per bin ({w['rows']:,} rows)")
        if zero and weight[0] > 0:
            ax.bar([edges[1] / 10], [weight[0]], width=[edges[1] * 0.9], align="edge",
                   color="C0", hatch="//", edgecolor="white", label="width < 1e-6")
        ax.set_xscale("log")
        _plain_log_labels(ax.xaxis)
    for value, name, style in ((w["mean"], "mean", "-"), (w["median"], "median", "--"),
                               (w["p90"], "90th percentile", ":")):
        if value is not None and math.isfinite(value) and value > 0:
            ax.axvline(value, color="C3", ls=style, lw=1.2, label=f"{name} {value:.3g}")
    p0, p1 = w["columns"]
    ax.set(xlabel=f"interval width {as_written(p1)} − {as_written(p0)} (log scale)",
           ylabel="weight",
           title="Venn-Abers interval widths")
    return finish(ax, "best")
