"""Bin edges shared by histogram calibration and calibration curves.

The bins are scikit-learn's ``calibration_curve`` bins: edges
``linspace(0, 1, n_bins + 1)`` ("uniform") or the quantiles of the values
("quantile", ``np.percentile`` with linear interpolation), and bin ids
``searchsorted(edges[1:-1], p)`` (a value on an inner edge falls in the
lower bin).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from ..errors import ParameterError
from .distinct import DistinctTable
from .keyed import KeyedTable
from .plans import KeyBatch, KeyResults, run_plan
from .ranges import MapRanges, as_map_ranges
from .threshold import TIE

__all__ = ["quantiles_plan", "bin_edges", "edges_plan", "bin_ids",
           "uniform_edges"]


class _RangeStats(KeyBatch):
    """First and last value, total and last weight, rows, and whether every weight is a
    whole number, of one range (of each key's part of it: one call for all the keys of a
    range)."""

    def run(self, which: np.ndarray, part: KeyedTable) -> KeyResults:
        t, first = part.table, part.starts[:-1]
        last = part.starts[1:] - 1
        whole = np.logical_and.reduceat(t.weight == np.floor(t.weight), first)
        return KeyResults([t.score[first], t.score[last], np.add.reduceat(t.weight, first),
                           t.weight[last], np.add.reduceat(t.count, first), whole],
                          [None] * 6)


def uniform_edges(lo: float, hi: float, n_bins: int) -> np.ndarray:
    """``linspace(lo, hi, n_bins + 1)``, finite even when ``hi - lo`` overflows."""
    with np.errstate(over="ignore", invalid="ignore"):
        width = hi - lo
    if np.isfinite(width):
        return np.linspace(lo, hi, n_bins + 1)
    # |lo| and |hi| near the largest double: a convex combination never overflows.
    t = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    edges: np.ndarray = lo * (1.0 - t) + hi * t
    edges[0], edges[-1] = lo, hi
    return np.maximum.accumulate(edges)


def quantiles_plan(q: np.ndarray, stats: list[tuple[float, float, float, float, int, bool]]
                   ) -> Generator[Any, list[Any], np.ndarray]:
    """Weighted quantiles at ``q`` of the distinct values of ascending ranges, as a plan.

    Generalises ``np.percentile(..., method="linear")``: with cumulative
    weight C_i, value i occupies the positions [C_{i-1}, C_i - 1] of the
    weight-repeated sample, the function is linear between neighbouring
    values, and quantile q sits at position q (W - 1). For integer weights
    this is exactly ``np.percentile`` of the rows repeated by weight; for
    unit weights, of the rows themselves.

    The ranges' :class:`_RangeStats` (non-empty: first and last values and
    weights) give each range its offset; then one pass evaluates in each
    range the positions that fall inside it, and the driver interpolates
    positions that fall between two ranges from the stats alone.

    Weights that are not all whole numbers make the positions sums whose
    last bits depend on the order they were added in (per range, per
    engine), so a quantile on a value's position in exact arithmetic would
    land a rounding either side of it, and the edge a rounding either side
    of the value: every row of that value would change bins. A position
    within ``TIE`` (2^-36, :mod:`distcal.core.threshold`) of a knot's,
    relative to its size, is then that knot's. Whole-number weights give
    exact positions, and edges that are ``np.percentile``'s to the last bit.
    """
    tie = 0.0 if all(st[5] for st in stats) else TIE
    weights = np.array([st[2] for st in stats])
    offsets = np.concatenate(([0.0], np.cumsum(weights)[:-1]))
    total = float(weights.sum())
    pos = np.asarray(q, dtype=np.float64) * max(total - 1.0, 0.0)
    # Position of the last knot of each range (see the definition above).
    last = offsets + np.maximum(weights - np.array([st[3] for st in stats]), weights - 1.0)
    out = np.full(pos.shape, np.nan)
    inside: dict[float, tuple[float, np.ndarray]] = {}
    at = np.searchsorted(offsets, pos, side="right") - 1  # the range each position starts in
    for k in np.unique(at).tolist():  # (the ranges of a few positions, not every range)
        idx = np.flatnonzero((at == k) & (pos <= last[k]))
        if idx.shape[0]:
            inside[float(stats[k][0])] = (float(offsets[k]), idx)
        gap = np.flatnonzero((at == k) & (pos > last[k]))
        if gap.shape[0] and k + 1 < len(stats):  # between the range's last knot and the next
            out[gap] = percentile_interp(pos[gap], np.array([last[k], offsets[k + 1]]),
                                         np.array([stats[k][1], stats[k + 1][0]]), tie)
        elif gap.shape[0]:  # past the last knot of all
            out[gap] = stats[-1][1]
    if inside:
        found = yield _InsideRange(inside, pos, tie)
        for res in found:
            if res is not None:
                out[res[0]] = res[1]
    return out


def percentile_interp(x: np.ndarray, xp: np.ndarray, fp: np.ndarray, tie: float = 0.0
                      ) -> np.ndarray:
    """``np.interp(x, xp, fp)`` computed as ``np.percentile`` interpolates.

    Between knots a and b at fraction t, numpy's percentile takes a + (b - a) t
    below t = 1/2 and b - (b - a)(1 - t) from there (its ``_lerp``), where
    ``np.interp`` always starts from a: the two differ in the last bit, and a
    value lying on an edge then falls in another bin than scikit-learn's.
    Written here because numpy exposes that rule only inside ``np.percentile``,
    which needs all values in one array. Where ``b - a`` overflows (finite
    knots more than the largest double apart), the convex combination
    a (1 - t) + b t, which does not (numpy's rule gives -inf there). Where
    that rule gives NaN (infinite knots), ``np.interp``'s value. An ``x``
    within ``tie`` times its size of a knot takes that knot's value (the
    nearer one's).
    """
    j = np.clip(np.searchsorted(xp, x, side="right") - 1, 0, len(xp) - 2)
    a, b, width = fp[j], fp[j + 1], xp[j + 1] - xp[j]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        t = np.where(width > 0, (x - xp[j]) / np.where(width > 0, width, 1.0), 0.0)
        out: np.ndarray = np.where(t < 0.5, a + (b - a) * t, b - (b - a) * (1.0 - t))
        wide = ~np.isfinite(b - a) & np.isfinite(a) & np.isfinite(b)
    if wide.any():
        out[wide] = a[wide] * (1.0 - t[wide]) + b[wide] * t[wide]
    bad = np.isnan(out)
    if bad.any():
        out[bad] = np.interp(x[bad], xp, fp)
    if tie:
        below, above, near = x - xp[j], xp[j + 1] - x, tie * np.abs(x)
        out = np.where((above <= near) & (above < below), b, np.where(below <= near, a, out))
    return out


class _InsideRange(KeyBatch):
    """The quantile positions that fall inside one range, evaluated there."""

    def __init__(self, inside: dict[float, tuple[float, np.ndarray]], pos: np.ndarray,
                 tie: float):
        self.inside, self.pos, self.tie = inside, pos, tie

    @classmethod
    def pack(cls, requests: list[_InsideRange]) -> _InsideRanges:
        return _InsideRanges(requests)


class _InsideRanges:
    """Many keys' :class:`_InsideRange`: each key's rows of a range evaluated where they lie
    (a key has positions in a few of its ranges; the others cost a lookup)."""

    def __init__(self, requests: list[_InsideRange]):
        self.requests = requests

    def run(self, which: np.ndarray, part: KeyedTable
            ) -> list[tuple[np.ndarray, np.ndarray] | None]:
        t, starts = part.table, part.starts.tolist()
        out: list[tuple[np.ndarray, np.ndarray] | None] = []
        for k, i in enumerate(which.tolist()):
            request, lo, hi = self.requests[i], starts[k], starts[k + 1]
            job = request.inside.get(float(t.score[lo]))
            if job is None:
                out.append(None)
                continue
            offset, idx = job
            w = t.weight[lo:hi]
            cum = offset + np.cumsum(w)
            first = cum - w
            xp = np.empty(2 * (hi - lo))
            xp[0::2], xp[1::2] = first, np.maximum(first, cum - 1.0)
            out.append((idx, percentile_interp(request.pos[idx], xp,
                                               np.repeat(t.score[lo:hi], 2), request.tie)))
        return out


def bin_edges(data: DistinctTable | MapRanges, n_bins: int = 10,
              strategy: str = "uniform", *, rows_for_bins: bool = False) -> np.ndarray:
    """Edges of ``n_bins`` bins for the distinct values of ``data``.

    "uniform": equal widths over [0, 1] when all values lie in [0, 1], else
    over [min, max]. "quantile": the (weighted) quantiles at
    ``linspace(0, 1, n_bins + 1)``. ``data`` is one table or a map over
    ascending, non-overlapping score ranges. With ``rows_for_bins``, more
    bins than rows is a :class:`~distcal.ParameterError` (histogram
    calibration), raised before any bin is computed.
    """
    return run_plan(edges_plan(n_bins, strategy, rows_for_bins=rows_for_bins),
                    as_map_ranges(data))


def edges_plan(n_bins: int = 10, strategy: str = "uniform", *, rows_for_bins: bool = False
               ) -> Generator[Any, list[Any], np.ndarray]:
    """:func:`bin_edges` as a plan (one pass, two for quantiles)."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    if strategy not in ("uniform", "quantile"):
        raise ValueError(f"strategy must be 'uniform' or 'quantile', got {strategy!r}")
    stats = yield _RangeStats()
    if not stats:
        raise ValueError("bin edges of no values")
    n_rows = sum(st[4] for st in stats)
    if rows_for_bins and n_bins > n_rows:
        raise ParameterError(f"n_bins must not exceed the number of rows ({n_rows}), got {n_bins}")
    if strategy == "quantile":
        # scikit-learn asks np.percentile for linspace(0, 1) * 100, which divides by 100
        # again: the same q to the last bit, so a value on an edge takes the same bin.
        q = np.linspace(0.0, 1.0, n_bins + 1) * 100.0 / 100.0
        edges = yield from quantiles_plan(q, stats)
        return edges
    lo, hi = stats[0][0], stats[-1][1]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError("uniform bins need finite values")
    if lo >= 0.0 and hi <= 1.0:
        lo, hi = 0.0, 1.0
    return uniform_edges(lo, hi, n_bins)


def bin_ids(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Bin of each value: ``searchsorted(edges[1:-1], v)``, as scikit-learn."""
    return np.searchsorted(edges[1:-1], values)
