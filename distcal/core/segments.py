"""Per-segment summaries of one score range: every segment's distinct-score table at once.

A segmented fit (``distcal.fit(..., by=cols)``) fits one map per distinct
key of the ``by`` columns, plus the global map over all rows. Every engine
range-partitions the valid rows on the score alone, exactly as for an
unsegmented fit, so that range i holds a contiguous score interval below
range i + 1. Restricted to the rows of one segment, the ranges are then
*that segment's* ordered score ranges: every argument of docs/design.md
(pooling, PAV per range and merging, one pass per method) holds per
segment, and one shuffle serves the global map and every segment.

Inside a range the rows are pooled twice: by score (the global table, the
same :func:`~distcal.core.distinct.pool_ties` as an unsegmented fit) and by
(segment, score) with one lexicographic sort (:func:`pool_segments`). A
segment is identified by its key tuple, so ranges need no shared code
book: the driver matches keys across ranges.

Null in any ``by`` column: the row forms no segment but counts in the
global table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .distinct import DistinctTable, pool_ties
from .validate import RowChecker

__all__ = ["factorize_keys", "SegmentTables", "pool_segments", "pool_unit_segments",
           "RangeSummary", "summarise_range", "gather_segments", "check_rows", "pool_range",
           "SegmentParts", "value_roles"]


def _python_values(uniques: Any) -> list[Any]:
    """Plain Python scalars (int, float, str, bool, Timestamp) for dictionary keys."""
    values: list[Any] = pd.Index(uniques).tolist()
    return values


def _factorize_column(col: Any) -> tuple[np.ndarray, list[Any]]:
    """Codes (-1: null) and distinct values of one key column (array-like or Arrow)."""
    if hasattr(col, "to_pylist"):  # a pyarrow Array or ChunkedArray
        fast = _arrow_codes(col)
        if fast is not None:
            return fast
        col = col.to_pandas(integer_object_nulls=True, date_as_object=True)
    c, u = pd.factorize(pd.Series(col) if not isinstance(col, pd.Series) else col,
                        use_na_sentinel=True)
    return np.asarray(c, dtype=np.int64), _python_values(u)


def _arrow_codes(col: Any) -> tuple[np.ndarray, list[Any]] | None:
    """Arrow's dictionary encoding of a text, integer or boolean column, else None.

    Several times faster than converting the rows to Python objects for
    pandas. The values are the same Python str, int and bool that the
    pandas route gives; other types (floats, with NaN as null, dates,
    timestamps) take that route.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_integer(t) or pa.types.is_boolean(t)):
        return None
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], t)
    encoded = pc.dictionary_encode(col)
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    return codes.astype(np.int64), encoded.dictionary.to_pylist()


def factorize_keys(columns: Sequence[Any]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Dense codes of the rows' key tuples, and the tuple of each code.

    ``columns`` are equal-length array-likes or pyarrow arrays (one per
    ``by`` column). A row
    with a null (None, NaN, NaT) in any column gets code -1. Codes number
    the distinct tuples from 0 in no particular order.
    """
    n = len(columns[0])
    codes, uniques = [], []
    null = np.zeros(n, dtype=bool)
    for col in columns:
        c, u = _factorize_column(col)
        null |= c < 0
        codes.append(c)
        uniques.append(u)
    if len(columns) == 1:
        return codes[0], [(v,) for v in uniques[0]]
    stacked = np.stack(codes, axis=1)[~null]
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    out = np.full(n, -1, dtype=np.int64)
    out[~null] = inverse.reshape(-1)
    keys = [tuple(uniques[j][uniq[i, j]] for j in range(len(columns)))
            for i in range(uniq.shape[0])]
    return out, keys


@dataclass(frozen=True)
class SegmentTables:
    """Every segment's distinct-score table within one range.

    ``table`` is the concatenation of the segments' tables, ordered by
    segment then score; segment ``i`` (key ``keys[i]``) owns rows
    ``starts[i]:starts[i + 1]`` and is all-0/1 when ``binary[i]``.
    """

    keys: list[tuple[Any, ...]]
    starts: np.ndarray
    table: DistinctTable
    binary: np.ndarray
    # Sum of w * y^2 per row of ``table`` (the Brier score of fractional
    # labels needs it; evaluation only), else None.
    wyy: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def segment(self, i: int) -> DistinctTable:
        """The distinct-score table of segment ``i`` (a view)."""
        a, b = int(self.starts[i]), int(self.starts[i + 1])
        t = self.table
        sl = slice(a, b)
        return DistinctTable(t.score[sl], t.weight[sl], t.positives[sl], t.count[sl],
                             t.label_sum[sl], bool(self.binary[i]))


def pool_segments(codes: np.ndarray, keys: list[tuple[Any, ...]], score: np.ndarray,
                  weight: np.ndarray, positives: np.ndarray, count: np.ndarray,
                  label_sum: np.ndarray, nonbinary: np.ndarray,
                  wyy: np.ndarray | None = None) -> SegmentTables:
    """Pool rows (or already pooled rows) by (segment, score).

    ``codes`` index ``keys`` (-1: no segment, left out). The other arrays
    are sums over the rows of each input item: raw rows have weight w,
    positives w * y, count 1, label_sum y and nonbinary ``y not in {0, 1}``.
    One sort by (segment, score) (:func:`_segment_order`); equal (code,
    score) pairs are summed, so pooling pooled items again is exact (pooling
    commutes, docs/design.md). ``wyy`` (w * y^2 per item), if given, is
    pooled too.
    """
    live = codes >= 0
    if not live.all():
        codes, score, weight, positives, count, label_sum, nonbinary = (
            a[live] for a in (codes, score, weight, positives, count, label_sum, nonbinary))
        wyy = None if wyy is None else wyy[live]
    order = _segment_order(codes, score, len(keys))
    c, s = codes[order], score[order] + 0.0  # -0.0 and 0.0 are one score
    n = c.shape[0]
    new = np.ones(n, dtype=bool)
    if n:
        new[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
    starts = np.flatnonzero(new)

    def pooled(a: np.ndarray) -> np.ndarray:
        if starts.shape[0] == n:
            out: np.ndarray = a[order]
            return out
        with np.errstate(over="ignore", invalid="ignore"):  # inf: refused by the fits
            return np.add.reduceat(a[order], starts) if n else a[:0]

    table = DistinctTable(s[starts], pooled(weight).astype(np.float64),
                          pooled(positives).astype(np.float64),
                          pooled(count).astype(np.int64), pooled(label_sum).astype(np.float64))
    seg_of_row = c[starts]
    present = np.flatnonzero(np.bincount(seg_of_row, minlength=len(keys)))
    first = np.searchsorted(seg_of_row, present)
    seg_starts = np.append(first, seg_of_row.shape[0])
    bad = (np.add.reduceat(pooled(nonbinary.astype(np.int64)), first) if first.shape[0]
           else np.zeros(0, dtype=np.int64))
    return SegmentTables([keys[i] for i in present], seg_starts, table, bad == 0,
                         None if wyy is None else pooled(wyy).astype(np.float64))


def pool_unit_segments(codes: np.ndarray, keys: list[tuple[Any, ...]], score: np.ndarray,
                       label: np.ndarray) -> SegmentTables:
    """:func:`pool_segments` of raw rows with unit weights and 0/1 labels.

    A (segment, score) pair's weight and count are its number of rows and
    its positives and label sum are both its number of positive rows, so
    only scores and labels move. On many rows with numba importable, a
    compiled counting sort by segment (:func:`_scatter_unit_rows`), a sort
    of each segment's scores and one merge walk (:func:`_pool_unit_rows`):
    no argsort and no gather over all rows; else numpy with two gathers
    instead of :func:`pool_segments`' seven. Both give :func:`pool_segments`'
    tables exactly (the sums are counts).
    """
    m = len(keys)
    kernels = _jit_pool_unit_rows() if codes.shape[0] >= _JIT_MIN_ROWS else None
    if kernels is not None:
        scatter, pool = kernels
        buf, off, pos = scatter(np.asarray(codes, dtype=np.int64),
                                np.asarray(score, dtype=np.float64),
                                np.asarray(label, dtype=np.float64), m)
        # Large segments' lists are sorted by numpy (its vectorised sort is a
        # few times faster than a compiled one); the kernel sorts the small ones.
        large = np.flatnonzero(np.diff(off) >= _NUMPY_SORT_ROWS)
        for g in large.tolist():
            lo, mid, hi = int(off[g]), int(off[g] + pos[g]), int(off[g + 1])
            buf[lo:mid].sort()
            buf[mid:hi].sort()
        presorted = np.zeros(m, dtype=np.bool_)
        presorted[large] = True
        s, count, positives, seg_end = pool(buf, off, pos, presorted)
        bounds = np.concatenate(([0], seg_end))
        present = np.flatnonzero(np.diff(bounds))
        seg_starts = np.append(bounds[present], s.shape[0])
    else:
        live = codes >= 0
        if not live.all():
            codes, score, label = codes[live], score[live], label[live]
        order = _segment_order(codes, score, m)
        per_code = np.bincount(codes, minlength=m)
        c = np.repeat(np.arange(m, dtype=np.int64), per_code)  # == codes[order]
        s, y = score[order] + 0.0, label[order]  # -0.0 and 0.0 are one score
        n = c.shape[0]
        new = np.ones(n, dtype=bool)
        if n:
            new[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
        starts = np.flatnonzero(new)
        if starts.shape[0] == n:  # every pair is one row (all-distinct scores)
            count, positives = np.ones(n, dtype=np.int64), y
        else:
            count, positives = np.diff(np.append(starts, n)), np.add.reduceat(y, starts)
            s = s[starts]
        present = np.flatnonzero(per_code)
        seg_starts = np.append(np.searchsorted(c[starts], present), starts.shape[0])
    table = DistinctTable(s, count.astype(np.float64), positives, count, positives.copy())
    return SegmentTables([keys[i] for i in present], seg_starts, table,
                         np.ones(present.shape[0], dtype=bool))


# At least this many rows go to the compiled pooling when numba is importable
# (the executors of a large fit import it anyway, for segment_pav's loop).
_JIT_MIN_ROWS = 100_000
# Segments of at least this many rows are sorted by numpy, the rest in the kernel.
_NUMPY_SORT_ROWS = 64


def _scatter_unit_rows(codes: np.ndarray, score: np.ndarray, label: np.ndarray, m: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A counting sort of the rows by segment code (code -1 left out).

    Segment c owns ``buf[off[c]:off[c + 1]]``: the scores of its positive
    rows (the first ``pos[c]``), then those of its negative rows.
    """
    n = codes.shape[0]
    off = np.zeros(m + 1, dtype=np.int64)
    pos = np.zeros(m, dtype=np.int64)
    for i in range(n):
        c = codes[i]
        if c >= 0:
            off[c + 1] += 1
            if label[i] != 0.0:
                pos[c] += 1
    for c in range(m):
        off[c + 1] += off[c]
    buf = np.empty(off[m], dtype=np.float64)
    head = off[:m].copy()
    tail = off[:m] + pos
    for i in range(n):
        c = codes[i]
        if c >= 0:
            if label[i] != 0.0:
                buf[head[c]] = score[i] + 0.0  # -0.0 and 0.0 are one score
                head[c] += 1
            else:
                buf[tail[c]] = score[i] + 0.0
                tail[c] += 1
    return buf, off, pos


def _pool_unit_rows(buf: np.ndarray, off: np.ndarray, pos: np.ndarray, presorted: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pool each segment's two score lists (:func:`_scatter_unit_rows`) by distinct score.

    The lists of segments not ``presorted`` (small ones) are sorted in place
    by insertion; one merge
    walk over both then pools equal scores. Returns the pooled scores,
    counts and positives, and each segment's end offset in them.
    """
    m = pos.shape[0]
    total = off[m]
    out_s = np.empty(total, dtype=np.float64)
    out_n = np.empty(total, dtype=np.int64)
    out_p = np.empty(total, dtype=np.float64)
    seg_end = np.empty(m, dtype=np.int64)
    k = 0
    for c in range(m):
        a, mid, b = off[c], off[c] + pos[c], off[c + 1]
        if not presorted[c]:  # a small segment: insertion sorts (numba's sort compiles slowly)
            for lo, hi in ((a, mid), (mid, b)):
                for p in range(lo + 1, hi):
                    x = buf[p]
                    q = p - 1
                    while q >= lo and buf[q] > x:
                        buf[q + 1] = buf[q]
                        q -= 1
                    buf[q + 1] = x
        i, j = a, mid
        while i < mid or j < b:
            x = buf[i] if j >= b or (i < mid and buf[i] <= buf[j]) else buf[j]
            n_pos = 0
            while i < mid and buf[i] == x:
                i += 1
                n_pos += 1
            n_all = n_pos
            while j < b and buf[j] == x:
                j += 1
                n_all += 1
            out_s[k] = x
            out_n[k] = n_all
            out_p[k] = n_pos
            k += 1
        seg_end[c] = k
    return out_s[:k], out_n[:k], out_p[:k], seg_end


@functools.cache
def _jit_pool_unit_rows() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """:func:`_scatter_unit_rows` and :func:`_pool_unit_rows` compiled (cached on disk),
    or None without a usable numba."""
    try:
        from numba import njit

        kernels: Any = tuple(njit(cache=True, nogil=True)(f)
                             for f in (_scatter_unit_rows, _pool_unit_rows))
    except (ImportError, RuntimeError):  # RuntimeError: numba found no cache directory
        return None
    return kernels  # type: ignore[no-any-return]


def _segment_order(codes: np.ndarray, score: np.ndarray, n_codes: int) -> np.ndarray:
    """The permutation that sorts the items by (code, score).

    Two passes, least significant first: by score (numpy's introsort; ties
    in any order, since their sums are pooled), then by code with a stable
    sort, which for codes held in 16 bits is numpy's radix sort (a fraction
    of the score sort's time). ``np.lexsort`` gives the same order of
    distinct pairs at a few times the cost.
    """
    by_score = np.argsort(score)
    c = codes[by_score]
    if n_codes <= np.iinfo(np.uint16).max:
        c = c.astype(np.uint16)
    order: np.ndarray = by_score[np.argsort(c, kind="stable")]
    return order


@dataclass(frozen=True)
class RangeSummary:
    """What one range sends to the driver: the global result and one per segment.

    ``n_rows`` and ``weight`` are per segment (in the order of ``keys``),
    as is ``results``.
    """

    global_result: Any
    keys: list[tuple[Any, ...]]
    n_rows: np.ndarray
    weight: np.ndarray
    results: list[Any]


def summarise_range(table: DistinctTable, segments: SegmentTables,
                    global_fn: Callable[[DistinctTable], Any] | None,
                    segment_fn: Callable[[DistinctTable], Any]) -> RangeSummary:
    """Apply ``global_fn`` to the range's table and ``segment_fn`` to each segment's."""
    t = segments.table
    starts = segments.starts
    if len(segments):
        n_rows = np.add.reduceat(t.count, starts[:-1]) if len(t) else np.zeros(0, np.int64)
        weight = np.add.reduceat(t.weight, starts[:-1]) if len(t) else np.zeros(0)
    else:
        n_rows, weight = np.zeros(0, np.int64), np.zeros(0)
    results = [segment_fn(segments.segment(i)) for i in range(len(segments))]
    return RangeSummary(global_fn(table) if global_fn is not None and len(table) else None,
                        segments.keys, n_rows, weight, results)


@dataclass
class SegmentParts:
    """One segment's summaries gathered from the ranges, in ascending score order."""

    key: tuple[Any, ...]
    n_rows: int
    weight: float
    parts: list[Any]


def gather_segments(summaries: list[RangeSummary]) -> tuple[list[Any], list[SegmentParts]]:
    """The global results and every segment's parts, from the ranges in score order.

    A segment's parts are that segment's own ordered ranges (module
    docstring). Segments come sorted by key when the keys are comparable,
    else in order of first appearance.
    """
    by_key: dict[tuple[Any, ...], SegmentParts] = {}
    global_parts = []
    for s in summaries:
        if s.global_result is not None:
            global_parts.append(s.global_result)
        for key, n, w, r in zip(s.keys, s.n_rows.tolist(), s.weight.tolist(), s.results):
            entry = by_key.get(key)
            if entry is None:
                by_key[key] = SegmentParts(key, int(n), float(w), [r])
            else:
                entry.n_rows += int(n)
                entry.weight += float(w)
                entry.parts.append(r)
    segments = list(by_key.values())
    try:
        segments.sort(key=lambda e: e.key)
    except TypeError:  # keys of mixed types: keep the order of first appearance
        pass
    return global_parts, segments


def check_rows(arrays: dict[str, np.ndarray], text: dict[str, np.ndarray],
               columns: dict[str, str], finite_scores: bool = False
               ) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Rows to keep (valid, weight > 0; None: all) and the counts the driver adds up.

    The rules and counts of :func:`distcal.core.partition.pool_valid_rows`;
    the caller filters its key columns with the same mask.
    """
    checker = RowChecker(dict(columns), finite_scores=finite_scores)
    keep = checker.check(arrays, text)
    w = arrays.get("weight")
    if w is not None:
        positive = w > 0
        keep = positive if keep is None else keep & positive
    n = next(iter(arrays.values())).shape[0]
    kept = n if keep is None else int(np.count_nonzero(keep))
    weight_total = float(kept) if w is None else float(w[keep].sum() if keep is not None
                                                       else w.sum())
    sum_wyy = 0.0
    if "prob" in columns:  # the Brier score's label term, as pool_valid_rows gathers it
        y = arrays["label"] if keep is None else arrays["label"][keep]
        wk = None if w is None else (w if keep is None else w[keep])
        sum_wyy = float(np.dot(y * wk, y) if wk is not None else np.dot(y, y))
    stats = {"problems": checker.problems, "rows": checker.rows_seen,
             "invalid": checker.rows_invalid, "n_rows": kept, "weight_total": weight_total,
             "sum_wyy": sum_wyy}
    return keep, stats


def value_roles(columns: dict[str, Any]) -> tuple[str, str]:
    """The roles of the ordered value and of the target: ("score" or "prob", "label" or "loss").

    A fit orders rows by score; an evaluation by probability; a threshold
    with a per-row loss pools the loss in place of the label.
    """
    return ("prob" if "prob" in columns else "score",
            "loss" if "loss" in columns else "label")


def pool_range(score: np.ndarray, label: np.ndarray, weight: np.ndarray | None,
               key_columns: Sequence[Any], segments: bool = True, with_wyy: bool = False
               ) -> tuple[DistinctTable, SegmentTables | None]:
    """The global distinct-score table of a range's valid rows and, if asked, every segment's.

    ``with_wyy``: the segments also pool w * y^2 (evaluation's Brier score).
    """
    table = pool_ties(score, label, weight)
    if not segments:
        return table, None
    codes, keys = factorize_keys(key_columns)
    if weight is None and table.binary and not with_wyy:
        return table, pool_unit_segments(codes, keys, score, label)
    w = np.ones(score.shape[0]) if weight is None else weight
    return table, pool_segments(codes, keys, score, w, w * label,
                                np.ones(score.shape[0], dtype=np.int64), label,
                                (label != 0.0) & (label != 1.0),
                                w * label * label if with_wyy else None)


@dataclass(frozen=True)
class SegmentBlocks:
    """One range's isotonic summary: the global part and every segment's PAV blocks.

    Segment ``i`` (key ``keys[i]``, ``n_rows[i]`` rows of weight
    ``weight[i]``) owns ``blocks`` rows ``starts[i]:starts[i + 1]``.
    """

    global_part: Any
    keys: list[tuple[Any, ...]]
    n_rows: np.ndarray
    weight: np.ndarray
    blocks: Any  # Blocks
    starts: np.ndarray


def isotonic_range(table: DistinctTable, segments: SegmentTables,
                   increasing: bool) -> SegmentBlocks:
    """PAV of the range's global table and, at once, of every segment's table."""
    from .isotonic import Blocks, isotonic_part
    from .segment_pav import pav_segments

    t = segments.table
    first = segments.starts[:-1]
    if len(t):
        n_rows, weight = np.add.reduceat(t.count, first), np.add.reduceat(t.weight, first)
    else:
        n_rows, weight = np.zeros(0, np.int64), np.zeros(0)
    blocks, starts = pav_segments(Blocks.from_table(t), segments.starts, increasing)
    return SegmentBlocks(isotonic_part(table, increasing) if len(table) else None,
                         segments.keys, n_rows, weight, blocks, starts)


def merge_segment_blocks(parts: list[SegmentBlocks], increasing: bool
                         ) -> tuple[list[Any], list[tuple[Any, ...]], np.ndarray, np.ndarray,
                                    Any, np.ndarray]:
    """Every segment's isotonic blocks from the ranges' summaries, in score order.

    Returns the global parts, the keys (sorted when comparable), each
    segment's rows and weight, and the merged blocks with their start
    offsets. A segment's blocks from successive ranges are its own ordered
    ranges; one :func:`~distcal.core.segment_pav.pav_segments` merges all
    segments exactly (the range argument, per segment).
    """
    from .isotonic import Blocks
    from .segment_pav import pav_segments, segment_of_blocks, take_blocks

    ids = {k: i for i, k in enumerate(dict.fromkeys(k for p in parts for k in p.keys))}
    owner, n_parts, w_parts, id_parts, blocks = [], [], [], [], []
    for p in parts:
        local = np.fromiter(map(ids.__getitem__, p.keys), dtype=np.int64, count=len(p.keys))
        owner.append(local[segment_of_blocks(p.starts)])
        id_parts.append(local)
        n_parts.append(p.n_rows)
        w_parts.append(p.weight)
        blocks.append(p.blocks)
    keys = list(ids)
    m = len(keys)
    seg_ids = np.concatenate(id_parts) if id_parts else np.zeros(0, np.int64)
    n_rows = np.bincount(seg_ids, np.concatenate(n_parts) if n_parts else None, minlength=m)
    weight = np.bincount(seg_ids, np.concatenate(w_parts) if w_parts else None, minlength=m)
    try:
        rank = np.argsort(np.array(sorted(range(m), key=lambda i: keys[i])), kind="stable")
    except TypeError:  # keys of mixed types: keep the order of first appearance
        rank = np.arange(m)
    all_blocks = Blocks.concat(blocks)
    block_seg = rank[np.concatenate(owner)] if owner else np.zeros(0, np.int64)
    order = np.argsort(block_seg, kind="stable")  # ranges stay in score order per segment
    starts = np.searchsorted(block_seg[order], np.arange(m + 1))
    merged, starts = pav_segments(take_blocks(all_blocks, order), starts, increasing)
    inverse = np.argsort(rank)
    return ([p.global_part for p in parts if p.global_part is not None],
            [keys[i] for i in inverse], np.rint(n_rows[inverse]).astype(np.int64),
            weight[inverse], merged, starts)
