"""Weighted isotonic regression by Pool Adjacent Violators, as mergeable blocks.

Isotonic regression of labels on scores finds the non-decreasing step
function f minimising  sum_i w_i (y_i - f(s_i))^2  (Barlow et al., 1972).
The solution is a partition of the distinct scores into contiguous *blocks*;
each block predicts its weighted label mean  Y_B / W_B. Pool Adjacent
Violators reaches it by pooling neighbouring blocks whose means are out of
order, in any order (Ayer et al., 1955; Best & Chakravarti, 1990), so:

* PAV run on a contiguous score range only pools pairs that are adjacent in
  the global order: its blocks are a valid intermediate state of the global
  PAV, and
* running PAV over the concatenated blocks of neighbouring ranges (value
  Y_B / W_B, weight W_B) finishes the job: :func:`merge_blocks` is exact.

This is the parallel PAV of Spark MLlib's IsotonicRegression, and what
what every engine of distcal is built on (docs/design.md). PAV itself is scipy's
``scipy.optimize.isotonic_regression`` (O(n)); we only keep the block sums.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from ..errors import sums_overflow
from .distinct import DistinctTable
from .threshold import TIE

__all__ = ["Blocks", "pav_blocks", "merge_blocks", "clip_blocks", "tie_runs", "merge_ties",
           "combine_spearman", "isotonic_part", "isotonic_plan"]


@dataclasses.dataclass(frozen=True)
class Blocks:
    """Pooled blocks in ascending score order.

    ``prob`` is ``positives / weight`` unless clipped by y_min / y_max.
    ``score_mean`` (isotonic blocks only) is the weighted mean score of the
    block's rows, the block's point in centered isotonic regression.
    """

    score_min: np.ndarray
    score_max: np.ndarray
    weight: np.ndarray
    positives: np.ndarray
    prob: np.ndarray
    score_mean: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.score_min.shape[0])

    @staticmethod
    def from_table(table: DistinctTable) -> Blocks:
        """Each distinct score as its own block (before any pooling)."""
        with np.errstate(over="ignore", invalid="ignore"):
            return Blocks(table.score, table.score, table.weight, table.positives,
                          table.positives / table.weight, table.score)

    @staticmethod
    def concat(parts: list[Blocks]) -> Blocks:
        parts = [p for p in parts if len(p)]
        if not parts:
            z = np.zeros(0)
            return Blocks(z, z, z, z, z, z)
        smin, smax, weight, positives, prob = (
            np.concatenate([getattr(p, f) for p in parts])
            for f in ("score_min", "score_max", "weight", "positives", "prob"))
        means = [p.score_mean for p in parts]
        mean = None if any(m is None for m in means) else np.concatenate(
            [m for m in means if m is not None])
        return Blocks(smin, smax, weight, positives, prob, mean)


def _pool_runs(blocks: Blocks, starts: np.ndarray, prob: np.ndarray | None = None) -> Blocks:
    """Pool the runs of blocks beginning at ``starts`` into single blocks."""
    ends = np.append(starts[1:], len(blocks)) - 1
    sizes = np.diff(starts, append=len(blocks))
    weight = np.add.reduceat(blocks.weight, starts)
    positives = np.add.reduceat(blocks.positives, starts)
    if prob is None:
        prob = positives / weight
    mean = None
    if blocks.score_mean is not None:
        # Weighted mean of the runs' means, with each run's share of the weight
        # (w / W <= 1, so no product overflows); +inf and -inf in one run give NaN.
        # One buffer of the blocks' length serves every step.
        share = np.repeat(weight, sizes)
        np.divide(blocks.weight, share, out=share)
        with np.errstate(invalid="ignore"):
            mean = np.add.reduceat(np.multiply(share, blocks.score_mean, out=share), starts)
        single = sizes == 1
        mean[single] = blocks.score_mean[starts[single]]  # exact for unpooled blocks
    return Blocks(blocks.score_min[starts], blocks.score_max[ends], weight, positives, prob,
                  mean)


def tie_runs(prob: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """First block of every run of neighbours whose probabilities are equal.

    Equal means equal to within ``TIE`` (2^-36) of the larger magnitude.
    With weights that are not whole numbers a block's sums depend on the
    order they were added in (per range, per engine), so blocks of one rate
    in exact arithmetic differ in their last bits, and an exact comparison
    would let that rounding decide which blocks the model has (the rule of
    ties of :mod:`distcal.core.threshold`). ``starts`` (segment offsets)
    are always run starts: runs never cross segments.

    Every block of a run is tied to the run's first, not only to its
    neighbour: steps each below the tolerance would otherwise chain
    probabilities far apart into one block (20,000 steps of 2e-12 pooled
    0.3 to 0.30000004 into one value). Such a run is split where a block
    stops being tied to the first of its part, so a pooled value stays
    within ``TIE`` of the probabilities it pools.
    """
    n = prob.shape[0]
    first = np.ones(n, dtype=bool)
    if n > 1:
        with np.errstate(invalid="ignore", over="ignore"):
            scale = np.maximum(np.abs(prob[:-1]), np.abs(prob[1:]))
            # NaN (0/0, no weight) and inf compare as not tied: runs of their own.
            np.logical_not(np.abs(prob[1:] - prob[:-1]) <= TIE * scale, out=first[1:])
    if starts is not None:
        first[starts[starts < n]] = True
    run = np.flatnonzero(first)
    if run.shape[0] < n:
        with np.errstate(invalid="ignore", over="ignore"):
            lo, hi = np.minimum.reduceat(prob, run), np.maximum.reduceat(prob, run)
            drifting = hi - lo > TIE * np.maximum(np.abs(lo), np.abs(hi))
        if drifting.any():
            run = _split_drifting(prob, run, drifting)
    return run


def _split_drifting(prob: np.ndarray, run: np.ndarray, drifting: np.ndarray) -> np.ndarray:
    """:func:`tie_runs`' runs, the drifting ones split greedily from their first block.

    A loop in Python over the blocks of those runs only: they need steps
    below 2^-36 one after another, which rounding alone never makes.
    """
    ends = np.append(run[1:], prob.shape[0])
    more = []
    for a, b in zip(run[drifting].tolist(), ends[drifting].tolist()):
        head = abs_head = 0.0
        for i in range(a, b):
            p = float(prob[i])
            if i == a or abs(p - head) > TIE * max(abs(p), abs_head):
                more.append(i)
                head, abs_head = p, abs(p)
    return np.union1d(run, np.asarray(more, dtype=run.dtype))


def merge_ties(blocks: Blocks, starts: np.ndarray | None = None
               ) -> tuple[Blocks, np.ndarray | None]:
    """Pool the runs of :func:`tie_runs` (neighbouring blocks of one probability
    are one block, part of the public contract); returns the blocks and their
    segment offsets (None without ``starts``)."""
    run = tie_runs(blocks.prob, starts)
    if run.shape[0] == len(blocks):
        return blocks, starts
    counted = np.zeros(len(blocks) + 1, dtype=np.intp)
    counted[run + 1] = 1
    with np.errstate(over="ignore", invalid="ignore"):
        return (_pool_runs(blocks, run),
                None if starts is None else np.cumsum(counted)[starts])


def _pav(blocks: Blocks, increasing: bool) -> Blocks:
    if len(blocks) == 0:
        return blocks
    if not np.all(np.isfinite(blocks.weight)):
        raise sums_overflow()
    # Imported here: scipy.optimize takes ~0.5 s to import, which every command-line run
    # and every Spark or Dask worker importing distcal would pay.
    from scipy.optimize import isotonic_regression

    with np.errstate(over="ignore", invalid="ignore"):  # inf sums: refused by the model
        res = isotonic_regression(blocks.prob, weights=blocks.weight, increasing=increasing)
        starts = np.asarray(res.blocks[:-1], dtype=np.intp)
        return merge_ties(_pool_runs(blocks, starts))[0]


def pav_blocks(table: DistinctTable, increasing: bool = True) -> Blocks:
    """Weighted PAV over a distinct-score table; returns the pooled blocks."""
    return _pav(Blocks.from_table(table), increasing)


def merge_blocks(parts: list[Blocks], increasing: bool = True) -> Blocks:
    """Merge the blocks of neighbouring, non-overlapping score ranges.

    ``parts`` must be in ascending score order, each part's range strictly
    below the next (a range partition guarantees it). Concatenating and
    running PAV over the blocks is exact (module docstring).
    """
    blocks = Blocks.concat(parts)
    if len(blocks) > 1 and np.any(blocks.score_min[1:] <= blocks.score_max[:-1]):
        raise ValueError("merge_blocks needs parts in ascending, non-overlapping score order")
    return _pav(blocks, increasing)


def clip_blocks(blocks: Blocks, y_min: float | None, y_max: float | None) -> Blocks:
    """Clip block probabilities to [y_min, y_max] and merge neighbours of one probability.

    Clipping a monotone fit gives the fit of isotonic regression with those
    bounds (the bounded problem's solution is the clipped unbounded one).
    """
    if y_min is None and y_max is None:
        return blocks
    lo = -np.inf if y_min is None else float(y_min)
    hi = np.inf if y_max is None else float(y_max)
    if lo > hi:
        raise ValueError(f"y_min ({lo}) is greater than y_max ({hi})")
    # The pooled runs' probability is positives / weight, clipped again.
    merged = merge_ties(dataclasses.replace(blocks, prob=np.clip(blocks.prob, lo, hi)))[0]
    return dataclasses.replace(merged, prob=np.clip(merged.prob, lo, hi))


def _spearman_partial(table: DistinctTable) -> tuple[int, int, int] | None:
    """(2U inside the range, positives, negatives) of one range; None if labels aren't 0/1."""
    if not table.binary:
        return None
    pos = np.rint(table.label_sum).astype(np.int64)
    neg = table.count - pos
    neg_below = np.cumsum(neg) - neg
    # Every term and the sum are at most n^2 / 2: exact in int64 up to 4e9
    # rows, Python integers beyond.
    dtype = np.int64 if table.n_rows <= 4_000_000_000 else object
    two_u = int(np.sum(pos.astype(dtype) * (2 * neg_below + neg).astype(dtype)))
    return two_u, int(pos.sum()), int(neg.sum())


def combine_spearman(partials: list[tuple[int, int, int] | None]) -> bool | None:
    """Sign of Spearman's rho from the ordered ranges' partials (None: labels not 0/1).

    With average ranks and a 0/1 label, rho has the sign of U - n1 * n0 / 2,
    U being the Mann-Whitney count of (negative, positive) pairs ordered by
    score, ties counting one half (the ranks of a binary variable are affine
    in it). Each positive of a range lies above every negative of the
    ranges below it. Counted in exact integers. A zero correlation means
    increasing, as scikit-learn decides (``rho >= 0``); when rho is
    undefined (constant scores or labels) both directions give the same fit.
    """
    two_u = n1 = n0 = 0
    for part in partials:
        if part is None:
            return None
        u, p, n = part
        two_u += u + 2 * p * n0
        n1 += p
        n0 += n
    return two_u - n1 * n0 >= 0


def isotonic_part(table: DistinctTable, increasing: bool | str = True) -> tuple[Any, ...]:
    """What one range contributes to an isotonic fit (:func:`isotonic_plan`).

    ``(Spearman partial, increasing blocks, decreasing blocks)`` when
    ``increasing`` is "auto", else the range's PAV blocks.
    """
    if increasing == "auto":
        return _spearman_partial(table), pav_blocks(table, True), pav_blocks(table, False)
    return (pav_blocks(table, bool(increasing)),)


def isotonic_plan(increasing: bool | str = True, y_min: float | None = None,
                  y_max: float | None = None, spearman_rows: Callable[[], bool] | None = None
                  ) -> Generator[Any, list[Any], tuple[Blocks, bool]]:
    """Blocks of the isotonic fit over ordered ranges, as a plan (:mod:`distcal.core.plans`).

    One pass: each range runs PAV on its own (both directions when
    ``increasing`` is "auto", with its Spearman partial); the blocks are
    merged in score order (exact, module docstring). With "auto" the
    direction is the sign of Spearman's rho from the partials, or (labels
    not all 0/1) ``spearman_rows()``, which decides it from the rows.
    """
    parts = yield functools.partial(isotonic_part, increasing=increasing)
    if increasing == "auto":
        direction = combine_spearman([p[0] for p in parts])
        if direction is None:
            if spearman_rows is None:
                raise ValueError("increasing='auto' with labels that are not all 0/1 "
                                 "needs the rows")
            direction = spearman_rows()
        blocks = merge_blocks([p[1] if direction else p[2] for p in parts], direction)
    else:
        direction = bool(increasing)
        blocks = merge_blocks([p[0] for p in parts], direction)
    return clip_blocks(blocks, y_min, y_max), direction
