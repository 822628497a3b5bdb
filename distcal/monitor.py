"""``distcal.monitor``: calibration over time, from one summary per period.

Each period's summary (:func:`distcal.summarize`, its scores the model's
probabilities) is evaluated exactly (:func:`distcal.evaluate`), which gives
per period the calibration-in-the-large with its 95% interval, the binned
and smooth ECE, Brier score, log loss, AUC and Spiegelhalter's z test of
calibration (:mod:`distcal.core.calibration_tests`).

A period alerts when its Spiegelhalter p-value, corrected for testing every
period with Holm's step-down method (Holm, "A simple sequentially rejective
multiple test procedure", Scandinavian Journal of Statistics 6, 1979), is
below ``alpha``, or when its ECE exceeds ``max_ece``. Holm's method keeps
the family-wise error rate (the chance that any calibrated period alerts) at
``alpha`` whatever the dependence between periods: with the m finite
p-values sorted, p_(1) <= ... <= p_(m), the adjusted values are
max_{j <= i} min(1, (m - j + 1) p_(j)).
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import ParameterError
from .jsonsafe import json_safe

__all__ = ["MonitorReport", "monitor", "holm_adjust", "COLUMNS"]

# The columns of MonitorReport.table, in order.
COLUMNS = ("period", "n_rows", "weight", "base_rate", "mean_prob", "citl", "citl_low",
           "citl_high", "ece", "smooth_ece", "brier", "log_loss", "auc", "spiegelhalter_z",
           "spiegelhalter_p", "alert")


def holm_adjust(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's adjusted p-values (module docstring); NaN stays NaN and is not counted in m."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.shape[0]
    if not m:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(steps)
    return out


@dataclass
class MonitorReport:
    """The per-period table of :func:`monitor`, its alerts, and ``save``.

    ``table``: one row per summary in the order given (:data:`COLUMNS`);
    ``holm_p``: the Holm-adjusted Spiegelhalter p-values, in the same order.
    """

    table: pd.DataFrame
    alpha: float
    max_ece: float | None
    holm_p: np.ndarray = field(repr=False)

    @property
    def alerts(self) -> pd.DataFrame:
        """The rows of the periods that alert."""
        return self.table[self.table["alert"]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the table by column (non-finite numbers as None), the settings."""
        return {"format": "distcal-monitor-report", "alpha": self.alpha,
                "max_ece": self.max_ece,
                "critical_z": _critical_z(self.alpha),
                "table": json_safe(self.table[list(COLUMNS)]),
                "holm_p": json_safe(self.holm_p),
                "alerts": json_safe(self.alerts["period"].tolist()),
                "n_alerts": int(self.table["alert"].sum())}

    def save(self, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
        """Write ``report.json`` and a self-contained ``report.html`` (figures embedded)
        to the directory ``path`` (a local path or fsspec URL), atomically: an existing
        report is replaced only with ``overwrite=True``, once the new one is complete."""
        from .storage import REPORT, filesystem_for, publish_dir

        publish_dir(filesystem_for(os.fspath(path)), os.fspath(path), self.write_dir,
                    overwrite=overwrite, kind=REPORT)
        return Path(path)

    def write_dir(self, tmp: Path) -> None:
        """Write the report's files into the new local directory ``tmp``."""
        doc, page = self.to_dict(), _html(self)
        tmp.mkdir()
        (tmp / "report.json").write_text(json.dumps(doc, indent=2) + "\n")
        (tmp / "report.html").write_text(page, encoding="utf-8")


def _critical_z(alpha: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(1.0 - alpha / 2.0))


def monitor(summaries: Any, alpha: float = 0.01, max_ece: float | None = None, *,
            engine: str = "auto", n_bins: int = 10) -> MonitorReport:
    """Calibration over time: one row per period's summary, and the periods that alert.

    Parameters
    ----------
    summaries : list of Summary or of saved summaries' paths
        One per period, in time order; their scores are the probabilities
        monitored (a summary's ``period`` labels its row).
    alpha : float
        Family-wise error rate of the Spiegelhalter tests over all periods
        (Holm's correction, module docstring).
    max_ece : float, optional
        A period whose ECE (``n_bins`` uniform bins) exceeds it alerts too.
    engine : {"auto", "local", "spark", "dask"}
        Where each summary is evaluated (as :func:`distcal.evaluate`).

    Returns
    -------
    MonitorReport

    Examples
    --------
    >>> import numpy as np, pandas as pd, distcal
    >>> rng = np.random.default_rng(0)
    >>> def day(k):  # true probability p^k / (p^k + (1 - p)^k): k = 1 is calibrated
    ...     p = rng.random(5000)
    ...     q = p**k / (p**k + (1 - p)**k)
    ...     return pd.DataFrame({"score": p, "label": rng.random(5000) < q})
    >>> days = [distcal.summarize(day(k), period=f"d{i}") for i, k in enumerate([1, 1, 2])]
    >>> distcal.monitor(days).alerts["period"].tolist()
    ['d2']
    """
    from .evaluation import evaluate
    from .summary import Summary, load_summary, not_a_summary

    a = alpha
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 < a < 1.0:
        raise ParameterError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if max_ece is not None and (isinstance(max_ece, bool) or not isinstance(
            max_ece, (int, float)) or not max_ece >= 0 or not math.isfinite(max_ece)):
        raise ParameterError(f"max_ece must be None or a finite number >= 0, got {max_ece!r}")
    if isinstance(summaries, (Summary, str, os.PathLike)) or not summaries:
        raise ParameterError("summaries must be a non-empty list of summaries (one per "
                             "period) or of their paths")
    rows = []
    for item in summaries:
        if not isinstance(item, (Summary, str, os.PathLike)):
            raise not_a_summary("monitor", item)
        s = item if isinstance(item, Summary) else load_summary(item)
        rep = evaluate(s, n_bins=n_bins, engine=engine, roc_points=2)
        w = rep.weight_total
        base = (rep.confusion["tp"] + rep.confusion["fn"]) / w
        rows.append({"period": s.period, "n_rows": rep.n_rows, "weight": w, "base_rate": base,
                     "mean_prob": rep.citl + base, "citl": rep.citl, "citl_low": rep.citl_low,
                     "citl_high": rep.citl_high, "ece": rep.ece, "smooth_ece": rep.smece,
                     "brier": rep.brier, "log_loss": rep.log_loss, "auc": rep.auc,
                     "spiegelhalter_z": rep.spiegelhalter_z,
                     "spiegelhalter_p": rep.spiegelhalter_p})
    table = pd.DataFrame(rows, columns=list(COLUMNS[:-1]))
    holm = holm_adjust(table["spiegelhalter_p"].to_numpy())
    alert = np.where(np.isfinite(holm), holm, 1.0) < a
    if max_ece is not None:
        alert |= table["ece"].to_numpy() > max_ece
    table["alert"] = alert.astype(bool)
    return MonitorReport(table, float(a), None if max_ece is None else float(max_ece), holm)


# -- report.html -----------------------------------------------------------------------------

def _figures(rep: MonitorReport) -> list[tuple[str, str, bytes]]:
    """(id, caption, PNG bytes) of each time-series figure."""
    from matplotlib.figure import Figure

    from .plots import as_written
    from .report import _png

    t = rep.table
    x = np.arange(len(t))
    labels = [as_written(p) if p is not None else f"#{i + 1}"
              for i, p in enumerate(t["period"])]
    alert = t["alert"].to_numpy()
    out = []

    def axes(title: str) -> tuple[Any, Any]:
        fig = Figure(figsize=(7.0, 3.2), layout="constrained")
        ax = fig.subplots()
        ax.set_title(title, fontsize=10)
        ax.set_xticks(x, labels, rotation=45 if len(x) > 6 else 0, ha="right"
                      if len(x) > 6 else "center", fontsize=8)
        ax.grid(alpha=0.3)
        return fig, ax

    def mark(ax: Any, y: np.ndarray) -> None:
        if alert.any():
            ax.plot(x[alert], y[alert], "o", color="#c62828", ms=8, mfc="none",
                    label="alert")
            ax.legend(fontsize=8)

    fig, ax = axes("Calibration-in-the-large (mean p − observed rate), 95% interval")
    ax.fill_between(x, t["citl_low"], t["citl_high"], alpha=0.25, color="#1565c0",
                    label="95% interval")
    ax.plot(x, t["citl"], "o-", color="#1565c0", label="CITL")
    ax.axhline(0.0, color="k", lw=0.8)
    mark(ax, t["citl"].to_numpy())
    out.append(("citl", "Calibration-in-the-large per period with its 95% normal interval",
                _png(fig, dpi=100)))
    fig, ax = axes("ECE and smooth ECE")
    ax.plot(x, t["ece"], "o-", label="ECE (binned)")
    ax.plot(x, t["smooth_ece"], "s--", label="smooth ECE")
    if rep.max_ece is not None:
        ax.axhline(rep.max_ece, color="#c62828", ls=":", label="max_ece")
    mark(ax, t["ece"].to_numpy())
    ax.legend(fontsize=8)
    out.append(("ece", "Binned and smooth ECE per period", _png(fig, dpi=100)))
    fig, ax = axes("ROC AUC")
    ax.plot(x, t["auc"], "o-", color="#2e7d32")
    out.append(("auc", "AUC per period", _png(fig, dpi=100)))
    fig, ax = axes("Spiegelhalter z")
    z = _critical_z(rep.alpha)
    zb = _critical_z(rep.alpha / max(1, int(np.isfinite(rep.holm_p).sum())))
    ax.plot(x, t["spiegelhalter_z"], "o-", color="#6a1b9a", label="z")
    for sign in (1, -1):
        ax.axhline(sign * z, color="#ef6c00", ls="--",
                   label=f"±z(1−α/2) = {z:.2f}" if sign > 0 else None)
        ax.axhline(sign * zb, color="#c62828", ls=":",
                   label=f"±z(1−α/2m) = {zb:.2f} (Holm's first step)" if sign > 0 else None)
    mark(ax, t["spiegelhalter_z"].to_numpy())
    ax.legend(fontsize=8)
    out.append(("z", "Spiegelhalter's z per period with its critical lines", _png(fig, dpi=100)))
    fig, ax = axes("Rows per period")
    ax.bar(x, t["n_rows"], color="#607d8b")
    out.append(("rows", "Rows used per period", _png(fig, dpi=100)))
    return out


def _html(rep: MonitorReport) -> str:
    from .report import _CSS, _figures_html, _page, format_value

    kinds = {"n_rows": "count", "weight": "weight"}
    head = "".join(f"<th scope=\"col\">{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for _, row in rep.table.iterrows():
        cells = []
        for c in COLUMNS:
            v = row[c]
            text = (str(v) if c == "period" else "ALERT" if c == "alert" and v else
                    "" if c == "alert" else format_value(v, kinds.get(c, "metric")))
            cells.append(f"<td data-col=\"{c}\">{html.escape(text)}</td>")
        style = " class=\"alert\"" if row["alert"] else ""
        body.append(f"<tr{style}>{''.join(cells)}</tr>")
    n = int(rep.table["alert"].sum())
    alerts = ", ".join(html.escape(str(p)) for p in rep.alerts["period"]) or "none"
    ece = "" if rep.max_ece is None else f" or ECE above {rep.max_ece:g}"
    css = _CSS + "tr.alert td{background:#fde0e0}\n"
    figs = _figures_html([(k, cap, cap, png) for k, cap, png in _figures(rep)])  # alt: caption
    return _page("distcal calibration monitor", "distcal calibration monitor", f"""\
<p class="note" id="summary">{n} of {len(rep.table)} periods alert (Spiegelhalter p-value
below α = {rep.alpha:g} after Holm's correction over the periods{html.escape(ece)}):
{alerts}.</p>
<h2>Periods</h2><div class="scroll"><table id="periods"><thead><tr>{head}</tr></thead>
<tbody>{''.join(body)}</tbody></table></div>
<h2>Figures</h2><div class="figs">{figs}</div>""", css)
