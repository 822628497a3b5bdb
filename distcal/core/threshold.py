"""Optimal thresholds for linear losses, as a monoid over ordered segments.

Rule: predict positive iff score >= t. Each distinct score s carries the
linear loss z_s of predicting its rows positive rather than negative:
z_s = sum_i w_i (c_fp (1 - y_i) - c_fn y_i) for class costs, or the sum of
w_i z_i for a per-row loss (Definitions 1-4 of "Optimally Efficient
Sequential Calibration of Binary Classifiers to Minimize Classification
Error"). The cost of t is  base + sum_{s >= t} z_s, base being the cost of
predicting everything negative (c_fn times the positive weight; 0 for a
per-row loss), so the optimum is the minimum suffix sum of z (the empty
suffix, t = +inf, included).

A contiguous score segment is summarised by  (Z = sum z, B = min suffix
sum, t_B = where that suffix starts) plus the weight and positives of the
segment and of its best suffix (to report the confusion at t). Neighbours
L < R merge by

    Z = Z_L + Z_R;   if B_R <= B_L + Z_R:  B, t = B_R, t_R   else  B, t = B_L + Z_R, t_L

(docs/design.md). The merge is associative, so segments can be summarised
per range partition, or per node of a balanced tree, and combined in score
order. Preferring the right side on equal B returns the largest threshold
among those of equal cost.

Equal means equal to within ``TIE`` times the *mass* of the longer of the
two suffixes compared: the sum, over its scores, of the magnitudes of the
terms z is made of (|c_fp| (W - Y) + |c_fn| Y for class costs, the sum of
its rows' |w z| for a per-row loss), which bounds the rounding of either
sum, however the terms cancel. The same z added
in another order (other partitions, ranges or arrival order) differ in
their last bits, and so do costs equal as written (3 x 0.1 against 0.3), so
an exact comparison would let rounding pick among thresholds of equal cost,
and two engines pick differently. The mass is that of the scores the two
suffixes hold, not of the whole table, so a large loss elsewhere (below
both candidates) widens no tie, and a cost difference is a tie only when
it is below 2^-36 of what the compared rows' costs add up to in magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .distinct import DistinctTable

__all__ = ["SegmentSummary", "summarise_segment", "merge_segments", "loss_per_score",
           "loss_mass", "TIE"]

TIE = 2.0 ** -36


@dataclass(frozen=True)
class SegmentSummary:
    z: float = 0.0  # sum of z over the segment
    best: float = 0.0  # min suffix sum, <= 0 (the empty suffix counts)
    threshold: float = math.inf  # where the best suffix starts; +inf if empty
    weight: float = 0.0  # weight of the segment
    positives: float = 0.0  # weighted positives of the segment
    best_weight: float = 0.0  # weight in the best suffix (predicted positive)
    best_positives: float = 0.0  # positives in the best suffix
    mass: float = 0.0  # sum of the magnitudes of z's terms over the segment
    best_mass: float = 0.0  # the same over the best suffix: the scale of its ties

    def __add__(self, right: SegmentSummary) -> SegmentSummary:
        return merge_segments(self, right)


EMPTY = SegmentSummary()


def merge_segments(left: SegmentSummary, right: SegmentSummary) -> SegmentSummary:
    """Summary of ``left`` followed by ``right`` (all of left's scores are lower)."""
    through = left.best + right.z  # left's best suffix and all of right
    longer = left.best_mass + right.mass
    if right.best <= through + TIE * longer:
        best, t, bm = right.best, right.threshold, right.best_mass
        bw, bp = right.best_weight, right.best_positives
    else:
        best, t, bm = through, left.threshold, longer
        bw, bp = left.best_weight + right.weight, left.best_positives + right.positives
    return SegmentSummary(left.z + right.z, best, t, left.weight + right.weight,
                          left.positives + right.positives, bw, bp,
                          left.mass + right.mass, bm)


def loss_per_score(table: DistinctTable, cost_fp: float, cost_fn: float) -> np.ndarray:
    """z_s = c_fp (W_s - Y_s) - c_fn Y_s for class costs."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: refused by the caller
        z: np.ndarray = cost_fp * (table.weight - table.positives) - cost_fn * table.positives
    return z


def loss_mass(table: DistinctTable, cost_fp: float, cost_fn: float) -> np.ndarray:
    """|c_fp| (W_s - Y_s) + |c_fn| Y_s: the magnitude of z_s's terms (the scale of its
    rounding, whatever the two terms cancel)."""
    with np.errstate(over="ignore", invalid="ignore"):
        mass: np.ndarray = (abs(cost_fp) * (table.weight - table.positives)
                            + abs(cost_fn) * table.positives)
    return mass


def summarise_segment(score: np.ndarray, z: np.ndarray, mass: np.ndarray, weight: np.ndarray,
                      positives: np.ndarray) -> SegmentSummary:
    """Summary of distinct ascending scores with loss z (terms of magnitude ``mass``),
    in O(n) by a suffix scan."""
    n = score.shape[0]
    if n == 0:
        return EMPTY
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: refused by the caller
        suffix = np.cumsum(z[::-1])  # suffix[j] = sum of the last j + 1 values of z
        suffix_mass = np.cumsum(mass[::-1])
    # The smallest suffix sum (the shortest of equal ones: argmin's first); the
    # shortest suffix within TIE times its mass of it, or the empty one (0), wins:
    # none of them is longer than the smallest one.
    j = int(np.argmin(suffix))
    low = float(suffix[j])
    tie = TIE * float(suffix_mass[j])
    if low < -tie:
        j = int(np.argmax(suffix <= low + tie))
        i = n - 1 - j
        best, t, bm = float(suffix[j]), float(score[i]), float(suffix_mass[j])
        bw, bp = float(weight[i:].sum()), float(positives[i:].sum())
    else:
        best, t, bm, bw, bp = 0.0, math.inf, 0.0, 0.0, 0.0
    return SegmentSummary(float(suffix[-1]), best, t, float(weight.sum()),
                          float(positives.sum()), bw, bp, float(suffix_mass[-1]), bm)
