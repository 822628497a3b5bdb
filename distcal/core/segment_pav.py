"""Pool Adjacent Violators over many segments at once, exactly as one call per segment.

The blocks of all segments are concatenated, segment after segment, each
in ascending score order (``starts[i]:starts[i + 1]`` is segment i). PAV
pools only adjacent blocks whose probabilities violate the order (equal
neighbours are merged too, :mod:`distcal.core.isotonic`), so a segment
whose blocks are already strictly monotone is its own PAV result. That is
checked for all segments with one vectorised comparison; only the
segments with a violation are pooled. With thousands of small segments most
are already monotone (a segment of one block always is).

The segments with a violation are pooled by one stack loop over all their
blocks (PAV in one left-to-right pass: a block is pooled into the run below
while the run's mean is out of order or equal). On many blocks the loop is
compiled with numba (:func:`_pav_runs`, one call for every segment) when
numba is importable; on few (where numba's import would cost more than it
saves), or without numba, it runs in Python for small segments and as
scipy's PAV (one call each) for large ones.
Both give the unique isotonic solution, with strictly monotone pooled
means. Last, neighbours whose means are equal to within rounding are
pooled, in every segment (:func:`~distcal.core.isotonic.tie_runs`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import sums_overflow
from .isotonic import Blocks, _pav, _pool_runs, merge_ties

__all__ = ["take_blocks", "pav_segments", "KeyedBlocks", "KeyedPav", "merge_keyed_pav"]


def take_blocks(b: Blocks, idx: np.ndarray | slice) -> Blocks:
    """The blocks at ``idx`` (an index array or a slice)."""
    return Blocks(b.score_min[idx], b.score_max[idx], b.weight[idx], b.positives[idx],
                  b.prob[idx], None if b.score_mean is None else b.score_mean[idx])


def pav_segments(blocks: Blocks, starts: np.ndarray, increasing: bool
                 ) -> tuple[Blocks, np.ndarray]:
    """PAV within each segment; returns the pooled blocks and the new start offsets.

    Within a segment the blocks must be in ascending, non-overlapping
    score order (a range partition guarantees it; checked). Neighbours of
    one probability within a segment are one block (to within
    :func:`~distcal.core.isotonic.tie_runs`' rounding), as in one call per
    segment.
    """
    pooled, pooled_starts = _pav_violations(blocks, starts, increasing)
    merged, merged_starts = merge_ties(pooled, pooled_starts)
    assert merged_starts is not None
    return merged, merged_starts


def _pav_violations(blocks: Blocks, starts: np.ndarray, increasing: bool
                    ) -> tuple[Blocks, np.ndarray]:
    """:func:`pav_segments` before the ties: pools the segments with a violation."""
    n = len(blocks)
    if n < 2:
        return blocks, starts
    # Pair j is blocks (j, j + 1); the order check skips the pairs that straddle two
    # segments (a mask, instead of a segment index per block).
    inner = np.ones(n - 1, dtype=bool)
    cross = starts[(starts > 0) & (starts < n)]
    inner[cross - 1] = False
    overlap = blocks.score_min[1:] <= blocks.score_max[:-1]
    if np.any(overlap & inner):
        raise ValueError("pav_segments needs each segment's blocks in ascending, "
                         "non-overlapping score order")
    step = np.diff(blocks.prob)
    with np.errstate(invalid="ignore"):
        violates = np.greater(step, 0, out=overlap) if increasing \
            else np.less(step, 0, out=overlap)
    np.logical_not(violates, out=violates)
    # Violations per segment from their running count (segment i's pairs are
    # starts[i] .. starts[i + 1] - 2, so the straddling pairs are never counted).
    seen = np.concatenate(([0], np.cumsum(violates)))
    head = starts[:-1]
    has_bad = seen[np.maximum(starts[1:] - 1, head)] > seen[head]
    bad = np.flatnonzero(has_bad)
    if bad.shape[0] == 0:
        return blocks, starts
    sizes = np.diff(starts).copy()
    if n >= _JIT_MIN_BLOCKS and _jit_pav_runs() is not None:
        return _pav_compiled(blocks, starts, has_bad, sizes, increasing)
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


# At least this many blocks go to the compiled loop: below, importing numba and
# loading the compiled code (~0.6 s once per process) costs more than the Python
# loop and scipy calls it replaces.
_JIT_MIN_BLOCKS = 100_000


def _pav_runs(positives: np.ndarray, weight: np.ndarray, starts: np.ndarray,
              segs: np.ndarray, increasing: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PAV of the segments ``segs`` (ascending) by one stack loop over their blocks.

    Within each segment, block j is pooled into the run below while that
    run's mean (sum of positives / sum of weight) is >= the block's (<= when
    decreasing): the same comparisons, in the same order, as
    :func:`_pav_small`. Returns the first block of every run, the runs'
    sums of positives and weight, and each segment's first run (plus the
    end), all in the order of ``segs``. The runs live on the output arrays
    as a stack: a segment only pools its own runs.
    """
    total = 0
    for i in range(segs.shape[0]):
        total += starts[segs[i] + 1] - starts[segs[i]]
    first = np.empty(total, dtype=np.int64)
    run_p = np.empty(total, dtype=np.float64)
    run_w = np.empty(total, dtype=np.float64)
    seg_first = np.empty(segs.shape[0] + 1, dtype=np.int64)
    top = 0
    for i in range(segs.shape[0]):
        base = top
        seg_first[i] = base
        for j in range(starts[segs[i]], starts[segs[i] + 1]):
            p = positives[j]
            w = weight[j]
            f = j
            while top > base:
                m = run_p[top - 1] / run_w[top - 1]
                if (m >= p / w) if increasing else (m <= p / w):
                    top -= 1
                    p += run_p[top]
                    w += run_w[top]
                    f = first[top]
                else:
                    break
            first[top] = f
            run_p[top] = p
            run_w[top] = w
            top += 1
    seg_first[segs.shape[0]] = top
    return first[:top], run_p[:top] / run_w[:top], seg_first


@functools.cache
def _jit_pav_runs() -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """:func:`_pav_runs` compiled once per process, or None without numba (Spark
    executors may have only numpy, pandas, pyarrow and scipy: the Python path then runs).

    Not cached on disk: numba's cache would be written next to the installed
    package, whatever ``PYTHONDONTWRITEBYTECODE`` says.
    """
    try:
        from numba import njit
    except ImportError:
        return None
    kernel: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]] = njit(
        cache=False, nogil=True)(_pav_runs)
    return kernel


def _pav_compiled(blocks: Blocks, starts: np.ndarray, has_bad: np.ndarray, sizes: np.ndarray,
                  increasing: bool) -> tuple[Blocks, np.ndarray]:
    """:func:`pav_segments` for the segments with a violation (``has_bad``), compiled.

    The kernel gives the runs' first blocks; every block of a monotone
    segment is a run of its own, so one reduceat over all blocks pools
    every segment at once.
    """
    bad = np.flatnonzero(has_bad)
    kernel = _jit_pav_runs()
    assert kernel is not None  # (pav_segments asked)
    first, prob, seg_first = kernel(blocks.positives, blocks.weight,
                                             np.asarray(starts, dtype=np.int64),
                                             np.asarray(bad, dtype=np.int64), bool(increasing))
    # Blocks of the segments without a violation are runs of their own.
    is_start = np.repeat(~has_bad, sizes)
    is_start[first] = True
    run_starts = np.flatnonzero(is_start)
    run_prob = blocks.prob[run_starts]
    run_prob[np.searchsorted(run_starts, first)] = prob  # first: ascending, among run_starts
    sizes[bad] = np.diff(seg_first)
    with np.errstate(over="ignore", invalid="ignore"):
        pooled = _pool_runs(blocks, run_starts, prob=run_prob)
    if not np.all(np.isfinite(pooled.weight)):
        raise sums_overflow()
    return pooled, np.concatenate(([0], np.cumsum(sizes)))


@dataclass(frozen=True)
class KeyedBlocks:
    """One range's isotonic summary: every key's PAV blocks of that range.

    Key ``keys[i]`` (``n_rows[i]`` rows of weight ``weight[i]``, labels all
    0/1 when ``binary[i]``) owns ``blocks`` rows ``starts[i]:starts[i + 1]``.
    """

    keys: list[Any]
    n_rows: np.ndarray
    weight: np.ndarray
    binary: np.ndarray
    blocks: Blocks
    starts: np.ndarray


class KeyedPav:
    """PAV of every key's table of one range at once (a picklable function of the range)."""

    def __init__(self, increasing: bool):
        self.increasing = increasing

    def __call__(self, part: Any) -> KeyedBlocks:
        n_rows, weight = part.key_totals()
        blocks, starts = pav_segments(Blocks.from_table(part.table), part.starts,
                                      self.increasing)
        return KeyedBlocks(part.keys, n_rows, weight, part.binary, blocks, starts)


def merge_keyed_pav(parts: list[KeyedBlocks], increasing: bool
                    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, Blocks, np.ndarray]:
    """Every key's isotonic blocks from the ranges' :class:`KeyedBlocks`, in score order.

    Returns the keys (in order of first appearance), each key's rows,
    weight and binary flag, and the merged blocks with their start offsets.
    A key's blocks from successive ranges are its own ordered ranges, so
    one :func:`pav_segments` merges all keys exactly (the range argument,
    per key).
    """
    ids: dict[Any, int] = {}
    owner, id_parts, n_parts, w_parts, b_parts, blocks = [], [], [], [], [], []
    for p in parts:
        local = np.fromiter((ids.setdefault(k, len(ids)) for k in p.keys), dtype=np.int64,
                            count=len(p.keys))
        owner.append(np.repeat(local, np.diff(p.starts)))  # the key of every block
        id_parts.append(local)
        n_parts.append(p.n_rows)
        w_parts.append(p.weight)
        b_parts.append(~p.binary)
        blocks.append(p.blocks)
    keys = list(ids)
    m = len(keys)
    key_ids = np.concatenate(id_parts) if id_parts else np.zeros(0, np.int64)

    def per_key(values: list[np.ndarray]) -> np.ndarray:
        return np.bincount(key_ids, np.concatenate(values).astype(np.float64)
                           if values else None, minlength=m)

    n_rows = np.rint(per_key(n_parts)).astype(np.int64)
    weight, binary = per_key(w_parts), per_key(b_parts) == 0
    all_blocks = Blocks.concat(blocks)
    block_key = np.concatenate(owner) if owner else np.zeros(0, np.int64)
    order = np.argsort(block_key, kind="stable")  # ranges stay in score order per key
    starts = np.searchsorted(block_key[order], np.arange(m + 1))
    merged, starts = pav_segments(take_blocks(all_blocks, order), starts, increasing)
    return keys, n_rows, weight, binary, merged, starts
