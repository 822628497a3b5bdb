"""Evaluation reports on disk: report.json, the figures as PNG, and report.html.

report.html is self-contained (images embedded as data URIs, no script, no
external request) and readable on a phone. It holds the provenance, a
metrics table (names explained on hover and in a legend), notes (e.g. an
AUC that dropped after calibration), and the figures: reliability diagram,
calibration map (when a model is given), ROC curve, cost curve, and the
histogram of interval widths (Venn-Abers output evaluated with
``interval_cols``). Every
number the page shows is in report.json (``table``, ``provenance``,
``notes`` and the per-column ``reports``).

Multiclass reports (``"kind": "multiclass"`` in report.json) have their
own metrics table (log loss, Brier, accuracy, top-label and class-wise
ECE, the ECE of every class), the confusion matrix of each prediction as a
table (up to 50 classes; beyond, in report.json only), and the figures
reliability.png (top label), reliability_classes.png (one one-vs-rest curve
per class; small multiples beyond 6 classes or for several predictions, at
most 24: the classes of highest ECE) and confusion.png
(:mod:`distcal.plots_multiclass`).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from .core import calibration_metrics as cm
from .core.piecewise import is_keyed
from .errors import ParameterError
from .jsonsafe import json_safe
from .plots import check_costs, report_list
from .storage import REPORT, filesystem_for, publishing_dir

# The reports (distcal.EvaluationReport) are only read here, by attribute:
# no import of distcal.evaluation, which imports this module for _repr_html_.
EvaluationReport = Any

__all__ = ["write_report", "build_document", "format_value", "METRICS"]

# key, label, kind (format), explanation. The values come from _values().
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("n_rows", "rows used", "count", "Rows with a valid probability, label and weight > 0."),
    ("dropped_rows", "rows dropped", "count", "Invalid rows left out (on_invalid='drop')."),
    ("weight_total", "total weight", "weight", "Sum of the row weights (rows if unweighted)."),
    ("positives", "positive weight", "weight", "Sum of weight × label."),
    ("n_distinct", "distinct probabilities", "count",
     "Number of distinct predicted probabilities (the bins of the exact decomposition)."),
    ("brier", "Brier score", "metric", "Mean of w (p − y)²; lower is better."),
    ("log_loss", "log loss", "metric",
     "Mean of −w [y log p + (1 − y) log(1 − p)]; lower is better."),
    ("reliability", "reliability (exact)", "metric",
     "Murphy reliability with one bin per distinct probability: Σ W_p (p − ȳ_p)² / W. "
     "Brier = reliability − resolution + uncertainty exactly."),
    ("resolution", "resolution (exact)", "metric",
     "Murphy resolution per distinct probability: Σ W_p (ȳ_p − ȳ)² / W; higher is better."),
    ("uncertainty", "uncertainty", "metric", "Variance of the label, ȳ (1 − ȳ) for 0/1 labels."),
    ("ece", "ECE (binned)", "metric",
     "Expected calibration error over the report's bins: "
     "Σ_b (W_b / W) |observed_b − predicted_b|."),
    ("mce", "MCE (binned)", "metric", "Largest |observed − predicted| over the non-empty bins."),
    ("adaptive_ece", "adaptive ECE", "metric",
     "ECE over bins of equal weight (W / B each, ties split by weight): "
     "Σ_b (W_b / W) |observed_b − predicted_b|."),
    ("adaptive_mce", "adaptive MCE", "metric",
     "Largest |observed − predicted| over the equal-weight bins."),
    ("smece", "smooth ECE", "metric",
     "SmoothECE of Błasiok & Nakkiran (relplot's smECE): kernel-smoothed residuals, "
     "reflected Gaussian kernel, bandwidth σ* where smECE_σ = σ."),
    ("smece_sigma", "smooth ECE bandwidth σ*", "metric",
     "The kernel bandwidth chosen by the fixed-point search (a multiple of 2⁻¹⁰)."),
    ("reliability_binned", "reliability (binned)", "metric",
     "Murphy reliability over the report's bins (not exact: within-bin spread is ignored)."),
    ("resolution_binned", "resolution (binned)", "metric",
     "Murphy resolution over the report's bins."),
    ("citl", "calibration-in-the-large", "metric",
     "Mean predicted probability minus observed rate, Σ w p / W − Σ w y / W; "
     "positive means over-prediction."),
    ("citl_low", "calibration-in-the-large low", "metric",
     "95% normal interval, lower end: CITL − 1.96 √(Σ w² p (1 − p)) / W."),
    ("citl_high", "calibration-in-the-large high", "metric",
     "95% normal interval, upper end."),
    ("spiegelhalter_z", "Spiegelhalter z", "metric",
     "Σ w (y − p)(1 − 2p) / √(Σ w² (1 − 2p)² p (1 − p)) (Spiegelhalter 1986): "
     "standard normal when the probabilities are calibrated."),
    ("spiegelhalter_p", "Spiegelhalter p-value", "metric",
     "Two-sided p-value of Spiegelhalter's z: 2 (1 − Φ(|z|))."),
    ("auc", "ROC AUC", "metric", "Area under the ROC curve; ties count one half."),
    ("accuracy", "accuracy", "metric", "Weight correctly classified at the threshold."),
    ("accuracy_low", "accuracy interval low", "metric",
     "Wilson interval of the accuracy, lower end."),
    ("accuracy_high", "accuracy interval high", "metric",
     "Wilson interval of the accuracy, upper end."),
    ("precision", "precision", "metric", "TP / (TP + FP) at the threshold."),
    ("recall", "recall", "metric", "TP / (TP + FN) at the threshold."),
    ("f1", "F1", "metric", "2 TP / (2 TP + FP + FN) at the threshold."),
    ("tp", "TP", "weight", "True positives (weight) at the threshold: label 1, p ≥ threshold."),
    ("fp", "FP", "weight", "False positives (weight) at the threshold."),
    ("tn", "TN", "weight", "True negatives (weight) at the threshold."),
    ("fn", "FN", "weight", "False negatives (weight) at the threshold."),
    ("best_threshold", "cost-optimal threshold", "metric",
     "Threshold t minimising cost_fp·FP(t) + cost_fn·FN(t) (positive iff p ≥ t)."),
    ("best_cost", "minimal total cost", "weight", "cost_fp·FP + cost_fn·FN at that threshold."),
)


def format_value(v: Any, kind: str) -> str:
    """The text shown for a number: 4 significant digits for metrics, thousands
    separators for counts and weights; '—' for missing values."""
    if v is None:
        return "—"
    v = float(v)
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if kind == "count":
        return f"{v:,.0f}"
    if kind == "weight":
        return f"{v:,.0f}" if v == round(v) and abs(v) < 1e15 else f"{v:,.2f}"
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e5:
        return f"{v:#.4g}".rstrip(".")
    return f"{v:.3e}"


def _values(r: EvaluationReport, extra: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    cc = r.calibration_curve
    w = r.weight_total
    share = cc["weight"].to_numpy() / w if w else np.zeros(len(cc))
    gap = (cc["prob_true"] - cc["prob_pred"]).to_numpy()
    conf = r.confusion
    pos = conf["tp"] + conf["fn"]
    ybar = pos / w if w else math.nan
    vals = {
        "n_rows": r.n_rows, "dropped_rows": r.dropped_rows, "weight_total": w,
        "positives": pos, "n_distinct": extra.get("n_distinct"),
        "brier": r.brier, "log_loss": r.log_loss,
        "reliability": extra["reliability"], "resolution": extra["resolution"],
        "uncertainty": extra["uncertainty"], "ece": r.ece, "mce": r.mce,
        "adaptive_ece": extra["adaptive_ece"], "adaptive_mce": extra["adaptive_mce"],
        "smece": extra["smece"], "smece_sigma": extra["smece_sigma"],
        "reliability_binned": float(np.sum(share * gap * gap)),
        "resolution_binned": float(np.sum(share * (cc["prob_true"].to_numpy() - ybar) ** 2)),
        "citl": r.citl, "citl_low": r.citl_low, "citl_high": r.citl_high,
        "spiegelhalter_z": r.spiegelhalter_z, "spiegelhalter_p": r.spiegelhalter_p,
        "auc": r.auc, "accuracy": r.accuracy, "accuracy_low": r.accuracy_interval[0],
        "accuracy_high": r.accuracy_interval[1], "precision": r.precision, "recall": r.recall,
        "f1": r.f1, "tp": conf["tp"], "fp": conf["fp"], "tn": conf["tn"], "fn": conf["fn"],
        "best_threshold": cost["best_threshold"], "best_cost": cost["best_cost"],
    }
    return vals  # as they are (the page shows ±inf as ∞): _json_table makes them JSON


def _json_table(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The metrics table as report.json holds it: a value JSON cannot hold is null, and
    the row's ``why_null`` gives the reason per column (+infinity: a cost-optimal
    threshold above every score, i.e. predict nothing positive)."""
    out = []
    for row in table:
        values = json_safe(row["values"], why=True)
        why = values.pop("why_null", None)
        out.append({**row, "values": values, **({"why_null": why} if why else {})})
    return out


def _strategy(edges: list[float]) -> str:
    e = np.asarray(edges, dtype=float)
    if e.shape[0] >= 2 and np.allclose(np.diff(e), (e[-1] - e[0]) / (e.shape[0] - 1),
                                       rtol=1e-9, atol=1e-12):
        return "uniform"
    return "quantile or explicit edges"


def _provenance(reports: list[Any], given: dict[str, Any] | None,
                model: Any) -> dict[str, Any]:
    """What the page's Provenance lists: the first report's rows, weight and bins, the
    version and time, ``model``'s method and rows, then ``given``; ``model_dir`` (a binary
    or a multiclass model's) also gives the model's checksum when ``given`` has none."""
    from .version import __version__

    r0 = reports[0]
    multiclass = _is_multiclass(r0)
    prov: dict[str, Any] = {
        "columns": [r.prob_col for r in reports],
        "rows_used": r0.n_rows, "rows_dropped": r0.dropped_rows,
        "weight_total": r0.weight_total,
    }
    if multiclass:
        prov.update(n_classes=r0.n_classes, n_bins=r0.n_bins, strategy="uniform")
    else:
        prov.update(n_bins=len(r0.bin_edges) - 1, strategy=_strategy(r0.bin_edges),
                    threshold=r0.threshold, confidence=r0.confidence)
    prov.update(distcal_version=__version__,
                generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    if model is not None:
        prov["model_method"] = model.method
        prov["model_rows"] = model.n_rows
    prov.update(given or {})
    model_dir = prov.get("model_dir")
    if model_dir and not prov.get("model_checksum"):
        from .errors import ModelError
        from .model import read_model_json

        try:  # the model directory's one reader: regular files, capped, depth-limited
            prov["model_checksum"] = read_model_json(Path(model_dir)).get("checksum")
        except (ModelError, OSError):
            pass
    return {k: json_safe(v) if not isinstance(v, (str, os.PathLike)) else str(v)
            for k, v in prov.items() if v is not None}


def _notes(reports: list[EvaluationReport], model: Any) -> list[dict[str, Any]]:
    """AUC drops: against the model's score column when present, else the first column."""
    if len(reports) < 2:
        return []
    names = [r.prob_col for r in reports]
    base = reports[0]
    score_col = (getattr(model, "columns", None) or {}).get("score")
    if score_col in names:
        base = reports[names.index(score_col)]
    notes = []
    for r in reports:
        if r is base or not (math.isfinite(r.auc) and math.isfinite(base.auc)):
            continue
        if r.auc < base.auc - 1e-12:
            notes.append({
                "kind": "auc_drop", "column": r.prob_col, "baseline": base.prob_col,
                "auc": r.auc, "baseline_auc": base.auc, "drop": base.auc - r.auc,
                "text": (f"The AUC of '{r.prob_col}' ({r.auc:.4f}) is lower than that of "
                         f"'{base.prob_col}' ({base.auc:.4f}), by {base.auc - r.auc:.4g}: "
                         "calibration merged differently ranked scores into ties. A "
                         "monotone map that keeps the ranking inside blocks, "
                         "interpolation=\"centered\", avoids this loss."),
            })
    return notes


# key in rep.interval_widths, label, explanation: rows of the metrics table when a report
# has interval widths (evaluate(..., interval_cols=...)).
WIDTH_METRICS: tuple[tuple[str, str, str], ...] = (
    ("mean", "interval width mean", "Weighted mean of p1 − p0 (exact)."),
    ("median", "interval width median",
     "Weighted median of p1 − p0, from a histogram of 100 log-spaced bins per decade "
     "(within 2.33%)."),
    ("p90", "interval width 90th percentile",
     "Weighted 90th percentile of p1 − p0 (same histogram)."),
    ("max", "interval width max", "Largest p1 − p0 (exact)."),
)


def _width_rows(reports: list[EvaluationReport]) -> list[dict[str, Any]]:
    """The metrics table's rows of the interval widths (none when no report has them)."""
    if not any(getattr(r, "interval_widths", None) for r in reports):
        return []
    return [{"key": f"interval_width_{k}", "label": label, "kind": "metric",
             "description": desc,
             "values": {r.prob_col: json_safe((r.interval_widths or {}).get(k))
                        for r in reports}} for k, label, desc in WIDTH_METRICS]


def _width_figures(reports: list[EvaluationReport]) -> list[tuple[str, str, str, bytes]]:
    """The histogram of the interval widths: one figure per pair of interval columns."""
    from matplotlib.figure import Figure

    from . import plots

    pairs: dict[tuple[str, ...], EvaluationReport] = {}
    for r in reports:
        w = getattr(r, "interval_widths", None)
        if w:
            pairs.setdefault(tuple(w["columns"]), r)
    out = []
    for i, ((p0, p1), r) in enumerate(pairs.items()):
        fig = Figure(figsize=(6.4, 4.4))
        plots.plot_interval_widths(r, fig.subplots())
        out.append(("interval_widths" if i == 0 else f"interval_widths_{i}",
                    "Venn-Abers interval widths",
                    f"Histogram of the interval widths {p1} − {p0} on a log scale, weight per "
                    "bin, mean, median and 90th percentile marked", _png(fig)))
    return out


def _png(fig: Any, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _figures(reports: list[EvaluationReport], extras: list[dict[str, Any]],
             costs: list[dict[str, Any]], model: Any, cost_fp: float, cost_fn: float
             ) -> list[tuple[str, str, str, bytes]]:
    """(file stem, title, alt text, PNG bytes) of each figure, in page order."""
    from matplotlib.figure import Figure

    from . import plots

    out = []
    fig = Figure(figsize=(6.4, 7.0))
    ax, hx = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    plots.plot_reliability(reports, ax, hist_ax=hx, metrics=extras)
    out.append(("reliability", "Reliability diagram",
                "Reliability diagram: observed positive rate against mean predicted "
                "probability per bin, marker area proportional to bin weight, Wilson "
                "intervals, smoothed curve; weight per bin below on a log scale", _png(fig)))
    if model is not None and not is_keyed(model):  # one map to draw, not one per segment
        fig = Figure(figsize=(6.4, 4.8))
        plots.plot_calibration_map(model, fig.subplots())
        out.append(("calibration_map", "Calibration map",
                    "Fitted calibration map from score to probability with its blocks "
                    "and Wilson intervals", _png(fig)))
    fig = Figure(figsize=(6.0, 5.6))
    plots.plot_roc(reports, fig.subplots())
    out.append(("roc", "ROC curve", "ROC curves with convex hulls and AUC", _png(fig)))
    fig = Figure(figsize=(6.4, 4.4))
    plots.plot_cost_curve(reports, fig.subplots(), cost_fp=cost_fp, cost_fn=cost_fn,
                          curves=costs)
    out.append(("cost", "Cost curve",
                f"Total cost {cost_fp:g}·FP + {cost_fn:g}·FN against the threshold, "
                "optimum marked", _png(fig)))
    return out


_CSS = """
:root{color-scheme:light}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
 padding:1rem;max-width:1150px;line-height:1.45;color:#1b1b1b;background:#fff}
h1{font-size:1.5rem;margin:.2rem 0 1rem}h2{font-size:1.2rem;margin:1.6rem 0 .6rem}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;max-width:100%}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
td,th{border:1px solid #d0d0d0;padding:.3rem .6rem}
td{text-align:right;white-space:nowrap}
thead th{background:#eef1f5;position:sticky;top:0}
tbody th{background:#f7f7f7;text-align:left;font-weight:600}
th[title]{cursor:help;text-decoration:underline dotted #888}
dl.prov{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1rem;margin:0}
dl.prov dt{font-weight:600}dl.prov dd{margin:0;word-break:break-all}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,440px),1fr));gap:1rem}
figure{margin:0;border:1px solid #e2e2e2;border-radius:6px;padding:.4rem;background:#fff}
figure img{width:100%;height:auto;display:block}
figcaption{font-size:.9rem;color:#444;padding:.3rem .2rem 0}
.note{background:#fff4d6;border-left:4px solid #e0a800;padding:.6rem .8rem;margin:.6rem 0}
dl.legend dt{font-weight:600;margin-top:.4rem}dl.legend dd{margin:0 0 0 1rem;color:#333}
@media (max-width:600px){body{padding:.6rem;font-size:15px}td,th{padding:.25rem .4rem}
}
"""


def _scroll_table(attrs: str, head: str, rows: list[str]) -> str:
    """A ``<table {attrs}>`` in a horizontally scrolling ``<div>``: ``head`` the cells
    of the header row, ``rows`` the body's ``<tr>`` elements, one a line."""
    return (f"<div class=\"scroll\"><table {attrs}><thead><tr>{head}</tr></thead><tbody>\n"
            + "\n".join(rows) + "\n</tbody></table></div>")


def _table_html(reports: list[EvaluationReport], table: list[dict[str, Any]]) -> str:
    cols = [r.prob_col for r in reports]
    head = "".join(f"<th scope=\"col\">{html.escape(c)}</th>" for c in cols)
    rows = []
    for row in table:
        cells = "".join(
            f"<td data-key=\"{row['key']}\" data-col=\"{html.escape(c, quote=True)}\">"
            f"{html.escape(format_value(row['values'][c], row['kind']))}</td>" for c in cols)
        tip = html.escape(row["description"], quote=True)
        rows.append(f"<tr><th scope=\"row\" title=\"{tip}\">"
                    f"{html.escape(row['label'])}</th>{cells}</tr>")
    return _scroll_table("id=\"metrics\"", f"<th>metric</th>{head}", rows)


def _prov_html(prov: dict[str, Any]) -> str:
    items = []
    for k, v in prov.items():
        if isinstance(v, list):
            text = ", ".join(str(x) for x in v)
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            text = str(v)
        else:
            kind = "count" if k in ("rows_used", "rows_dropped", "n_bins", "model_rows",
                                    "n_classes") \
                else "weight" if k == "weight_total" else "metric"
            text = format_value(v, kind)
        items.append(f"<dt>{html.escape(k.replace('_', ' '))}</dt>"
                     f"<dd data-prov=\"{html.escape(k, quote=True)}\">{html.escape(text)}</dd>")
    return "<dl class=\"prov\">" + "".join(items) + "</dl>"


def _figures_html(figures: list[tuple[str, str, str, bytes]]) -> str:
    """The figures as ``<figure>`` elements, the PNGs embedded as data URIs."""
    return "\n".join(
        f"<figure id=\"fig-{stem}\"><img alt=\"{html.escape(alt, quote=True)}\" "
        f"src=\"data:image/png;base64,{base64.b64encode(png).decode('ascii')}\">"
        f"<figcaption>{html.escape(title)}</figcaption></figure>"
        for stem, title, alt, png in figures)


# ---------------------------------------------------------------------------
# Multiclass reports (distcal.multiclass_evaluation.MulticlassEvaluationReport):
# their own table, figures and confusion matrices; the page and provenance
# layout of the binary report.
# ---------------------------------------------------------------------------

# key, label, kind (format), explanation; the per-class ECE rows follow them.
MULTICLASS_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("n_rows", "rows used", "count", "Rows with valid probabilities, label and weight > 0."),
    ("dropped_rows", "rows dropped", "count", "Invalid rows left out (on_invalid='drop')."),
    ("weight_total", "total weight", "weight", "Sum of the row weights (rows if unweighted)."),
    ("n_classes", "classes", "count", "K: probabilities per row, labels 0..K−1."),
    ("log_loss", "log loss", "metric",
     "Mean of −w log p_y (p clipped to [ε, 1 − ε]), scikit-learn's log_loss; lower is better."),
    ("brier", "Brier score", "metric",
     "Mean of w Σ_k (p_k − [y = k])², summed over classes; lower is better."),
    ("accuracy", "accuracy", "metric", "Weight whose argmax class (ties: lowest) is the label."),
    ("ece", "top-label ECE", "metric",
     "ECE of the highest probability against 'argmax = label' over the report's uniform "
     "bins: Σ_b (W_b / W) |accuracy_b − confidence_b|."),
    ("classwise_ece", "class-wise ECE", "metric",
     "Mean over classes of the one-vs-rest ECE of p_k against [y = k] (same bins)."),
)


def _is_multiclass(r: Any) -> bool:
    return hasattr(r, "classwise_ece")


def _multiclass_table(reports: list[Any]) -> list[dict[str, Any]]:
    rows = [{"key": key, "label": label, "kind": kind, "description": desc,
             "values": {r.prob_col: json_safe(getattr(r, key)) for r in reports}}
            for key, label, kind, desc in MULTICLASS_METRICS]
    for k in range(max(r.n_classes for r in reports)):
        rows.append({"key": f"ece_class_{k}", "label": f"ECE of class {k}", "kind": "metric",
                     "description": f"One-vs-rest ECE of p_{k} against [y = {k}].",
                     "values": {r.prob_col: json_safe(r.per_class_ece[k]) if k < r.n_classes
                                else None for r in reports}})
    return rows


def _multiclass_figures(reports: list[Any]) -> list[tuple[str, str, str, bytes]]:
    """(file stem, title, alt text, PNG bytes): top-label, per-class, confusion."""
    from matplotlib.figure import Figure

    from . import plots_multiclass as pm

    out = []
    for stem, draw, title, alt in (
            ("reliability", pm.plot_top_label_reliability, "Top-label reliability diagram",
             "Top-label reliability diagram: accuracy of the predicted class against its "
             "probability per bin, marker area proportional to bin weight, Wilson intervals"),
            ("reliability_classes", pm.plot_class_reliability,
             "Reliability per class (one-vs-rest)",
             "One reliability curve per class: observed frequency of the class against its "
             "mean predicted probability per bin, marker area proportional to bin weight"),
            ("confusion", pm.plot_confusion_matrix, "Confusion matrix",
             "Confusion matrix heatmap: rows are true classes, columns predicted classes, "
             "cells shaded by their share of the row and labelled with their weight")):
        fig = Figure()
        draw(reports, fig=fig)
        out.append((stem, title, alt, _png(fig)))
    return out


#: The confusion matrix is a table of the page up to this many classes (K^2 cells);
#: beyond, report.json and confusion.png hold it.
MAX_TABLE_CLASSES = 50


def _confusion_html(r: Any) -> str:
    """One report's confusion matrix as a table (rows = true class), row totals last."""
    m = np.asarray(r.confusion_matrix, dtype=float)
    col = html.escape(r.prob_col, quote=True)
    if r.n_classes > MAX_TABLE_CLASSES:
        return (f"<h3>{html.escape(r.prob_col)}</h3><p>{r.n_classes} classes: the matrix "
                f"({r.n_classes}² cells) is in report.json and the heatmap, not in this "
                "page.</p>")
    head = "".join(f"<th scope=\"col\">{k}</th>" for k in range(r.n_classes))
    rows = []
    for i in range(r.n_classes):
        cells = "".join(f"<td data-true=\"{i}\" data-pred=\"{j}\">"
                        f"{html.escape(format_value(m[i, j], 'weight'))}</td>"
                        for j in range(r.n_classes))
        rows.append(f"<tr><th scope=\"row\">{html.escape(r.class_names[i])}</th>{cells}"
                    f"<td>{html.escape(format_value(m[i].sum(), 'weight'))}</td></tr>")
    return (f"<h3>{html.escape(r.prob_col)}</h3>"
            + _scroll_table(f"class=\"confusion\" data-col=\"{col}\"",
                            f"<th>true \\ predicted</th>{head}<th>total</th>", rows))


def _page(title: str, heading: str, body: str, css: str = _CSS) -> str:
    """A whole self-contained page around ``body`` (report.html, the monitor's): images
    only as data URIs, no script, nothing fetched (its Content-Security-Policy)."""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<title>{title}</title>
<style>{css}</style></head>
<body><h1>{heading}</h1>
{body}
<p>Every number on this page is in report.json, next to this file.</p>
</body></html>
"""


def build_document(reports: Any, *, provenance: dict[str, Any] | None = None,
                   model: Any = None, cost_fp: float = 1.0, cost_fn: float = 1.0,
                   fragment: bool = False) -> dict[str, Any]:
    """Everything a report consists of, in memory.

    Returns ``{"json": doc, "html": text, "figures": [(stem, title, alt, png)]}``.
    ``fragment=True`` gives a ``<div>`` for a notebook instead of a page.
    Multiclass reports have the same keys and layout, with their own table,
    figures and confusion matrices (``model`` and the costs do not apply).
    """
    reports = report_list(reports)
    if not reports:
        raise ValueError("no reports to write")
    names = [r.prob_col for r in reports]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # the report names each column's numbers by it: one would be lost
        raise ParameterError(f"several reports are of the column(s) {twice}: a report names "
                             "its numbers by the column, so give each its own (e.g. "
                             "dataclasses.replace(report, prob_col='test')), or write "
                             "them apart")
    cost_fp, cost_fn = check_costs(cost_fp, cost_fn)
    doc: dict[str, Any] = {"format": "distcal-report"}
    if any(_is_multiclass(r) for r in reports):
        model, doc["kind"], costs_key = None, "multiclass", {}
        table = _multiclass_table(reports)
        legend = table[:len(MULTICLASS_METRICS)]  # not each class's ECE again
        per_report = {r.prob_col: json_safe(r.to_dict()) for r in reports}
        notes: list[dict[str, Any]] = []
        figures = _multiclass_figures(reports)
        after_table = ("<h2>Confusion matrix</h2><p>Weight per true class (rows) and predicted "
                       "class (argmax, columns).</p>"
                       + "".join(_confusion_html(r) for r in reports))
        after_figures = ""
    else:
        extras = [cm.metrics_from_report(r) for r in reports]
        costs = [cm.cost_curve(r, cost_fp, cost_fn) for r in reports]
        values = {r.prob_col: _values(r, e, c) for r, e, c in zip(reports, extras, costs)}
        table = [{"key": k, "label": label, "kind": kind, "description": desc,
                  "values": {c: values[c][k] for c in values}}
                 for k, label, kind, desc in METRICS]
        table += _width_rows(reports)
        legend = table
        per_report = {}
        for r, e, c in zip(reports, extras, costs):
            d = r.to_dict()
            d["extra"] = json_safe({k: v for k, v in e.items() if k != "smooth_curve"})
            d["extra"]["smooth_curve"] = json_safe(e["smooth_curve"])
            d["cost_curve"] = json_safe({k: c[k] for k in ("best_threshold", "best_cost",
                                                            "best_fp", "best_fn", "cost_fp",
                                                            "cost_fn")})
            per_report[r.prob_col] = d
        notes = _notes(reports, model)
        figures = _figures(reports, extras, costs, model, cost_fp, cost_fn)
        figures += _width_figures(reports)
        figures += _segment_figures(reports)
        costs_key = {"costs": {"cost_fp": float(cost_fp), "cost_fn": float(cost_fn)}}
        cost_text = (f"Costs: false positive {format_value(cost_fp, 'metric')}, false negative "
                     f"{format_value(cost_fn, 'metric')}; threshold for the confusion counts "
                     f"{format_value(reports[0].threshold, 'metric')}.")
        after_table = f"<p>{html.escape(cost_text)}</p>"
        after_figures = _segments_html(reports)
    prov = _provenance(reports, provenance, model)

    doc.update({"columns": [r.prob_col for r in reports], "reports": per_report})
    if len(reports) == 1:
        doc.update(json_safe(reports[0].to_dict()))
    doc.update({"table": _json_table(table), "provenance": prov, "notes": notes, **costs_key,
                "figures": [stem + ".png" for stem, *_ in figures]})

    notes_html = "".join(f"<p class=\"note\" data-note=\"{n['kind']}\">{html.escape(n['text'])}</p>"
                         for n in notes)
    legend_html = "".join(f"<dt>{html.escape(row['label'])}</dt>"
                          f"<dd>{html.escape(row['description'])}</dd>" for row in legend)
    body = (f"{notes_html}<h2>Metrics</h2>{_table_html(reports, table)}{after_table}"
            f"<h2>Figures</h2><div class=\"figs\">{_figures_html(figures)}</div>{after_figures}"
            f"<h2>What the metrics mean</h2><dl class=\"legend\">{legend_html}</dl>")
    if fragment:  # for a notebook: no page, no provenance
        page = (f"<div class=\"distcal-report\"><style>{_CSS.replace('body', '.distcal-report')}"
                f"</style>{body}</div>")
    else:
        page = _page(f"distcal evaluation: {html.escape(', '.join(doc['columns']))}",
                     "distcal evaluation", f"<h2>Provenance</h2>{_prov_html(prov)}\n{body}")
    return {"json": doc, "html": page, "figures": figures}


def write_report(reports: Any, output: str | os.PathLike, overwrite: bool = False, *,
                 provenance: dict[str, Any] | None = None, model: Any = None,
                 cost_fp: float = 1.0, cost_fn: float = 1.0) -> Path:
    """Write report.json, the figures (reliability.png, roc.png, cost.png, with
    ``model`` calibration_map.png, with interval widths interval_widths.png) and a
    self-contained report.html to ``output``.

    ``reports``: a list (or the dict of :func:`~distcal.evaluate_many`) of
    :class:`~distcal.EvaluationReport`, or of multiclass reports (then the
    figures are reliability.png, reliability_classes.png and confusion.png;
    ``model`` and the costs do not apply). ``provenance``: what to record about
    the run (input, columns, engine, model_dir, model_checksum, ...); rows,
    bins, threshold, distcal version and time are added. ``model``: the
    model applied (its method and rows are recorded); a
    :class:`~distcal.CalibrationModel`'s map is drawn (a model per segment has
    one per segment: none is). ``cost_fp``,
    ``cost_fn``: the costs of the cost curve. ``output``: a local path or an
    fsspec URL. The directory appears complete or not at all (written aside,
    renamed); an existing one is replaced only by a report, with ``overwrite``.
    """
    doc = build_document(reports, provenance=provenance, model=model, cost_fp=cost_fp,
                         cost_fn=cost_fn)
    target = os.fspath(output)
    with publishing_dir(filesystem_for(target), target, overwrite=overwrite,
                        kind=REPORT) as tmp:
        tmp.mkdir()
        (tmp / "report.json").write_text(json.dumps(doc["json"], indent=2) + "\n")
        for stem, _, _, png in doc["figures"]:
            (tmp / f"{stem}.png").write_bytes(png)
        (tmp / "report.html").write_text(doc["html"], encoding="utf-8")
    return Path(output)


def report_html_fragment(report: Any, **kwargs: Any) -> str:
    """HTML of a report (or several): metrics table and figures, images embedded.

    For a notebook (``EvaluationReport._repr_html_``); the same content as
    report.html's body without provenance. ``kwargs`` go to
    :func:`build_document` (``cost_fp``, ``cost_fn``, ``model``).
    """
    return str(build_document(report, fragment=True, **kwargs)["html"])


# -- per-segment evaluation (evaluate(..., by=...)) ---------------------------------

#: Segments listed in the HTML table (the worst calibrated first) and drawn
#: in the small-multiples reliability figure.
SEGMENT_ROWS, SEGMENT_PLOTS = 20, 6

_SEGMENT_COLUMNS = (("n_rows", "rows", "count"), ("weight", "weight", "weight"),
                    ("base_rate", "base rate", "metric"), ("mean_prob", "mean prob", "metric"),
                    ("log_loss", "log loss", "metric"), ("brier", "Brier", "metric"),
                    ("ece", "ECE", "metric"), ("mce", "MCE", "metric"), ("auc", "AUC", "metric"))


def _with_segments(reports: list[EvaluationReport]) -> list[EvaluationReport]:
    return [r for r in reports if getattr(r, "segments", None) is not None]


def _segments_html(reports: list[EvaluationReport]) -> str:
    """Per report with segments: the worst calibrated segments (highest ECE first)."""
    out = []
    for r in _with_segments(reports):
        table = r.segments
        by = r.segment_by
        head = "".join(f"<th scope=\"col\">{html.escape(b)}</th>" for b in by) + "".join(
            f"<th scope=\"col\">{html.escape(label)}</th>" for _, label, _ in _SEGMENT_COLUMNS)
        rows = []
        for _, row in table.head(SEGMENT_ROWS).iterrows():
            keys = "".join(f"<th scope=\"row\">{html.escape(str(row[b]))}</th>" for b in by)
            cells = "".join(f"<td data-col=\"{c}\">{html.escape(format_value(row[c], kind))}</td>"
                            for c, _, kind in _SEGMENT_COLUMNS)
            rows.append(f"<tr>{keys}{cells}</tr>")
        attrs = f"class=\"segments\" data-col=\"{html.escape(r.prob_col, quote=True)}\""
        rest = len(table) - min(len(table), SEGMENT_ROWS)
        more = (f"<p>and {rest:,} more segment{'s' if rest != 1 else ''} (all of them in "
                "report.json, <code>segments</code>).</p>" if rest else "")
        out.append(
            f"<h2>Segments by {html.escape(', '.join(by))}: {html.escape(r.prob_col)}</h2>"
            f"<p>{len(table):,} segment{'s' if len(table) != 1 else ''}, the worst calibrated "
            "(highest ECE over the report's bins) first; rows with a null key count in the "
            "global metrics only.</p>"
            + _scroll_table(attrs, head, rows) + more)
    return "".join(out)


def _segment_figures(reports: list[EvaluationReport]) -> list[tuple[str, str, str, bytes]]:
    """Small multiples: the reliability curves of the worst calibrated segments."""
    from matplotlib.figure import Figure

    from . import plots

    out = []
    with_segments = _with_segments(reports)
    for i, r in enumerate(with_segments):
        worst = r.segments.head(SEGMENT_PLOTS)
        if not len(worst):
            continue
        ncols = min(3, len(worst))
        nrows = -(-len(worst) // ncols)
        fig = Figure(figsize=(3.2 * ncols, 3.1 * nrows), layout="constrained")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True)).ravel()
        curves = [r.segment_curve(tuple(row[b] for b in r.segment_by))
                  for _, row in worst.iterrows()]
        heaviest = plots.heaviest(curves)
        for ax, (_, row), curve in zip(axes, worst.iterrows(), curves):
            ax.plot([0, 1], [0, 1], color="#999", lw=0.8, ls="--")
            ax.plot(curve["prob_pred"], curve["prob_true"], color="#1f77b4", lw=1)
            ax.scatter(curve["prob_pred"], curve["prob_true"], color="#1f77b4", zorder=3,
                       s=np.maximum(200.0 * curve["weight"] / heaviest, 4.0))
            key = ", ".join(f"{b}={row[b]}" for b in r.segment_by)
            ax.set_title(f"{plots.as_written(key)}\nECE {format_value(row['ece'], 'metric')}, "
                         f"{format_value(row['n_rows'], 'count')} rows", fontsize=9)
            ax.set(xlim=(0, 1), ylim=(0, 1))
        for ax in axes[len(worst):]:
            ax.set_visible(False)
        fig.supxlabel("mean predicted probability", fontsize=9)
        fig.supylabel("observed positive rate", fontsize=9)
        stem = "segments_reliability" if len(with_segments) == 1 else f"segments_reliability_{i}"
        out.append((stem, f"Worst calibrated segments: {r.prob_col}",
                    f"Reliability curves of the {len(worst)} segments with the highest ECE "
                    f"for '{r.prob_col}', marker area proportional to bin weight", _png(fig)))
    return out
