"""Inductive Venn-Abers predictors (Vovk & Petej 2014; Vovk, Petej & Fedorova 2015).

For a test score t, p0(t) is the value at t of the isotonic regression (ties
pooled) of the calibration rows plus the row (t, label 0, weight 1), and
p1(t) the same with label 1. The prediction is p1 / (1 - p0 + p1).

Both are step functions over the distinct calibration scores
x_1 < ... < x_k (weights W_j, weighted label sums Y_j), because:

* a test score equal to x_j is pooled with it: the block of x_j gets
  (W_j + 1, Y_j + y) for label y;
* a test score strictly between x_j and x_{j+1} gives the value of the
  pooled one at x_j for label 0, and at x_{j+1} for label 1. Proof: in an
  isotonic block every prefix has mean >= the block's and every suffix <=
  it. An added row of label 1 ending its block would make the block's mean
  1, and the next block's mean could not exceed it; so it shares a block
  with x_{j+1}, and forcing the two to be equal (pooling them) changes
  nothing. Label 0 starting its block, symmetrically, shares x_j's block.
* below x_1 the added row of label 0 is a block of its own: p0 = 0; above
  x_k, p1 = 1.

So p0(t) = P0[j] for the largest x_j <= t (0 below x_1) and p1(t) = P1[j]
for the smallest x_j >= t (1 above x_k), with P0[j], P1[j] the isotonic
values at x_j of the pooled problems; p0 <= p1 everywhere (isotonic
regression is monotone in the labels) and both are non-decreasing.

All P0[j], P1[j] at once, without refitting per score: Vovk et al. read
them off the cumulative sum diagram's greatest convex minorant; we use the
same fact in the block form of PAV. A left-to-right PAV scan over the
distinct scores records, for every j, the block that PAV of the prefix
x_1..x_j ends with (its start and sums): following those records from
j - 1 leftwards walks the prefix's block stack as it was (a persistent
stack). A right-to-left scan records the suffixes' stacks the same way.
The pooled problem at j is then (prefix blocks, the pooled row, suffix
blocks), both stacks strictly increasing, so PAV only has to pool the row
with the top of either stack while they violate the order: a handful of
blocks in practice (the trailing blocks of a prefix's PAV are few), at
worst every block on one side.

Over score ranges (a cluster): each range's PAV blocks are a valid
intermediate state of the global PAV (docs/design.md), so the prefix stack
before range r is PAV of the blocks of ranges 0..r-1 merged in order, and
the suffix stack after it PAV of the blocks of ranges r+1..; each range
receives every range's blocks (what an isotonic fit brings to the driver),
builds its two carries and scans its own scores (:func:`venn_abers_plan`,
two passes). The steps are run-length compressed (a run of equal values
needs one threshold), per range and across range boundaries.

Blocks rather than the cumulative sum diagram's points: a slope between
two running totals loses about log10(total / block weight) digits (1e-9
relative for a block of weight 1 after 10^7 rows); block sums are sums of
the rows they pool, as in PAV. The price: a walk costs the blocks it
pools (a handful on real data; at worst every block of a side), where the
paper's corner stacks are strictly linear.

The loop is compiled with numba on large tables (as
:mod:`distcal.core.segment_pav`'s); scipy and numpy have no persistent-stack
PAV, so it is written here.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError, sums_overflow
from .distinct import DistinctTable
from .isotonic import Blocks, merge_blocks, pav_blocks

__all__ = ["Steps", "venn_abers_values", "venn_abers_plan", "LabelsNotBinary",
           "count_not_binary"]


@dataclass(frozen=True)
class Steps:
    """The two step functions of a Venn-Abers predictor (module docstring).

    p0(t) = ``v0[i]`` for the largest ``x0[i] <= t`` (0 below ``x0[0]``);
    p1(t) = ``v1[i]`` for the smallest ``x1[i] >= t`` (1 above ``x1[-1]``).
    Thresholds strictly ascending; runs of equal values are one threshold.
    """

    x0: np.ndarray
    v0: np.ndarray
    x1: np.ndarray
    v1: np.ndarray

    def interval(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p0, p1) at ``scores``; NaN in gives NaN out."""
        s = np.asarray(scores, dtype=np.float64)
        i0 = np.searchsorted(self.x0, s, side="right") - 1
        p0 = np.where(i0 >= 0, self.v0[np.maximum(i0, 0)], 0.0)
        i1 = np.searchsorted(self.x1, s, side="left")
        n1 = self.x1.shape[0]
        p1 = np.where(i1 < n1, self.v1[np.minimum(i1, n1 - 1)], 1.0)
        nan = np.isnan(s)
        if nan.any():
            p0, p1 = np.where(nan, np.nan, p0), np.where(nan, np.nan, p1)
        return p0, p1

    def predict(self, scores: np.ndarray) -> np.ndarray:
        """p1 / (1 - p0 + p1) (Vovk et al.'s merge; the denominator is >= 1 as p0 <= p1)."""
        p0, p1 = self.interval(scores)
        out: np.ndarray = p1 / (1.0 - p0 + p1)
        return out


def _scan(w: np.ndarray, y: np.ndarray, reverse: bool) -> np.ndarray:
    """PAV of every prefix (``reverse``: every suffix) as a persistent stack.

    Record i (row i of the result): the far end of the block that PAV of
    items 0..i (of i..n-1) ends (starts) with, that block's weight, label
    sum and mean. The block below it is record ``far - 1`` (above it,
    ``far + 1``). One row per record: a walk down the stack touches one
    cache line per block, which is what the cost of :func:`_values` is.
    """
    n = w.shape[0]
    rec = np.empty((n, 4), dtype=np.float64)
    for k in range(n):
        i = n - 1 - k if reverse else k
        cw = w[i]
        cy = y[i]
        end = i
        top = i + 1 if reverse else i - 1
        # Increasing fit: pool the stack's top while its mean is >= the new
        # block's (scanning leftwards, the front's while it is <=).
        while 0 <= top < n:
            m = rec[top, 3]
            if (m <= cy / cw) if reverse else (m >= cy / cw):
                cw += rec[top, 1]
                cy += rec[top, 2]
                end = int(rec[top, 0])
                top = end + 1 if reverse else end - 1
            else:
                break
        rec[i, 0] = end
        rec[i, 1] = cw
        rec[i, 2] = cy
        rec[i, 3] = cy / cw
    return rec


def _values(w: np.ndarray, y: np.ndarray, m_left: int, n: int, left_rec: np.ndarray,
            right_rec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P0, P1 of the ``n`` scores at items ``m_left .. m_left + n - 1`` of (w, y).

    ``left_rec``, ``right_rec``: :func:`_scan` forwards and backwards. Items
    before the scores are the left carry's blocks, after them the right
    carry's (a block of a valid pooling behaves as one row).
    """
    total = w.shape[0]
    p0 = np.empty(n, dtype=np.float64)
    p1 = np.empty(n, dtype=np.float64)
    for j in range(n):
        i = m_left + j
        for label in range(2):
            cw = w[i] + 1.0
            cy = y[i] + label
            left = i - 1
            right = i + 1
            while True:
                if left >= 0 and left_rec[left, 3] >= cy / cw:
                    cw += left_rec[left, 1]
                    cy += left_rec[left, 2]
                    left = int(left_rec[left, 0]) - 1
                elif right < total and right_rec[right, 3] <= cy / cw:
                    cw += right_rec[right, 1]
                    cy += right_rec[right, 2]
                    right = int(right_rec[right, 0]) + 1
                else:
                    break
            if label == 0:
                p0[j] = cy / cw
            else:
                p1[j] = cy / cw
    return p0, p1


#: Past this many rows numba's kernels (~1 s to compile, once per process) are faster.
COMPILE_ROWS = 20_000


@functools.cache
def _kernels() -> tuple[Any, Any]:
    """(:func:`_scan`, :func:`_values`) compiled once per process by numba.

    Not cached on disk (as :mod:`distcal.core.segment_pav`'s kernel).
    """
    from numba import njit
    return njit(cache=False, nogil=True)(_scan), njit(cache=False, nogil=True)(_values)


def venn_abers_values(table: DistinctTable, left: Blocks | None = None,
                      right: Blocks | None = None, compiled: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """P0[j], P1[j] at every distinct score of ``table`` (module docstring).

    ``left``/``right``: the PAV blocks of all rows below/above the table's
    scores (none: the table is all the rows). ``compiled``: run numba's
    kernels however small the table (the same values; a fit of many small
    keys pays their compilation once for all of them).
    """
    lo = [left] if left is not None and len(left) else []
    hi = [right] if right is not None and len(right) else []
    w = np.concatenate([b.weight for b in lo] + [np.asarray(table.weight, dtype=np.float64)]
                       + [b.weight for b in hi])
    y = np.concatenate([b.positives for b in lo] + [np.asarray(table.positives, dtype=np.float64)]
                       + [b.positives for b in hi])
    m_left = len(left) if left is not None else 0
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(y))):
        raise sums_overflow()
    # Scores a Python loop handles faster than numba's import and compilation (~1 s).
    scan, values = _kernels() if compiled or w.shape[0] > COMPILE_ROWS else (_scan, _values)
    p0, p1 = values(w, y, m_left, len(table), scan(w, y, False), scan(w, y, True))
    return p0, p1


# Step values closer than this (relative) are one run. P0 and P1 are non-decreasing,
# and values that are equal in exact arithmetic (one pooled block) differ in their
# last bits when the block's sums are added in another order (another partitioning
# or engine; weights that are not small binary fractions): compared exactly, such a
# pair would keep a threshold on one engine and not on another, and a value a few
# ulps below its predecessor would make the map decrease (which load refuses).
RUN_RTOL = 1e-11


def _runs(x: np.ndarray, v: np.ndarray, first: bool) -> tuple[np.ndarray, np.ndarray]:
    """One (score, value) per run of equal values (:data:`RUN_RTOL`) of non-decreasing ``v``:
    the first score of each run (``first``, p0) or the last (p1)."""
    v = np.maximum.accumulate(v)  # exact arithmetic never decreases: rounding only
    new = np.diff(v) > RUN_RTOL * v[1:]
    keep = np.concatenate(([True], new)) if first else np.concatenate((new, [True]))
    return x[keep], v[keep]


def join_steps(parts: list[Steps]) -> Steps:
    """The steps of neighbouring score ranges (ascending) as one, compressed across joins.

    Run-length compression: p0 keeps the first score of each run, p1 the last.
    """
    parts = [p for p in parts if p.x0.shape[0]]
    if not parts:
        z = np.zeros(0)
        return Steps(z, z, z, z)
    x0, v0 = _runs(np.concatenate([p.x0 for p in parts]),
                   np.concatenate([p.v0 for p in parts]), True)
    x1, v1 = _runs(np.concatenate([p.x1 for p in parts]),
                   np.concatenate([p.v1 for p in parts]), False)
    return Steps(x0, v0, x1, v1)


class LabelsNotBinary(DataError):
    """Labels other than 0/1 reached a Venn-Abers fit (the fit counts the rows holding them)."""


def count_not_binary(rows: Any) -> int:
    """Rows of a :class:`~distcal.core.rows.RowPart` whose label is neither 0 nor 1."""
    return int(np.count_nonzero((rows.label != 0.0) & (rows.label != 1.0)))


def _first(t: DistinctTable) -> tuple[Blocks, float, int]:
    """Pass 1 of a range: its PAV blocks, first score and rows with labels not 0/1."""
    frac = t.label_sum != np.round(t.label_sum)
    bad = int(t.count[frac].sum()) if not t.binary else 0
    if not t.binary and bad == 0:
        bad = -1  # labels other than 0/1 whose sums are whole numbers: count unknown
    return pav_blocks(t, True), float(t.score[0]) if len(t) else np.inf, bad


class _Second:
    """Pass 2 of a range: its compressed steps, from every range's blocks (module docstring)."""

    def __init__(self, blocks: list[Blocks], firsts: list[float], compiled: bool):
        self.blocks, self.firsts, self.compiled = blocks, firsts, compiled

    def __call__(self, t: DistinctTable) -> Steps:
        if not len(t):
            return join_steps([])
        r = bisect.bisect_right(self.firsts, float(t.score[0])) - 1
        left = merge_blocks(self.blocks[:r]) if r > 0 else None
        right = merge_blocks(self.blocks[r + 1:]) if r + 1 < len(self.blocks) else None
        p0, p1 = venn_abers_values(t, left, right, self.compiled)
        return join_steps([Steps(t.score, p0, t.score, p1)])


def venn_abers_plan(label_col: str | None = None, fit_rows: int = 0
                    ) -> Generator[Any, list[Any], Steps]:
    """The Venn-Abers steps as a plan (:mod:`distcal.core.plans`): two passes.

    ``label_col`` names the label column in the messages. ``fit_rows``: the
    rows of the whole fit, all keys together; past :data:`COMPILE_ROWS`
    every key runs numba's kernels (10,000 segments of 200 rows would
    otherwise run 2e6 rows through the Python loops).
    """
    firsts_parts = yield _first
    bad = [b for _, _, b in firsts_parts if b]
    if bad:
        # The pooled table knows which scores hold labels other than 0/1, not
        # which of their rows: the caller counts the rows (LabelsNotBinary).
        where = f"column '{label_col}' (label): " if label_col else ""
        known = sum(b for b in bad if b > 0)
        among = f" (among the {known} rows of the scores that hold them)" if known else ""
        raise LabelsNotBinary(f"{where}labels other than 0 and 1{among}; Venn-Abers "
                              "predictors take 0/1 labels")
    blocks = [b for b, _, _ in firsts_parts]
    firsts = [f for _, f, _ in firsts_parts]
    parts = yield _Second(blocks, firsts, fit_rows > COMPILE_ROWS)
    return join_steps(parts)
