"""Bin edges shared by histogram calibration and calibration curves.

The bins are scikit-learn's ``calibration_curve`` bins: edges
``linspace(0, 1, n_bins + 1)`` ("uniform") or the quantiles of the values
("quantile", ``np.percentile`` with linear interpolation), and bin ids
``searchsorted(edges[1:-1], p)`` (a value on an inner edge falls in the
lower bin).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from .distinct import DistinctTable

__all__ = ["ordered_quantiles", "bin_edges", "bin_ids"]


def ordered_quantiles(tables: Callable[[], Iterable[DistinctTable]], q: np.ndarray,
                      total: float) -> np.ndarray:
    """Weighted quantiles at ``q`` of the distinct values of ascending ranges.

    Generalises ``np.percentile(..., method="linear")``: with cumulative
    weight C_i, value i occupies the positions [C_{i-1}, C_i - 1] of the
    weight-repeated sample, the function is linear between neighbouring
    values, and quantile q sits at position q (W - 1). For integer weights
    this is exactly ``np.percentile`` of the rows repeated by weight; for
    unit weights, of the rows themselves.

    One ordered pass: each range's knots are shifted by the weight below it,
    and the last knot of the previous range is carried over, so a position
    between two ranges interpolates across the boundary exactly as in one
    table. ``total`` is the weight of all ranges.
    """
    pos = np.asarray(q, dtype=np.float64) * max(total - 1.0, 0.0)
    out = np.full(pos.shape, np.nan)
    offset = 0.0
    carry: tuple[float, float] | None = None
    for t in tables():
        if not len(t):
            continue
        cum = offset + np.cumsum(t.weight)
        first = cum - t.weight
        last = np.maximum(first, cum - 1.0)
        xp = np.empty(2 * len(t))
        xp[0::2], xp[1::2] = first, last
        fp = np.repeat(t.score, 2)
        if carry is not None:
            xp = np.concatenate(([carry[0]], xp))
            fp = np.concatenate(([carry[1]], fp))
        todo = np.isnan(out) & (pos <= xp[-1])
        out[todo] = np.interp(pos[todo], xp, fp)
        carry = (float(xp[-1]), float(fp[-1]))
        offset = float(cum[-1])
    if carry is not None:
        out[np.isnan(out)] = carry[1]
    return out


def bin_edges(tables: DistinctTable | Callable[[], Iterable[DistinctTable]], n_bins: int = 10,
              strategy: str = "uniform") -> np.ndarray:
    """Edges of ``n_bins`` bins for the distinct values of ``tables``.

    "uniform": equal widths over [0, 1] when all values lie in [0, 1], else
    over [min, max]. "quantile": the (weighted) quantiles at
    ``linspace(0, 1, n_bins + 1)``. ``tables`` is one table or a function
    returning ascending, non-overlapping score ranges.
    """
    if isinstance(tables, DistinctTable):
        one = tables
        tables = lambda: (one,)  # noqa: E731
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    lo, hi, total = np.inf, -np.inf, 0.0
    for t in tables():
        if len(t):
            lo, hi = min(lo, float(t.score[0])), max(hi, float(t.score[-1]))
            total += float(t.weight.sum())
    if total == 0.0:
        raise ValueError("bin edges of no values")
    if strategy == "uniform":
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError("uniform bins need finite values")
        if lo >= 0.0 and hi <= 1.0:
            lo, hi = 0.0, 1.0
        return np.linspace(lo, hi, n_bins + 1)
    if strategy == "quantile":
        return ordered_quantiles(tables, np.linspace(0.0, 1.0, n_bins + 1), total)
    raise ValueError(f"strategy must be 'uniform' or 'quantile', got {strategy!r}")


def bin_ids(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Bin of each value: ``searchsorted(edges[1:-1], v)``, as scikit-learn."""
    return np.searchsorted(edges[1:-1], values)
