"""Keyed calibration problems: every variant of a fit is a set of (key, score) tables.

A fit is a set of independent binary calibration problems, one per *key*:

* a binary score: one key, ``(GLOBAL, None)``;
* one-vs-rest over K classes: one key per calibrated class ``(GLOBAL, k)``
  (scored on its own column against ``label == k``; with K = 2 only class 1);
* ``by=`` segments: one key per segment ``(segment, None)`` plus the global key;
* both: ``(segment, k)`` and ``(GLOBAL, k)``.

A row therefore stands for one *keyed row* per key it belongs to:
(key, score of the key's class, 0/1 label of the key's class, weight)
(:func:`explode`). Temperature scaling keeps the rows whole (its loss
couples the classes of a row): its keys are segments only, ``per_class=False``.

Every engine range-partitions the keyed rows on their score, carrying the
key, and pools them by (key, score) within each range (:func:`pool_keyed`).
Restricted to one key, the ranges are *that key's* ordered score ranges, so
every argument that makes a binary fit exact over ranges (docs/design.md)
holds per key, and one shuffle serves every key. A range's pooled rows form
a :class:`KeyedTable`: the keys present in the range, and their
distinct-score tables concatenated key after key.

Keys are tuples of plain Python values, matched across ranges by value, so
no shared code book has to travel between machines.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ..errors import DataError, short_repr
from .distinct import DistinctTable, is_binary, pool_ties

__all__ = ["GLOBAL", "Key", "KeySpec", "KeyedTable", "factorize_keys", "explode", "in_key_order",
           "pool_keyed", "pool_sums", "merge_keyed", "cut_keyed", "key_text", "pool_rows",
           "empty_keyed", "split_global", "global_ww", "sorted_sample", "range_bounds"]

# The segment part of the key of the problems over all rows.
T = TypeVar("T")
GLOBAL = None
# (segment, class): segment a tuple of ``by`` values or GLOBAL; class an
# index or None for a binary score.
Key = tuple[Any, Any]


@dataclass(frozen=True)
class KeySpec:
    """Which keyed problems a fit's rows make (module docstring).

    ``by``: the segment columns (empty: no segments); ``score_cols``: one
    score column per class, or None; ``multiclass``: the scores are K
    per-class values (``score_cols`` or a vector ``score_col``);
    ``per_class``: one key per class (one-vs-rest), else one per segment
    (temperature scaling); ``probabilities``: the scores are predicted
    probabilities to evaluate (each must lie in [0, 1]); ``target``:
    "label" (0/1 labels or rates), or "loss" (``label_col`` holds a per-row
    loss, any finite number: thresholds with a loss column); ``score_index``:
    ``score_col`` holds vectors and this element of each is the binary
    score (their lengths are checked over the whole input); ``check_cols``:
    columns checked as the score is, whose problems make a row invalid
    (several probability columns evaluated over the same rows);
    ``interval_cols``: two columns (p0, p1) checked as probabilities with
    p0 <= p1, whose widths p1 - p0 the row checks sum up (evaluation);
    ``zero_one_labels``: what a method of 0/1 labels needs (Venn-Abers,
    MODL), said of rows whose label is a rate, which are then invalid.
    """

    score_col: str | None = "score"
    label_col: str = "label"
    weight_col: str | None = None
    by: tuple[str, ...] = ()
    score_cols: tuple[str, ...] | None = None
    multiclass: bool = False
    per_class: bool = True
    probabilities: bool = False  # scores are probabilities to evaluate: each in [0, 1]
    # "loss": label_col holds a per-row loss (any finite number); "classes": class labels of
    # any type, each a key of its own (the rows' counts per class: discretize)
    target: str = "label"
    score_index: int | None = None  # a binary score: element of the vectors of score_col
    # other predictions a valid row must pass: columns (multiclass: a vector column, or a
    # tuple of per-class columns)
    check_cols: tuple[str | tuple[str, ...], ...] = ()
    # also pool the sums of w y^2 and w^2 (a summary's table; evaluation always does)
    squares: bool = False
    # an interval's two columns (p0, p1) checked as probabilities with p0 <= p1, whose
    # widths the row checks sum up (distcal.core.interval_widths): evaluation only
    interval_cols: tuple[str, str] | None = None
    # the method takes 0/1 labels only (binary scores), in these words: a rate is then an
    # invalid row (dropped with on_invalid="drop")
    zero_one_labels: str | None = None

    @property
    def pool_squares(self) -> bool:
        """Whether the pooled tables carry the sums of w y^2 and of w^2."""
        return self.probabilities or self.squares

    @property
    def pool_magnitudes(self) -> bool:
        """Whether the pooled label sums are those of |w y| instead of y: a per-row loss
        (target "loss"), whose pooled sum sum w z may cancel to a rounding error, needs
        the sum of its terms' magnitudes as the scale of that rounding (thresholds' tie
        rule, :mod:`distcal.core.threshold`)."""
        return self.target == "loss"

    @property
    def columns(self) -> list[str]:
        """Every input column the rows are read from."""
        cols = list(self.score_cols) if self.score_cols is not None else [str(self.score_col)]
        cols.append(self.label_col)
        if self.weight_col is not None:
            cols.append(self.weight_col)
        checked = [c for e in self.check_cols for c in ((e,) if isinstance(e, str) else e)]
        return list(dict.fromkeys([*cols, *checked, *(self.interval_cols or ()), *self.by]))

    def classes(self, n_classes: int) -> list[int | None]:
        """The class part of the keys for K = ``n_classes`` (0: a binary score)."""
        if not self.multiclass or not self.per_class:
            return [None]
        return [1] if n_classes == 2 else list(range(n_classes))


def key_text(by: Sequence[str], key: Key) -> str:
    """A key as users read it in messages: ``country=fr, class 2``."""
    segment, cls = key
    parts = [] if segment is GLOBAL else [f"{b}={short_repr(v)}" for b, v in zip(by, segment)]
    if cls is not None:
        parts.append(f"class {cls}")
    return ", ".join(parts) or "all rows"


def in_key_order(items: Iterable[T], key: Callable[[T], Any] = lambda item: item) -> list[T]:
    """``items`` sorted (by ``key``), or in their given order when keys of mixed types
    do not compare (``list.sort`` would leave them half sorted)."""
    items = list(items)
    try:
        return sorted(items, key=key)
    except TypeError:
        return items


# -- segment keys ------------------------------------------------------------------

class KeyVectorsError(DataError):
    """``count`` rows of the key column ``column`` hold vectors (lists, arrays): a reader
    of many parts adds up their counts (:func:`distcal.core.rows.add_up_rows`)."""

    def __init__(self, column: str | None, count: int):
        self.column, self.count = column, count
        where = "a segment column" if column is None else f"column '{column}' (segment)"
        super().__init__(f"{where}: {count} row{' holds' if count == 1 else 's hold'} "
                         "vectors (lists or arrays), not segment keys")

    def __reduce__(self) -> tuple[Any, ...]:  # raised in Spark and Dask workers: picklable
        return type(self), (self.column, self.count)


def _factorize_column(col: Any, name: str | None = None) -> tuple[np.ndarray, list[Any]]:
    """Codes (-1: null) and distinct values of one key column (array-like or Arrow);
    vectors (lists, arrays) in it are a :class:`~distcal.DataError` naming ``name``."""
    if hasattr(col, "to_pylist"):  # a pyarrow Array or ChunkedArray
        fast = _arrow_codes(col)
        if fast is not None:
            return fast
        col = col.to_pandas(integer_object_nulls=True, date_as_object=True)
    values = pd.Series(col) if not isinstance(col, pd.Series) else col
    try:
        c, u = pd.factorize(values, use_na_sentinel=True)
    except (TypeError, NotImplementedError):  # unhashable values (Arrow: lists), counted
        # only on this failure path
        k = sum(isinstance(v, (list, np.ndarray, dict, set)) for v in values)
        raise KeyVectorsError(name, k) from None
    # Plain Python scalars (int, float, str, bool, Timestamp) for dictionary keys; -0.0 and
    # 0.0 are one key, named 0.0 whichever the rows show first.
    return np.asarray(c, dtype=np.int64), [v + 0.0 if isinstance(v, float) else v
                                           for v in pd.Index(u).tolist()]


def _arrow_codes(col: Any) -> tuple[np.ndarray, list[Any]] | None:
    """Arrow's dictionary encoding of a text, integer or boolean column, else None.

    Several times faster than converting the rows to Python objects for
    pandas; the values are the same Python str, int and bool that the pandas
    route gives. Other types (floats, with NaN as null, dates) take that route.
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


def factorize_keys(columns: Sequence[Any], names: Sequence[str] | None = None
                   ) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Dense codes of the rows' segment tuples, and the tuple of each code.

    ``columns`` are equal-length array-likes or pyarrow arrays (one per
    ``by`` column, named ``names`` in messages). A row with a null (None,
    NaN, NaT) in any column gets code -1 (it forms no segment). Codes number
    the distinct tuples from 0 in no particular order.
    """
    n = len(columns[0])
    codes, uniques = [], []
    null = np.zeros(n, dtype=bool)
    for j, col in enumerate(columns):
        c, u = _factorize_column(col, None if names is None else names[j])
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


# -- keyed rows ----------------------------------------------------------------

def explode(score: np.ndarray, label: np.ndarray, weight: np.ndarray | None,
            segments: tuple[np.ndarray, list[tuple[Any, ...]]] | None,
            classes: list[int | None]
            ) -> tuple[np.ndarray, list[Key], np.ndarray, np.ndarray, np.ndarray | None]:
    """The keyed rows of valid rows: (codes, keys, score, 0/1 label, weight).

    ``score``: (n,) for a binary score, or (n, K') per-class scores (K' = 1:
    the score of class 1 of a binary problem); ``label``: the label (binary)
    or the class index; ``segments``: the rows' segment codes (-1: none) and
    the segment of each code, or None without ``by``; ``classes``: the class
    part of the keys (:meth:`KeySpec.classes`). Each row yields one keyed
    row per class for its segment (if any) and one for the global key.
    ``codes`` index ``keys``.
    """
    n = label.shape[0]
    seg_codes, seg_keys = segments if segments is not None else (None, [])
    c = len(classes)
    if classes == [None]:
        s = score if score.ndim == 1 else score[:, 0]
        y = label
    else:
        # Class-major: one transposed copy of the needed columns, one comparison.
        cols = np.array([min(int(cls), score.shape[1] - 1) for cls in classes if cls is not None],
                        dtype=np.intp)  # (no class: K = 0, a vector column with no vector)
        s = np.ascontiguousarray(score[:, cols].T).reshape(-1)
        y = (label[None, :] == np.array(classes, dtype=np.float64)[:, None]).reshape(-1) \
            .astype(np.float64)
    w = None if weight is None or c == 1 else np.tile(weight, c)
    keys: list[Key] = [(GLOBAL, cls) for cls in classes]
    codes = np.repeat(np.arange(c, dtype=np.int64), n)
    if seg_codes is None:
        return codes, keys, s, y, weight if c == 1 else w
    # Segment keys after the global ones: (segment j, class i) is c + i * S + j.
    n_seg = len(seg_keys)
    keys += [(seg, cls) for cls in classes for seg in seg_keys]
    seg_all = np.tile(seg_codes, c)
    seg_codes_all = np.where(seg_all >= 0, c + codes * n_seg + seg_all, -1)
    return (np.concatenate([codes, seg_codes_all]), keys, np.concatenate([s, s]),
            np.concatenate([y, y]),
            None if weight is None else np.concatenate([w if c > 1 else weight] * 2))


# -- keyed tables ----------------------------------------------------------------

@dataclass(frozen=True)
class KeyedTable:
    """Every key's distinct-score table within one score range.

    ``table`` concatenates the keys' tables, key after key, each in
    ascending score order; key ``keys[i]`` owns rows
    ``starts[i]:starts[i + 1]`` and its labels are all 0/1 when
    ``binary[i]``. ``wyy`` and ``ww`` (evaluation and summaries only) are the
    sums of w * y^2 and of w^2 per row (the Brier score's label term, the
    variance in Spiegelhalter's test).
    """

    keys: list[Key]
    starts: np.ndarray
    table: DistinctTable
    binary: np.ndarray
    wyy: np.ndarray | None = None
    ww: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def key_table(self, i: int) -> DistinctTable:
        """The distinct-score table of key ``i`` (a view)."""
        return self.table.take(slice(int(self.starts[i]), int(self.starts[i + 1])),
                               bool(self.binary[i]))

    def take(self, keys: Sequence[int] | np.ndarray, rows: np.ndarray | None = None,
             starts: np.ndarray | None = None) -> KeyedTable:
        """The keys ``keys`` (indices of ``self.keys``, in their new order) and their rows.

        By default all their rows; else the table's rows ``rows`` (an index),
        key j's being ``starts[j]:starts[j + 1]`` of them.
        """
        if rows is None or starts is None:
            first = self.starts[keys]
            sizes = self.starts[np.asarray(keys, dtype=np.intp) + 1] - first
            starts = np.concatenate(([0], np.cumsum(sizes)))
            rows = np.repeat(first - starts[:-1], sizes) + np.arange(starts[-1])
        return KeyedTable([self.keys[i] for i in keys], starts,
                          self.table.take(rows), self.binary[keys],
                          None if self.wyy is None else self.wyy[rows],
                          None if self.ww is None else self.ww[rows])

    def only(self, wanted: Container[Key]) -> KeyedTable:
        """The ``wanted`` keys and their rows (what a later pass of a few keys reads)."""
        return self.take([i for i, key in enumerate(self.keys) if key in wanted])

    def global_index(self) -> int | None:
        """The index of the (first) key of all rows, None if it has none."""
        return next((i for i, k in enumerate(self.keys) if k[0] is GLOBAL), None)

    def key_totals(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and weight of each key in this range."""
        t, first = self.table, self.starts[:-1]
        if not len(t):
            return np.zeros(len(self.keys), np.int64), np.zeros(len(self.keys))
        return np.add.reduceat(t.count, first), np.add.reduceat(t.weight, first)

    @staticmethod
    def single(table: DistinctTable, key: Key = (GLOBAL, None)) -> KeyedTable:
        """One key's table as a keyed table."""
        return KeyedTable([key], np.array([0, len(table)]), table, np.array([table.binary]))

    def rows(self) -> tuple[np.ndarray, list[Key], DistinctTable, np.ndarray | None]:
        """(code per row, keys, table, wyy): the pooled rows as keyed rows again."""
        codes = np.repeat(np.arange(len(self.keys)), np.diff(self.starts))
        return codes, self.keys, self.table, self.wyy


def pool_keyed(codes: np.ndarray, keys: list[Key], score: np.ndarray, label: np.ndarray,
               weight: np.ndarray | None, with_wyy: bool = False,
               magnitudes: bool = False) -> KeyedTable:
    """Pool keyed rows by (key, score) into a :class:`KeyedTable` (``with_wyy``: also the
    sums of w y^2 and of w^2; ``magnitudes``: the label sums are those of |w y|, see
    :attr:`KeySpec.pool_magnitudes`).

    ``codes`` index ``keys`` (-1: no key, left out). One key is
    :func:`~distcal.core.distinct.pool_ties` (its fast paths); 0/1 labels
    with unit weights count (:func:`_pool_unit`); anything else sums with
    one sort by (key, score) (:func:`pool_sums`).
    """
    codes, score, label, weight = _with_key(codes, score, label, weight)
    # Per-row losses (magnitudes): |w y| = w |y|, as weights are > 0.
    magnitude = None if not magnitudes else (
        np.abs(label) if weight is None else weight * np.abs(label))
    if len(keys) == 1 and not with_wyy:
        return KeyedTable.single(pool_ties(score, label, weight, label_sums=magnitude), keys[0])
    if weight is None and is_binary(label) and not magnitudes:
        kt = (KeyedTable.single(pool_ties(score, label, None), keys[0]) if len(keys) == 1
              else _pool_unit(codes, keys, score, label))
        if not with_wyy:
            return kt
        # Unit weights and 0/1 labels: w y^2 = w y and w^2 = 1, so both sums are read off
        # the fast paths' table (positives, rows).
        return dataclasses.replace(kt, wyy=kt.table.positives.astype(np.float64),
                                   ww=kt.table.count.astype(np.float64))
    w = np.ones(score.shape[0]) if weight is None else weight
    wy = w * label
    with np.errstate(over="ignore"):  # squares past 1e308 are inf: refused where they are read
        squares = (wy * label, w * w) if with_wyy else (None, None)
    return pool_sums(codes, keys, score, w, wy, np.ones(score.shape[0], dtype=np.int64),
                      label if magnitude is None else magnitude, (label != 0.0) & (label != 1.0),
                      *squares)


def _with_key(codes: np.ndarray, score: np.ndarray, label: np.ndarray,
              weight: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The keyed rows that have a key (code >= 0; all of them: the arrays as they are)."""
    live = codes >= 0
    if live.all():
        return codes, score, label, weight
    return codes[live], score[live], label[live], None if weight is None else weight[live]


def empty_keyed() -> KeyedTable:
    """The keyed table of no rows."""
    return KeyedTable([], np.zeros(1, np.int64), DistinctTable.empty(), np.zeros(0, bool))


def _concat_disjoint(parts: list[KeyedTable]) -> KeyedTable:
    """Keyed tables of disjoint key sets side by side (no pooling needed)."""
    parts = [p for p in parts if len(p.table)]
    if not parts:
        return empty_keyed()
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [len(p.table) for p in parts])
    starts = np.concatenate([p.starts[:-1] + o for p, o in zip(parts, offsets[:-1])]
                            + [offsets[-1:]])
    t = [p.table for p in parts]
    positives = np.concatenate([x.positives for x in t])
    # Unit weights: the positives are the label sums (one array), so copied once.
    same = all(x.label_sum is x.positives for x in t)
    table = DistinctTable(np.concatenate([x.score for x in t]),
                          np.concatenate([x.weight for x in t]), positives,
                          np.concatenate([x.count for x in t]),
                          positives if same else np.concatenate([x.label_sum for x in t]),
                          all(x.binary for x in t))
    wyy, ww = _squares(parts)
    return KeyedTable([k for p in parts for k in p.keys], starts, table,
                      np.concatenate([p.binary for p in parts]), wyy, ww)


def _squares(parts: list[KeyedTable]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The parts' sums of w y^2 and of w^2, one part after the other (None: not pooled by
    every part)."""
    wyy = None if any(p.wyy is None for p in parts) else np.concatenate([p.wyy for p in parts])
    ww = None if any(p.ww is None for p in parts) else np.concatenate([p.ww for p in parts])
    return wyy, ww


def pool_rows(rows: Any, classes: list[int | None], with_wyy: bool = False,
              magnitudes: bool = False) -> KeyedTable:
    """The keyed table of one part's valid rows (a :class:`~distcal.core.rows.RowPart`).

    What every engine does with a batch of valid rows. One class at a time,
    and within a class the global key, then the segment keys: their keys
    are disjoint, so their tables are only put side by side (in the order
    of :func:`explode`'s codes), and the rows are never copied once per key
    (the global key alone takes :func:`pool_keyed`'s one-key fast paths).
    ``with_wyy``: also pool w * y^2 (evaluation's Brier score); ``magnitudes``:
    the label sums are those of |w y| (:attr:`KeySpec.pool_magnitudes`).
    """
    if rows.n_rows == 0:
        return empty_keyed()
    parts = []
    for cls in classes:
        codes, keys, s, y, w = explode(rows.score, rows.label, rows.weight, None, [cls])
        parts.append(pool_keyed(codes, keys, s, y, w, with_wyy, magnitudes))
        if rows.segments is not None:
            seg_codes, seg_keys = rows.segments
            parts.append(pool_keyed(seg_codes, [(seg, cls) for seg in seg_keys], s, y, w,
                                    with_wyy, magnitudes))
    return _concat_disjoint(parts)


def merge_keyed(parts: list[KeyedTable]) -> KeyedTable:
    """The keyed table of the union of disjoint row sets' tables (pooling again is exact)."""
    parts = [p for p in parts if len(p.table)]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return empty_keyed()
    ids: dict[Key, int] = {}
    codes, nonbinary = [], []
    for p in parts:
        local = np.fromiter((ids.setdefault(k, len(ids)) for k in p.keys), dtype=np.int64,
                            count=len(p.keys))
        per_row = np.diff(p.starts)
        codes.append(np.repeat(local, per_row))
        nonbinary.append(np.repeat(~p.binary, per_row))
    t = [p.table for p in parts]
    wyy, ww = _squares(parts)
    return pool_sums(np.concatenate(codes), list(ids),
                      np.concatenate([x.score for x in t]), np.concatenate([x.weight for x in t]),
                      np.concatenate([x.positives for x in t]),
                      np.concatenate([x.count for x in t]),
                      np.concatenate([x.label_sum for x in t]), np.concatenate(nonbinary), wyy,
                      ww, runs=True)


def cut_keyed(part: KeyedTable, bounds: np.ndarray) -> list[KeyedTable]:
    """Split a keyed table into ``len(bounds) + 1`` score ranges (range i: scores below
    ``bounds[i]``, at or above ``bounds[i - 1]``), each key's rows cut at the same bounds."""
    rng = np.searchsorted(bounds, part.table.score, side="right")
    codes = part.rows()[0]
    out = []
    for r in range(bounds.shape[0] + 1):
        sel = np.flatnonzero(rng == r)
        c = codes[sel]
        present = np.flatnonzero(np.bincount(c, minlength=len(part.keys)))
        out.append(part.take(present, sel, np.append(np.searchsorted(c, present), c.shape[0])))
    return out


def sorted_sample(sorted_scores: np.ndarray, size: int, offset: float = 0.5) -> np.ndarray:
    """``size`` evenly spaced values of ``sorted_scores`` (all of them if fewer).

    Value i is at position ``(i + offset) * m / size`` of the m scores, so
    each stands for m / size of them (:func:`range_bounds`); ``offset`` in
    [0, 1) shifts the positions by a fraction of their spacing.
    """
    m = sorted_scores.shape[0]
    size = min(size, m)
    if not size:
        return np.zeros(0)
    at = ((np.arange(size) + offset) * (m / size)).astype(np.intp)
    out: np.ndarray = sorted_scores[at]
    return out


def range_bounds(samples: list[tuple[np.ndarray, int]], k: int) -> np.ndarray:
    """Upper bounds of ``k`` ranges of about equal row counts, from per-part samples.

    Each ``(sample, n)`` is an evenly spaced sample (:func:`sorted_sample`)
    of the sorted scores of a part of ``n`` rows; each sampled value stands
    for ``n / len(sample)`` rows. The bounds are the sampled values at the
    weighted quantiles i/k (i = 1..k-1), without repeats (equal scores must
    fall in one range). Bounds only balance the ranges: any bounds give the
    same pooled tables.
    """
    samples = [(smp, n) for smp, n in samples if smp.shape[0]]
    if k < 2 or not samples:
        return np.zeros(0)
    values = np.concatenate([smp for smp, _ in samples])
    weights = np.concatenate([np.full(smp.shape[0], n / smp.shape[0]) for smp, n in samples])
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    marks = np.searchsorted(cum, cum[-1] * np.arange(1, k) / k)
    return np.unique(values[order][np.minimum(marks, len(order) - 1)])


def split_global(part: KeyedTable) -> tuple[DistinctTable, float, KeyedTable]:
    """A range of a binary score's keys as (global table, its sum of w y^2, segments).

    The segments' keyed table is keyed by the segment tuples alone (the
    class part of every key is None). The sum of w y^2 is NaN when the
    range did not pool it (``with_wyy``).
    """
    g = part.global_index()
    if g is None:
        return DistinctTable.empty(), 0.0, dataclasses.replace(
            part, keys=[k[0] for k in part.keys])
    a, b = int(part.starts[g]), int(part.starts[g + 1])
    wyy = float(part.wyy[a:b].sum()) if part.wyy is not None else float("nan")
    segs = part.take(np.delete(np.arange(len(part.keys)), g))
    return part.key_table(g), wyy, dataclasses.replace(segs, keys=[k[0] for k in segs.keys])


def global_ww(part: KeyedTable) -> np.ndarray | None:
    """The sums of w^2 of the global key's rows of a range (None: not pooled or no such key)."""
    g = part.global_index()
    if g is None or part.ww is None:
        return None
    return part.ww[int(part.starts[g]):int(part.starts[g + 1])]


def pool_sums(codes: np.ndarray, keys: list[Key], score: np.ndarray, weight: np.ndarray,
               positives: np.ndarray, count: np.ndarray, label_sum: np.ndarray,
               nonbinary: np.ndarray, wyy: np.ndarray | None = None,
               ww: np.ndarray | None = None, runs: bool = False) -> KeyedTable:
    """Pool items (raw or already pooled rows) by (key, score): one sort, then sums.

    ``codes`` index ``keys``; the other arrays are sums over each item (a raw
    row has weight w, positives w * y, count 1, label_sum y, nonbinary
    ``y not in {0, 1}``; ``wyy`` w * y^2 and ``ww`` w^2, when pooled).
    ``runs``: the items are pooled tables one after the other, each sorted
    by score within a key (merging): sorted with a stable sort, which merges
    such runs instead of sorting from scratch (about 2.5 times faster).

    Equal (code, score) pairs are summed, so pooling pooled items again is
    exact (pooling commutes, docs/design.md).
    """
    order = _key_order(codes, score, len(keys), runs)
    c, s = codes[order], score[order].astype(np.float64, copy=False)
    s += 0.0  # -0.0 and 0.0 are one score
    n = c.shape[0]
    new = np.ones(n, dtype=bool)
    if n:
        np.not_equal(s[1:], s[:-1], out=new[1:])
        if len(keys) > 1:
            new[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(new)
    pooling = starts.shape[0] < n  # else every item is a (key, score) pair of its own

    def pooled(a: np.ndarray, dtype: Any) -> np.ndarray:
        sums: np.ndarray = a[order]
        if pooling:
            with np.errstate(over="ignore", invalid="ignore"):  # inf: refused by the fits
                sums = np.add.reduceat(sums, starts)
        return sums.astype(dtype, copy=False)

    key_of_row = c[starts] if pooling else c
    present = np.flatnonzero(np.bincount(key_of_row, minlength=len(keys)))
    first = np.searchsorted(key_of_row, present)
    # A key is binary iff none of its items is nonbinary: counted per code, no gather.
    bad = np.bincount(codes[np.asarray(nonbinary, dtype=bool)], minlength=len(keys))[present]
    binary = bad == 0
    return KeyedTable([keys[i] for i in present], np.append(first, key_of_row.shape[0]),
                      DistinctTable(s[starts] if pooling else s, pooled(weight, np.float64),
                                    pooled(positives, np.float64), pooled(count, np.int64),
                                    pooled(label_sum, np.float64), bool(binary.all())),
                      binary, None if wyy is None else pooled(wyy, np.float64),
                      None if ww is None else pooled(ww, np.float64))


def _pool_unit(codes: np.ndarray, keys: list[Key], score: np.ndarray,
               label: np.ndarray) -> KeyedTable:
    """:func:`pool_sums` of rows with unit weights and 0/1 labels.

    A (key, score) pair's weight and count are its number of rows, its
    positives and label sum its number of positive rows, so only scores and
    labels move. On many rows with numba importable: a compiled counting
    sort by key (:func:`_scatter_unit_rows`), a sort of each key's scores
    and one merge walk (:func:`_pool_unit_rows`), no argsort over all rows,
    giving :func:`pool_sums`' table exactly (the sums are counts); else
    :func:`pool_sums` itself.
    """
    m = len(keys)
    kernels = _jit_pool_unit_rows() if codes.shape[0] >= _JIT_MIN_ROWS else None
    if kernels is None:
        codes, score, label, _ = _with_key(codes, score, label)
        n = codes.shape[0]
        return pool_sums(codes, keys, score, np.ones(n), label, np.ones(n, dtype=np.int64),
                         label, np.zeros(n, dtype=bool))
    scatter, pool = kernels
    buf, off, pos = scatter(np.asarray(codes, dtype=np.int64),
                            np.asarray(score, dtype=np.float64),
                            np.asarray(label, dtype=np.float64), m)
    # Large keys' lists are sorted by numpy (its vectorised sort is a few
    # times faster than a compiled one); the kernel sorts the small ones.
    large = np.flatnonzero(np.diff(off) >= _NUMPY_SORT_ROWS)
    for g in large.tolist():
        lo, mid, hi = int(off[g]), int(off[g] + pos[g]), int(off[g + 1])
        buf[lo:mid].sort()
        buf[mid:hi].sort()
    presorted = np.zeros(m, dtype=np.bool_)
    presorted[large] = True
    s, count, positives, key_end = pool(buf, off, pos, presorted)
    bounds = np.concatenate(([0], key_end))
    present = np.flatnonzero(np.diff(bounds))
    table = DistinctTable(s, count.astype(np.float64), positives, count, positives.copy())
    return KeyedTable([keys[i] for i in present], np.append(bounds[present], s.shape[0]),
                      table, np.ones(present.shape[0], dtype=bool))


# At least this many rows go to the compiled pooling when numba is importable.
_JIT_MIN_ROWS = 100_000
# Keys of at least this many rows are sorted by numpy, the rest in the kernel.
_NUMPY_SORT_ROWS = 64


def _scatter_unit_rows(codes: np.ndarray, score: np.ndarray, label: np.ndarray, m: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A counting sort of the rows by key code (code -1 left out).

    Key c owns ``buf[off[c]:off[c + 1]]``: the scores of its positive rows
    (the first ``pos[c]``), then those of its negative rows.
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
    """Pool each key's two score lists (:func:`_scatter_unit_rows`) by distinct score.

    The lists of keys not ``presorted`` (small ones) are sorted in place by
    insertion; one merge walk over both then pools equal scores. Returns the
    pooled scores, counts and positives, and each key's end offset in them.
    """
    m = pos.shape[0]
    total = off[m]
    out_s = np.empty(total, dtype=np.float64)
    out_n = np.empty(total, dtype=np.int64)
    out_p = np.empty(total, dtype=np.float64)
    key_end = np.empty(m, dtype=np.int64)
    k = 0
    for c in range(m):
        a, mid, b = off[c], off[c] + pos[c], off[c + 1]
        if not presorted[c]:  # a small key: insertion sorts (numba's sort compiles slowly)
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
        key_end[c] = k
    return out_s[:k], out_n[:k], out_p[:k], key_end


@functools.cache
def _jit_pool_unit_rows() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """:func:`_scatter_unit_rows` and :func:`_pool_unit_rows` compiled, or None without numba.

    Compiled once per process and not cached on disk (a cache would be
    written next to the installed package).
    """
    try:
        from numba import njit

        kernels: Any = tuple(njit(cache=False, nogil=True)(f)
                             for f in (_scatter_unit_rows, _pool_unit_rows))
    except ImportError:
        return None
    return kernels  # type: ignore[no-any-return]


def _key_order(codes: np.ndarray, score: np.ndarray, n_codes: int,
               runs: bool = False) -> np.ndarray:
    """The permutation that sorts the items by (code, score).

    Two passes, least significant first: by score (numpy's introsort; ties
    in any order, since their sums are pooled), then by code with a stable
    sort, which for codes held in 16 bits is numpy's radix sort (a fraction
    of the score sort's time). ``np.lexsort`` gives the same order of
    distinct pairs at a few times the cost.
    """
    by_score = np.argsort(score, kind="stable" if runs else None)  # stable: merges runs
    if n_codes <= 1:
        return by_score
    c = codes[by_score]
    if n_codes <= np.iinfo(np.uint16).max:
        c = c.astype(np.uint16)
    order: np.ndarray = by_score[np.argsort(c, kind="stable")]
    return order
