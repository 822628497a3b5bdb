"""A binary calibration map as a sorted search plus one affine piece per leaf.

Every blocks-based map of :class:`~distcal.CalibrationModel` predicts, for a
score s, the value of one *leaf* chosen by counting thresholds:

    i(s) = #{j : t_j <= s}   (``right=True``)   or   #{j : t_j < s}   (``right=False``)

over ascending thresholds t_0 <= ... <= t_{m-1}, and leaf i is either a
constant y_i or the affine piece slope_i * (s - x_i) + y_i:

* isotonic "step" and MODL: t = the blocks' ``score_min[1:]``, right;
  leaf i = ``prob[i]`` (``searchsorted(score_min, s, "right") - 1``,
  clipped to the lowest block below the range);
* histogram: t = the inner edges, left; leaf i = ``bin_prob[i]``
  (``searchsorted(edges[1:-1], s)``);
* venn_abers: constant leaves over strict thresholds (:func:`_venn_abers`);
* isotonic "linear" and "centered": t = the distinct finite knots u_0 < ... <
  u_{m-1}, right; leaf 0 (below the range) = the first knot's value, leaf m
  (at or above the last knot) = the last knot's value, and leaf i between
  u_{i-1} and u_i is numpy's ``interp``: slope = (y_r - y_l) / (u_i -
  u_{i-1}) and p = slope * (s - u_{i-1}) + y_l, with y_l the value of the
  *last* knot at u_{i-1} and y_r that of the *first* knot at u_i (a block of
  one score has two knots at the same x; ``np.interp`` takes the interval
  that starts at the last of them). A zero slope is a constant leaf, so
  infinite scores never meet 0 * inf.

Overrides for s = -inf and s = +inf cover a lowest (highest) block with no
finite knot (:meth:`~distcal.CalibrationModel.end_knots`). NaN in gives NaN
out and is handled by each target around the search.

Spark's transforms inside the JVM (:mod:`distcal.engines.spark.transform`)
and the exports (SQL, ONNX) evaluate exactly these operations in double
precision, so they reproduce ``predict`` to the last bit where the
target's arithmetic is IEEE double (comparisons, one subtraction, one
multiplication, one addition per score).

This module reads models through their public attributes only (``method``,
``params``, ``block_arrays()``, ``knots()``, ``end_knots()``): the core imports no
model module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .distinct import starts_of_runs

__all__ = ["Piecewise", "piecewise", "is_keyed"]


@dataclass(frozen=True)
class Piecewise:
    """p(s) = leaf ``i(s)`` (see the module docstring); arrays of the m + 1 leaves."""

    thresholds: np.ndarray
    right: bool
    constant: np.ndarray  # bool: leaf i is y[i] (no slope)
    slope: np.ndarray
    x0: np.ndarray
    y0: np.ndarray
    at_neg_inf: float | None = None
    at_pos_inf: float | None = None

    @property
    def n_leaves(self) -> int:
        return int(self.y0.shape[0])


def is_keyed(model: Any) -> bool:
    """Whether ``model`` is a :class:`~distcal.KeyedModel` (multiclass or segmented)."""
    return hasattr(model, "n_classes")


def _constants(thresholds: np.ndarray, right: bool, values: np.ndarray,
               at_neg_inf: float | None = None, at_pos_inf: float | None = None) -> Piecewise:
    y = np.asarray(values, dtype=np.float64)
    n = y.shape[0]
    return Piecewise(np.asarray(thresholds, dtype=np.float64), right, np.ones(n, dtype=bool),
                     np.zeros(n), np.zeros(n), y, at_neg_inf, at_pos_inf)


def piecewise(model: Any) -> Piecewise | None:
    """The :class:`Piecewise` form of a binary model; None for sigmoid and beta (formulas)."""
    method = model.method
    if method in ("sigmoid", "beta"):
        return None
    if method == "venn_abers":
        return _venn_abers(model)
    if method == "histogram":
        edges = np.asarray(model.params["edges"], dtype=np.float64)
        return _constants(edges[1:-1], False, np.asarray(model.params["bin_prob"]))
    b = model.block_arrays()  # not .blocks: a DataFrame a map (slow for 10^4 segments)
    prob = np.asarray(b.prob, dtype=np.float64)
    if method == "modl" or model.params.get("interpolation", "linear") == "step":
        return _constants(np.asarray(b.score_min, dtype=np.float64)[1:], True, prob)
    return _linear(model, prob)


def _venn_abers(model: Any) -> Piecewise:
    """p1 / (1 - p0 + p1) as constant leaves over strict thresholds (``right=False``).

    p0 changes where s reaches a threshold x of its own (x <= s, which for
    doubles is nextafter(x, -inf) < s), p1 just past one of its own (x < s):
    over the union of those strict thresholds both are constant on every
    leaf (u_{i-1}, u_i], and each leaf's value is ``predict`` at its right
    end (the last leaf: just above the last threshold). Infinite scores are
    the overrides.
    """
    st = model.steps
    x0 = st["score"].to_numpy(dtype=np.float64)[st["kind"].to_numpy() == 0]
    x1 = st["score"].to_numpy(dtype=np.float64)[st["kind"].to_numpy() == 1]
    u = np.unique(np.concatenate([np.nextafter(x0, -np.inf), x1]))
    u = u[np.isfinite(u)]
    at = np.append(u, np.nextafter(u[-1], np.inf) if u.shape[0] else 0.0)
    y = model.predict(at)
    ends = model.predict(np.array([-np.inf, np.inf]))
    return _constants(u, False, y, float(ends[0]), float(ends[1]))


def _linear(model: Any, prob: np.ndarray) -> Piecewise:
    x, y = model.knots()
    if x.shape[0] == 0:  # every fitted score infinite: prob[-1] for s > 0, else prob[0]
        return _constants(np.array([0.0]), False, np.array([prob[0], prob[-1]]))
    first = starts_of_runs(x)  # x ascending: its distinct knots u start runs
    u = x[first]
    last = np.append(first[1:], x.shape[0]) - 1
    m = u.shape[0]
    yl, yr = y[last[:-1]], y[first[1:]]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        slope = (yr - yl) / (u[1:] - u[:-1])  # np.interp's slope, operand for operand
    # A zero slope gives y_l exactly; a slope that overflows (knots closer than
    # ~1e-308 with different values) is taken as a step at the left knot.
    flat = (slope == 0.0) | ~np.isfinite(slope)
    constant = np.concatenate(([True], flat, [True]))
    slopes = np.concatenate(([0.0], np.where(flat, 0.0, slope), [0.0]))
    x0 = np.concatenate(([0.0], u[:-1], [0.0]))
    y0 = np.concatenate(([y[0]], yl, [y[-1]]))
    assert slopes.shape[0] == m + 1
    low, high = model.end_knots()
    return Piecewise(u, True, constant, slopes, x0, y0,
                     at_neg_inf=None if np.isfinite(low) else float(prob[0]),
                     at_pos_inf=None if np.isfinite(high) else float(prob[-1]))
