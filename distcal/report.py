"""Evaluation reports on disk: report.json, reliability and ROC plots, report.html."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np

from .evaluation import EvaluationReport
from .storage import local_publishing as atomic_path

__all__ = ["write_report"]

_METRICS = ("n_rows", "weight_total", "brier", "log_loss", "ece", "mce", "auc", "reliability",
            "resolution", "uncertainty", "accuracy", "precision", "recall", "f1")


def _plot_reliability(reports: list[EvaluationReport], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, hx) = plt.subplots(2, 1, figsize=(6.4, 7.2), sharex=True,
                                 gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1, label="perfectly calibrated")
    for r in reports:
        cc = r.calibration_curve
        yerr = np.clip(np.vstack([cc["prob_true"] - cc["ci_low"],
                                  cc["ci_high"] - cc["prob_true"]]), 0.0, None)
        ax.errorbar(cc["prob_pred"], cc["prob_true"], yerr=yerr, marker="o", ms=4, capsize=3,
                    label=f"{r.prob_col} (ECE {r.ece:.3f}, Brier {r.brier:.3f})")
        edges = np.asarray(r.bin_edges)
        hx.stairs(_bin_weights(r, edges), edges, alpha=0.5, fill=True, label=r.prob_col)
    ax.set(ylabel="observed positive rate", xlim=(0, 1), ylim=(0, 1),
           title="Reliability diagram")
    ax.legend(loc="upper left", fontsize=8)
    hx.set(xlabel="predicted probability", ylabel="weight")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _bin_weights(r: EvaluationReport, edges: np.ndarray) -> np.ndarray:
    # calibration_curve lists the non-empty bins only; place them back.
    full = np.zeros(edges.shape[0] - 1)
    mids = r.calibration_curve["prob_pred"].to_numpy()
    idx = np.clip(np.searchsorted(edges[1:-1], mids), 0, full.shape[0] - 1)
    np.add.at(full, idx, r.calibration_curve["weight"].to_numpy())
    return full


def _plot_roc(reports: list[EvaluationReport], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1)
    for r in reports:
        line, = ax.plot(r.roc["fpr"], r.roc["tpr"], lw=1.5,
                        label=f"{r.prob_col} (AUC {r.auc:.4f})")
        ax.plot(r.roc_hull["fpr"], r.roc_hull["tpr"], ls=":", marker=".",
                color=line.get_color(), label=f"{r.prob_col} convex hull")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", xlim=(0, 1),
           ylim=(0, 1.01), title="ROC curve")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _html(reports: list[EvaluationReport]) -> str:
    head = "".join(f"<th>{html.escape(r.prob_col)}</th>" for r in reports)
    rows = []
    for k in _METRICS:
        cells = "".join(f"<td>{getattr(r, k):.6g}</td>" for r in reports)
        rows.append(f"<tr><th>{k}</th>{cells}</tr>")
    cells = "".join(f"<td>{r.accuracy_interval[0]:.4f} – {r.accuracy_interval[1]:.4f}</td>"
                    for r in reports)
    rows.append(f"<tr><th>accuracy interval ({reports[0].confidence:.0%})</th>{cells}</tr>")
    for k in ("tp", "fp", "tn", "fn"):
        cells = "".join(f"<td>{r.confusion[k]:.6g}</td>" for r in reports)
        rows.append(f"<tr><th>{k} at {reports[0].threshold:g}</th>{cells}</tr>")
    table = "\n".join(rows)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>distcal evaluation</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}
th{{background:#f4f4f4}} .plots img{{width:48%;min-width:320px}}</style></head>
<body><h1>distcal evaluation</h1>
<div class="plots"><img src="reliability.png" alt="reliability diagram">
<img src="roc.png" alt="ROC curve"></div>
<h2>Metrics</h2>
<table><tr><th>metric</th>{head}</tr>
{table}
</table>
<p>Full numbers: <a href="report.json">report.json</a>.</p>
</body></html>
"""


def write_report(reports: list[EvaluationReport], output: str | os.PathLike,
                 overwrite: bool = False) -> Path:
    """Write report.json, reliability.png, roc.png and report.html to ``output``.

    The directory appears complete or not at all (written aside, renamed).
    """
    with atomic_path(output, overwrite=overwrite) as tmp:
        tmp.mkdir()
        doc = {"columns": [r.prob_col for r in reports],
               "reports": {r.prob_col: r.to_dict() for r in reports}}
        if len(reports) == 1:
            doc.update(reports[0].to_dict())
        (tmp / "report.json").write_text(json.dumps(doc, indent=2) + "\n")
        _plot_reliability(reports, tmp / "reliability.png")
        _plot_roc(reports, tmp / "roc.png")
        (tmp / "report.html").write_text(_html(reports))
    return Path(output)
