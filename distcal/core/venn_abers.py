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
before range r is PAV of the blocks of ranges 0..r-1 in order, and the
suffix stack after it PAV of the blocks of ranges r+1..: the scans run over
those blocks as items, then the range's own scores. Each range receives
every range's blocks (what an isotonic fit brings to the driver) and
computes its scores' values (:func:`venn_abers_plan`, two passes, every key
of a range at once). The steps are run-length compressed (a run of equal
values needs one threshold), per range and across range boundaries.

Blocks rather than the cumulative sum diagram's points: a slope between
two running totals loses about log10(total / block weight) digits (1e-9
relative for a block of weight 1 after 10^7 rows); block sums are sums of
the rows they pool, as in PAV. The price: a walk costs the blocks it
pools (a handful on real data; at worst every block of a side), where the
paper's corner stacks are strictly linear.

The loop is compiled with numba on large tables when numba is importable (as
:mod:`distcal.core.segment_pav`'s); scipy and numpy have no persistent-stack
PAV, so it is written here.
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import sums_overflow
from .isotonic import Blocks
from .keyed import KeyedTable
from .plans import KeyBatch, KeyResults
from .rows import LabelsNotBinaryError
from .segment_pav import pav_segments

__all__ = ["Steps", "venn_abers_plan", "ZERO_ONE_LABELS"]

# What a fit says of labels other than 0 and 1.
ZERO_ONE_LABELS = "Venn-Abers predictors take 0/1 labels"


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
    before the scores are the blocks of the rows below them, after them the
    blocks of the rows above (a block of a valid pooling behaves as one row).
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


def _range_values_of(scan: Any, values: Any) -> Any:
    """:func:`_range_values` calling ``scan`` and ``values`` (Python or compiled)."""

    def range_values(bw: np.ndarray, by: np.ndarray, entry_blocks: np.ndarray,
                     key_entries: np.ndarray, firsts: np.ndarray, which: np.ndarray,
                     starts: np.ndarray, tw: np.ndarray, ty: np.ndarray, score: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """P0, P1 of every row of a range's keyed table (:class:`_StepsBatch`), each
        key's values made non-decreasing (exact arithmetic never decreases: rounding).

        Key k (rows ``starts[k]:starts[k + 1]`` of (tw, ty, score)) is request
        ``which[k]``, whose entries ``key_entries[i]:key_entries[i + 1]`` are its
        ranges (first scores ``firsts``; PAV blocks ``entry_blocks[e]:entry_blocks[e + 1]``
        of (bw, by)). Its items are the blocks of its ranges below this one,
        its rows here, the blocks of its ranges above: :func:`_scan` of them
        pools the ranges below as one PAV would (the left carry), and the
        ranges above likewise.
        """
        p0 = np.empty(tw.shape[0], dtype=np.float64)
        p1 = np.empty(tw.shape[0], dtype=np.float64)
        for k in range(which.shape[0]):
            lo, hi = starts[k], starts[k + 1]
            i = which[k]
            e0, e1 = key_entries[i], key_entries[i + 1]
            r = e0  # this range's entry: the last whose first score is <= the key's here
            while r + 1 < e1 and firsts[r + 1] <= score[lo]:
                r += 1
            a, b = entry_blocks[e0], entry_blocks[r]
            c, d = entry_blocks[r + 1], entry_blocks[e1]
            m, n = b - a, hi - lo
            # (loops, not slices and np.concatenate: numba compiles them in a fraction)
            w = np.empty(m + n + d - c)
            y = np.empty(m + n + d - c)
            for j in range(m):
                w[j], y[j] = bw[a + j], by[a + j]
            for j in range(n):
                w[m + j], y[m + j] = tw[lo + j], ty[lo + j]
            for j in range(d - c):
                w[m + n + j], y[m + n + j] = bw[c + j], by[c + j]
            q0, q1 = values(w, y, m, n, scan(w, y, False), scan(w, y, True))
            for j in range(n):
                p0[lo + j] = q0[j] if j == 0 or q0[j] > p0[lo + j - 1] else p0[lo + j - 1]
                p1[lo + j] = q1[j] if j == 0 or q1[j] > p1[lo + j - 1] else p1[lo + j - 1]
        return p0, p1

    return range_values


_range_values = _range_values_of(_scan, _values)


#: Past this many rows numba's kernels (~1 s to compile, once per process) are faster.
COMPILE_ROWS = 20_000


@functools.cache
def _compiled_range_values() -> Any:
    """:func:`_range_values` compiled once per process by numba, with the kernels it
    calls, or None without numba (Spark executors may have only numpy, pandas,
    pyarrow and scipy: the Python loop then runs). Not cached on disk (as
    :mod:`distcal.core.segment_pav`'s kernel)."""
    try:
        from numba import njit
    except ImportError:
        return None
    jit = njit(cache=False, nogil=True)
    return jit(_range_values_of(jit(_scan), jit(_values)))


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
    keep = _run_ends(v, np.array([0, len(v)]), first)
    return x[keep], v[keep]


def _run_ends(v: np.ndarray, starts: np.ndarray, first: bool) -> np.ndarray:
    """Which rows :func:`_runs` keeps, of the keys' non-decreasing values ``v`` (key k's
    are ``starts[k]:starts[k + 1]``, none empty)."""
    new = np.diff(v) > RUN_RTOL * v[1:]
    if first:
        keep = np.concatenate(([True], new))
        keep[starts[:-1]] = True
    else:
        keep = np.concatenate((new, [True]))
        keep[starts[1:-1] - 1] = True
    return keep


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


class _Blocks(KeyBatch):
    """Pass 1: each key's PAV blocks of a range (weights and label sums), its first score
    there, its rows with labels not 0/1 (-1: some, count unknown) and its distinct scores
    there, for all the range's keys at once
    (:func:`~distcal.core.segment_pav.pav_segments`)."""

    def run(self, which: np.ndarray, part: KeyedTable) -> KeyResults:
        t, starts = part.table, part.starts
        blocks, block_starts = pav_segments(Blocks.from_table(t), starts, True)
        sizes = np.diff(starts)
        first = np.full(len(sizes), np.inf)
        first[sizes > 0] = t.score[starts[:-1][sizes > 0]]
        # Only a fractional label sum shows which scores hold labels other than 0/1.
        frac = t.label_sum != np.round(t.label_sum)
        key = np.repeat(np.arange(len(sizes)), sizes)
        bad = np.rint(np.bincount(key, t.count * frac, len(sizes))).astype(np.int64)
        bad = np.where(part.binary, 0, np.where(bad == 0, -1, bad))
        return KeyResults([blocks.weight, blocks.positives, first, bad, sizes],
                          [block_starts, block_starts, None, None, None])


class _Steps(KeyBatch):
    """Pass 2: a key's compressed steps in each range, from the blocks of all its ranges
    (pass 1's results, ascending; module docstring)."""

    def __init__(self, firsts_parts: list[tuple[np.ndarray, np.ndarray, float, int, int]],
                 compiled: bool):
        self.parts, self.compiled = firsts_parts, compiled
        self.batch_id = compiled
        # At most a (score, p0) and a (score, p1) step per distinct score of the key
        # comes back: a pass of many keys runs in waves (run_plans' budget).
        self.driver_bytes = 32 * sum(int(p[4]) for p in firsts_parts)

    @classmethod
    def pack(cls, requests: list[_Steps]) -> _StepsBatch:
        return _StepsBatch(requests)


class _StepsBatch:
    """Many keys' :class:`_Steps`: all their ranges' blocks as flat arrays (what a pass
    ships to every range)."""

    def __init__(self, requests: list[_Steps]):
        parts = [p for r in requests for p in r.parts]
        self.key_entries = np.concatenate(([0], np.cumsum([len(r.parts) for r in requests])))
        self.entry_blocks = np.concatenate(([0], np.cumsum([len(p[0]) for p in parts])))
        self.weight = np.concatenate([p[0] for p in parts])
        self.positives = np.concatenate([p[1] for p in parts])
        self.firsts = np.array([p[2] for p in parts], dtype=np.float64)
        self.compiled = requests[0].compiled
        if not (np.all(np.isfinite(self.weight)) and np.all(np.isfinite(self.positives))):
            raise sums_overflow()

    def run(self, which: np.ndarray, part: KeyedTable) -> KeyResults:
        t, starts = part.table, part.starts
        if not len(t):  # (a range without rows: no steps)
            return KeyResults([t.score] * 4, [np.zeros(len(starts), np.int64)] * 4)
        if not (np.all(np.isfinite(t.weight)) and np.all(np.isfinite(t.positives))):
            raise sums_overflow()
        # Tables a Python loop handles faster than numba's import and compilation (~1 s).
        compiled = _compiled_range_values() if self.compiled or len(t) > COMPILE_ROWS \
            else None
        range_values = _range_values if compiled is None else compiled
        p0, p1 = range_values(self.weight, self.positives,
                              self.entry_blocks, self.key_entries, self.firsts,
                              np.asarray(which, dtype=np.int64), starts.astype(np.int64),
                              np.asarray(t.weight, dtype=np.float64),
                              np.asarray(t.positives, dtype=np.float64), t.score)
        keep0, keep1 = _run_ends(p0, starts, True), _run_ends(p1, starts, False)
        s0, s1 = (np.concatenate(([0], np.cumsum(np.add.reduceat(k, starts[:-1]))))
                  for k in (keep0, keep1))
        return KeyResults([t.score[keep0], p0[keep0], t.score[keep1], p1[keep1]],
                          [s0, s0, s1, s1])


def venn_abers_plan(label_col: str | None = None, fit_rows: int = 0
                    ) -> Generator[Any, list[Any], Steps]:
    """The Venn-Abers steps as a plan (:mod:`distcal.core.plans`): two passes.

    ``label_col`` names the label column in the messages. ``fit_rows``: the
    rows of the whole fit, all keys together; past :data:`COMPILE_ROWS`
    every key runs numba's kernels where numba is importable (10,000
    segments of 200 rows would otherwise run 2e6 rows through the Python
    loops).
    """
    firsts_parts = yield _Blocks()
    bad = [p[3] for p in firsts_parts if p[3]]
    if bad:
        # The pooled table knows which scores hold labels other than 0/1, not
        # which of their rows: the caller counts the rows (LabelsNotBinaryError).
        where = f"column '{label_col}' (label): " if label_col else ""
        known = sum(b for b in bad if b > 0)
        among = f" (among the {known} rows of the scores that hold them)" if known else ""
        needs = ZERO_ONE_LABELS
        raise LabelsNotBinaryError(f"{where}labels other than 0 and 1{among}; {needs}", needs)
    parts = yield _Steps(firsts_parts, fit_rows > COMPILE_ROWS)
    return join_steps([Steps(*p) for p in parts])
