"""Bin edges shared by histogram calibration and calibration curves.

The bins are scikit-learn's ``calibration_curve`` bins: edges
``linspace(0, 1, n_bins + 1)`` ("uniform") or the quantiles of the values
("quantile", ``np.percentile`` with linear interpolation), and bin ids
``searchsorted(edges[1:-1], p)`` (a value on an inner edge falls in the
lower bin).
"""

from __future__ import annotations

import numpy as np

__all__ = ["weighted_quantiles", "bin_edges", "bin_ids"]


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Quantiles of sorted distinct ``values`` carrying ``weights``.

    Generalises ``np.percentile(..., method="linear")``: with cumulative
    weight C_i, value i occupies the positions [C_{i-1}, C_i - 1] of the
    weight-repeated sample, the function is linear between neighbouring
    values, and quantile q sits at position q (W - 1). For integer weights
    this is exactly ``np.percentile`` of the rows repeated by weight; for
    unit weights, of the rows themselves.
    """
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if values.shape[0] == 0:
        raise ValueError("weighted_quantiles of no values")
    cum = np.cumsum(weights)
    first = cum - weights
    last = np.maximum(first, cum - 1.0)
    xp = np.empty(2 * values.shape[0])
    xp[0::2] = first
    xp[1::2] = last
    fp = np.repeat(values, 2)
    total = cum[-1]
    pos = q * max(total - 1.0, 0.0)
    return np.interp(pos, xp, fp)


def bin_edges(values: np.ndarray, weights: np.ndarray, n_bins: int = 10,
              strategy: str = "uniform") -> np.ndarray:
    """Edges of ``n_bins`` bins for sorted distinct ``values`` with ``weights``.

    "uniform": equal widths over [0, 1] when all values lie in [0, 1], else
    over [min, max]. "quantile": the (weighted) quantiles at
    ``linspace(0, 1, n_bins + 1)``.
    """
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    if strategy == "uniform":
        lo, hi = float(values[0]), float(values[-1])
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError("uniform bins need finite values")
        if lo >= 0.0 and hi <= 1.0:
            lo, hi = 0.0, 1.0
        return np.linspace(lo, hi, n_bins + 1)
    if strategy == "quantile":
        return weighted_quantiles(values, weights, np.linspace(0.0, 1.0, n_bins + 1))
    raise ValueError(f"strategy must be 'uniform' or 'quantile', got {strategy!r}")


def bin_ids(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Bin of each value: ``searchsorted(edges[1:-1], v)``, as scikit-learn."""
    return np.searchsorted(edges[1:-1], values)
