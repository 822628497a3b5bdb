"""Pool Adjacent Violators over many segments at once, exactly as one call per segment.

The blocks of all segments are concatenated, segment after segment, each
in ascending score order (``starts[i]:starts[i + 1]`` is segment i). PAV
pools only adjacent blocks whose probabilities violate the order (equal
neighbours are merged too, :mod:`distcal.core.isotonic`), so a segment
whose blocks are already strictly monotone is its own PAV result. That is
checked for all segments with one vectorised comparison; only the
segments with a violation run :func:`~distcal.core.isotonic.merge_blocks`
(scipy's PAV), one call each. With thousands of small segments most are
already monotone (a segment of one block always is), which replaces
thousands of small PAV calls by a few array operations.
"""

from __future__ import annotations

import numpy as np

from ..errors import sums_overflow
from .isotonic import Blocks, _pav, _pool_runs

__all__ = ["take_blocks", "pav_segments", "segment_of_blocks"]


def take_blocks(b: Blocks, idx: np.ndarray | slice) -> Blocks:
    """The blocks at ``idx`` (an index array or a slice)."""
    return Blocks(b.score_min[idx], b.score_max[idx], b.weight[idx], b.positives[idx],
                  b.prob[idx], None if b.score_mean is None else b.score_mean[idx])


def segment_of_blocks(starts: np.ndarray) -> np.ndarray:
    """The segment index of every block, from the segments' start offsets."""
    return np.repeat(np.arange(starts.shape[0] - 1), np.diff(starts))


def pav_segments(blocks: Blocks, starts: np.ndarray, increasing: bool
                 ) -> tuple[Blocks, np.ndarray]:
    """PAV within each segment; returns the pooled blocks and the new start offsets.

    Within a segment the blocks must be in ascending, non-overlapping
    score order (a range partition guarantees it; checked).
    """
    n = len(blocks)
    if n < 2:
        return blocks, starts
    seg = segment_of_blocks(starts)
    same = seg[1:] == seg[:-1]
    if np.any(same & (blocks.score_min[1:] <= blocks.score_max[:-1])):
        raise ValueError("pav_segments needs each segment's blocks in ascending, "
                         "non-overlapping score order")
    step = np.diff(blocks.prob)
    with np.errstate(invalid="ignore"):
        violates = same & ~((step > 0) if increasing else (step < 0))
    bad = np.unique(seg[1:][violates])
    if bad.shape[0] == 0:
        return blocks, starts
    sizes = np.diff(starts).copy()
    small = bad[sizes[bad] <= _SMALL]
    pooled_small, small_at = _pav_small(blocks, starts, small, increasing)
    parts: list[Blocks] = []
    done = 0
    for i in bad.tolist():
        lo, hi = int(starts[i]), int(starts[i + 1])
        if lo > done:
            parts.append(take_blocks(blocks, slice(done, lo)))
        if i in small_at:
            a, b = small_at[i]
            pooled = take_blocks(pooled_small, slice(a, b))
        else:  # a large segment: scipy's PAV
            pooled = _pav(take_blocks(blocks, slice(lo, hi)), increasing)
        parts.append(pooled)
        sizes[i] = len(pooled)
        done = hi
    if done < n:
        parts.append(take_blocks(blocks, slice(done, n)))
    return Blocks.concat(parts), np.concatenate(([0], np.cumsum(sizes)))


# Segments of at most this many blocks are pooled by the loop below; larger ones by
# scipy, whose per-call cost (~0.2 ms with our wrapping) is then small per block.
_SMALL = 64


def _pav_small(blocks: Blocks, starts: np.ndarray, segs: np.ndarray, increasing: bool
               ) -> tuple[Blocks, dict[int, tuple[int, int]]]:
    """PAV of many small segments: a stack loop finds the runs, one reduceat pools them.

    The loop pools a block into the one below while their means (positives
    / weight, from the running sums) are out of order or equal, so the
    pooled means it returns are strictly monotone within each segment.
    """
    if segs.shape[0] == 0:
        return blocks, {}
    lo, hi = starts[segs], starts[segs + 1]
    idx = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())])
    sub = take_blocks(blocks, idx)
    pos, wt = sub.positives.tolist(), sub.weight.tolist()
    run_starts: list[int] = []
    run_probs: list[float] = []
    where: dict[int, tuple[int, int]] = {}
    offset = 0
    for i, size in zip(segs.tolist(), (hi - lo).tolist()):
        st: list[int] = []
        sp: list[float] = []
        sw: list[float] = []
        for j in range(offset, offset + size):
            p, w, first = pos[j], wt[j], j
            while st and ((sp[-1] / sw[-1] >= p / w) if increasing
                          else (sp[-1] / sw[-1] <= p / w)):
                p += sp.pop()
                w += sw.pop()
                first = st.pop()
            st.append(first)
            sp.append(p)
            sw.append(w)
        where[i] = (len(run_starts), len(run_starts) + len(st))
        run_starts.extend(st)
        run_probs.extend(p / w for p, w in zip(sp, sw))
        offset += size
    with np.errstate(over="ignore", invalid="ignore"):
        pooled = _pool_runs(sub, np.asarray(run_starts, dtype=np.intp),
                            prob=np.asarray(run_probs, dtype=np.float64))
    if not np.all(np.isfinite(pooled.weight)):
        raise sums_overflow()
    return pooled, where
