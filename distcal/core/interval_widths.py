"""The distribution of interval widths p1 - p0 (Venn-Abers intervals), in one pass.

A Venn-Abers model's output carries, per row, the interval [p0, p1]
(``model.transform(..., interval_cols=("p0", "p1"))``); its width says how
much the calibration rows pin the probability down. ``distcal.evaluate(...,
interval_cols=("p0", "p1"))`` reports the distribution of the widths
d = p1 - p0 over the rows it evaluates, weighted by the row weights.

The widths ride along with the row checks of the evaluation's one keyed
pass (:func:`distcal.core.rows.read_rows`): each batch of valid rows adds
them to a fixed histogram and to a few exact sums (:func:`width_partials`),
and partials add up in any order (:func:`merge_widths`), so every engine
gives the same numbers and the driver receives one small array per task.

* Exact: the total weight, the weighted mean Σ w d / Σ w, the smallest
  and the largest width.
* From the histogram: the weighted quantiles (median, 90th percentile).
  The bins are [0, 1e-6) (zero widths fall there), then ``PER_DECADE`` =
  100 bins per decade of equal width on a log scale from 1e-6 up to 1
  (601 bins). The weighted q-quantile (the smallest d whose cumulative
  weight reaches q Σ w, numpy's ``method="inverted_cdf"``) lies in the bin
  where the cumulative weight first reaches q Σ w; it is reported by
  log-linear interpolation inside that bin, clipped to [min, max], so its
  relative error is below 10^(1/100) - 1 = 2.33% (absolute below 1e-6 in
  the lowest bin).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["PER_DECADE", "LOWEST", "width_partials", "merge_widths", "width_summary",
           "bin_edges"]

# Bins per decade of width above LOWEST, and the lowest decade (widths below it share bin 0).
PER_DECADE = 100
LOWEST = -6
N_BINS = 1 + PER_DECADE * -LOWEST


def bin_edges() -> np.ndarray:
    """The histogram's ``N_BINS + 1`` edges: 0, 1e-6, 10^(-6 + 1/100), ..., 1."""
    return np.concatenate(([0.0], 10.0 ** (LOWEST + np.arange(N_BINS) / PER_DECADE)))


def _bins(d: np.ndarray) -> np.ndarray:
    """The bin of each width in [0, 1]."""
    with np.errstate(divide="ignore"):
        logs = np.floor((np.log10(d) - LOWEST) * PER_DECADE)
    return np.clip(np.where(d < 10.0 ** LOWEST, 0, 1 + np.nan_to_num(logs, neginf=-1)),
                   0, N_BINS - 1).astype(np.int64)


def width_partials(d: np.ndarray, weight: np.ndarray | None) -> dict[str, Any]:
    """The histogram and exact sums of one batch's widths ``d`` (in [0, 1]) and weights."""
    w = np.ones(d.shape[0]) if weight is None else weight
    return {"hist": np.bincount(_bins(d), weights=w, minlength=N_BINS),
            "weight": float(w.sum()), "wd": float(np.dot(w, d)), "rows": int(d.shape[0]),
            "min": float(d.min()) if d.shape[0] else math.inf,
            "max": float(d.max()) if d.shape[0] else -math.inf}


def merge_widths(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two batches' partials as one (None: no batch)."""
    if a is None or b is None:
        return b if a is None else a
    return {"hist": a["hist"] + b["hist"], "weight": a["weight"] + b["weight"],
            "wd": a["wd"] + b["wd"], "rows": a["rows"] + b["rows"],
            "min": min(a["min"], b["min"]), "max": max(a["max"], b["max"])}


def _quantile(hist: np.ndarray, edges: np.ndarray, q: float, lo: float, hi: float) -> float:
    """The weighted q-quantile read from the histogram (module docstring)."""
    cum = np.cumsum(hist)
    target = q * cum[-1]
    i = int(np.searchsorted(cum, target * (1 - 1e-12), side="left"))
    below = cum[i - 1] if i else 0.0
    share = (target - below) / hist[i] if hist[i] > 0 else 1.0
    a, b = edges[i], edges[i + 1]
    share = min(max(share, 0.0), 1.0)
    v = a + share * (b - a) if i == 0 else a * (b / a) ** share  # [0, 1e-6): linear
    return float(min(max(v, lo), hi))


def width_summary(part: dict[str, Any] | None, columns: tuple[str, str],
                  per_decade: int = 10) -> dict[str, Any]:
    """The report's numbers and histogram of the widths (``rep.interval_widths``).

    Keys: ``columns`` (p0, p1), ``rows``, ``weight``, ``mean``, ``median``,
    ``p90``, ``min``, ``max``, and ``histogram``: ``edges`` and ``weight``
    of bins ``per_decade`` to a decade (groups of the fine bins) from the
    decade of the smallest positive width up to that of the largest; the
    first bin is [0, 1e-6) when a width lies below 1e-6.
    """
    if part is None or part["weight"] <= 0:
        nan = float("nan")
        return {"columns": list(columns), "rows": 0, "weight": 0.0, "mean": nan,
                "median": nan, "p90": nan, "min": nan, "max": nan,
                "histogram": {"edges": [], "weight": []}}
    hist, edges = np.asarray(part["hist"], dtype=np.float64), bin_edges()
    lo, hi = part["min"], part["max"]
    step = PER_DECADE // per_decade
    fine = hist[1:].reshape(-1, step).sum(axis=1)  # bins of the coarse grid above 1e-6
    coarse_edges = edges[1::step]  # 1e-6 ... 1
    nz = np.flatnonzero(fine)
    out_edges: list[float] = []
    out_weight: list[float] = []
    if hist[0] > 0:
        out_edges, out_weight = [0.0], [float(hist[0])]
    if nz.shape[0]:
        a, b = int(nz[0]), int(nz[-1]) + 1
        out_edges += coarse_edges[a:b + 1].tolist() if not out_edges else \
            coarse_edges[0:b + 1].tolist()
        out_weight += fine[0 if hist[0] > 0 else a:b].tolist()
    elif out_edges:
        out_edges.append(float(edges[1]))
    return {"columns": list(columns), "rows": int(part["rows"]), "weight": part["weight"],
            "mean": part["wd"] / part["weight"],
            "median": _quantile(hist, edges, 0.5, lo, hi),
            "p90": _quantile(hist, edges, 0.9, lo, hi), "min": lo, "max": hi,
            "histogram": {"edges": out_edges, "weight": out_weight}}
