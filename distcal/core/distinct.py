"""Distinct-score tables: the map-side summary every method starts from.

A *distinct-score table* holds, for each distinct score ``s`` in ascending
order,

    weight    W(s) = sum of w_i over rows with score s
    positives Y(s) = sum of w_i * y_i over those rows
    count     n(s) = number of rows (unweighted; Spearman's sign needs it)
    label_sum P(s) = sum of y_i (unweighted)

Pooling equal scores is the first step of isotonic regression (equal scores
must get one probability) and is safe in any order, so tables of disjoint
row sets merge exactly by concatenating and pooling again
(:func:`merge_tables`). Platt scaling, histogram binning, thresholds and
Spearman's sign are all functions of this table, which is what lets every
engine compute them from per-partition summaries.

Four ways to build it, chosen by :func:`pool_ties` from cheap facts about
the input (measured in bench/local_isotonic.py, see bench/RESULTS.md):

* ``key``: 0/1 labels, unit weights, scores >= 0. For non-negative float64
  the IEEE bit pattern orders like the value, so ``bits << 1 | label`` is a
  uint64 whose single sort orders by score and carries the label; counts
  per distinct score are read off the sorted keys. One sort, no gathers.
* ``hash``: many ties. Group equal scores by hashing (``pandas.factorize``),
  sum with ``np.bincount``, then sort only the distinct values.
* ``split``: 0/1 labels, unit weights, scores of any sign, few ties. The
  positive and the negative rows' scores are sorted apart (value sorts and
  no gathers: on 1e6 normal scores, 10% positive, 0.5-0.9x the time of
  the argsort path on a loaded machine), then merged by binary search:
  each positive's place is the number of negatives below it plus the
  positives before it. Counts per distinct score are read off the merge.
* ``argsort``: the general case: argsort the scores, gather, ``reduceat``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

__all__ = ["DistinctTable", "pool_ties", "merge_tables", "choose_pool_path", "estimate_distinct",
           "is_binary", "starts_of_runs"]


@dataclass(frozen=True)
class DistinctTable:
    """Rows pooled by distinct score, ascending (see the module docstring)."""

    score: np.ndarray  # float64, strictly increasing
    weight: np.ndarray  # float64, > 0
    positives: np.ndarray  # float64
    count: np.ndarray  # int64
    label_sum: np.ndarray  # float64, unweighted sum of labels
    binary: bool = True  # every label was 0 or 1

    def __len__(self) -> int:
        return int(self.score.shape[0])

    @property
    def n_rows(self) -> int:
        return int(self.count.sum())

    @property
    def weight_total(self) -> float:
        return float(self.weight.sum())

    @staticmethod
    def empty() -> DistinctTable:
        z = np.zeros(0)
        return DistinctTable(z, z, z, np.zeros(0, dtype=np.int64), z, True)

    def take(self, rows: np.ndarray | slice, binary: bool | None = None) -> DistinctTable:
        """Some rows: ``rows`` an index (copies) or a slice (views); ``binary`` their flag
        (default: this table's)."""
        return DistinctTable(self.score[rows], self.weight[rows], self.positives[rows],
                             self.count[rows], self.label_sum[rows],
                             self.binary if binary is None else binary)

    def slice(self, start: int, stop: int) -> DistinctTable:
        return self.take(slice(start, stop))


def is_binary(labels: np.ndarray) -> bool:
    """Whether every label is 0 or 1."""
    return bool(np.all((labels == 0.0) | (labels == 1.0)))


def choose_pool_path(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                     binary: bool) -> str:
    """Pick ``"key"``, ``"hash"``, ``"split"`` or ``"argsort"`` from cheap checks.

    Ties are estimated by hashing a strided sample of m = n/16 scores: if
    the sample has d distinct values, the population has about D distinct
    values where d = D (1 - exp(-m / D)); hashing pays when rows per
    distinct value n / D is at least about 3 (measured in bench/).
    """
    n = scores.shape[0]
    counted = binary and weights is None  # the sums are counts of rows
    if counted and (n == 0 or scores.min() >= 0.0):
        return "key"
    sort = "split" if counted else "argsort"
    if n < 4096:
        return sort
    import pandas as pd

    step = 16
    sample = scores[::step]
    m = sample.shape[0]
    d = len(pd.unique(sample))
    if d >= m:  # no collisions at all: (nearly) distinct scores
        return sort
    return "hash" if n / estimate_distinct(n, m, d) >= 3.0 else sort


def estimate_distinct(n: int, m: int, d: int) -> float:
    """Distinct values among n rows, from d distinct values in a sample of m rows.

    Solves d = D (1 - exp(-m / D)) for D (each distinct value equally
    frequent), by bisection on log D; d = m means no tie was seen (D = n).
    d = 0 (every sampled value null) gives 0: nothing was seen to estimate from.
    """
    if d <= 0:
        return 0.0  # (the bisection would start at 0 and divide by it)
    if m <= 0 or d >= m:
        return float(n)
    lo, hi = float(d), float(max(n, d))
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        if mid * -np.expm1(-m / mid) < d:
            lo = mid
        else:
            hi = mid
    return hi


def pool_ties(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None,
              *, path: str | None = None, label_sums: np.ndarray | None = None
              ) -> DistinctTable:
    """Pool rows with equal scores into a :class:`DistinctTable`.

    ``scores`` and ``labels`` are finite-checked float64 arrays (±inf scores
    allowed), ``weights`` is None for unit weights or a float64 array > 0
    (zero-weight rows must already be removed). ``path`` forces one of the
    four algorithms (for tests and benchmarks); by default it is chosen by
    :func:`choose_pool_path`. ``label_sums``: the values whose sum per
    score is the table's ``label_sum`` (default: the labels; the keyed
    pass's per-row losses pool |w y| there, the hash and argsort paths
    take them).
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    if scores.shape[0] == 0:
        return DistinctTable.empty()
    binary = is_binary(labels)
    if path is None:  # (the key and split paths count labels: none for other sums)
        path = choose_pool_path(scores, labels, weights, binary and label_sums is None)
    if label_sums is not None and path in ("key", "split"):
        raise ValueError("the key and split paths sum the labels themselves")
    if path == "key":
        if not (binary and weights is None and scores.min() >= 0.0):
            raise ValueError("the key path needs 0/1 labels, unit weights and scores >= 0")
        return _pool_by_key(scores, labels)
    if path == "hash":
        # -0.0 + 0.0 == +0.0: one bit pattern, hence one hash, for zero. (The
        # key path drops the sign bit in its shift; argsort compares values.)
        return _pool_by_hash(scores + 0.0, labels, weights, binary, label_sums)
    if path == "split":
        if not (binary and weights is None):
            raise ValueError("the split path needs 0/1 labels and unit weights")
        return _pool_by_split(scores, labels)
    if path == "argsort":
        return _pool_by_argsort(scores, labels, weights, binary, label_sums)
    raise ValueError(f"unknown pooling path {path!r}")


def starts_of_runs(a: np.ndarray) -> np.ndarray:
    """The positions where a run of equal values of the sorted array ``a`` starts.

    ``a[starts_of_runs(a)]`` is ``np.unique(a)`` without its sort: on the
    small arrays of one segment's map 5-10x faster, which matters for 10^4
    segments.
    """
    return np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1]))) if a.shape[0] else \
        np.zeros(0, dtype=np.intp)


def _pool_by_key(scores: np.ndarray, labels: np.ndarray) -> DistinctTable:
    keys = scores.view(np.uint64) << np.uint64(1)  # the sign bit (of -0.0) drops out
    np.bitwise_or(keys, labels.astype(np.uint8), out=keys)
    keys.sort()
    bits = keys >> np.uint64(1)
    starts = starts_of_runs(bits)
    # The label bit of each key: the key's lowest byte (little-endian),
    # copied out of the strided view once, because reduceat over a strided
    # uint8 view costs three times as much as over a contiguous one.
    low = ((np.ascontiguousarray(keys.view(np.uint8)[::8]) if sys.byteorder == "little"
            else (keys & np.uint64(1)).astype(np.uint8)) & np.uint8(1))
    if starts.shape[0] == keys.shape[0]:  # all scores distinct
        count = np.ones(keys.shape[0], dtype=np.int64)
        pos = low.astype(np.float64)
    else:
        count = np.diff(np.append(starts, keys.shape[0]))
        pos = np.add.reduceat(low, starts, dtype=np.int64).astype(np.float64)
    score = bits[starts].view(np.float64)
    return DistinctTable(score, count.astype(np.float64), pos, count, pos, True)


def _pool_by_split(scores: np.ndarray, labels: np.ndarray) -> DistinctTable:
    pos = labels != 0.0
    p, q = np.sort(scores[pos]), np.sort(scores[~pos])
    n = scores.shape[0]
    # A positive's place in the merged order: the negatives below it, plus the
    # positives before it (equal scores are pooled below, so ties may go either way).
    at = np.searchsorted(q, p)
    at += np.arange(p.shape[0])
    is_pos = np.zeros(n, dtype=bool)
    is_pos[at] = True
    s = np.empty(n)
    s[at] = p
    s[~is_pos] = q
    s += 0.0  # -0.0 and 0.0 are one score
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    if starts.shape[0] == n:  # all scores distinct: the merged rows are the table
        count = np.ones(n, dtype=np.int64)
        positives = is_pos.astype(np.float64)
    else:
        count = np.diff(starts, append=n)
        positives = np.add.reduceat(is_pos, starts, dtype=np.int64).astype(np.float64)
        s = s[starts]
    return DistinctTable(s, count.astype(np.float64), positives, count, positives, True)


def _hash_sums(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
               label_sums: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Distinct bit patterns (unsorted) and per-distinct sums, by hashing."""
    import pandas as pd

    # Hash the bit patterns: equal floats (NaN excluded, -0.0 folded into
    # +0.0 by the caller) have equal bits, and integer hashing is faster.
    codes, uniques = pd.factorize(scores.view(np.uint64), sort=False)
    k = uniques.shape[0]
    count = np.bincount(codes, minlength=k).astype(np.float64)
    label_sum = np.bincount(codes, weights=labels, minlength=k)
    other = label_sum if label_sums is None else np.bincount(codes, weights=label_sums,
                                                              minlength=k)
    if weights is None:
        return uniques, [count, count, other, label_sum]
    weight = np.bincount(codes, weights=weights, minlength=k)
    positives = np.bincount(codes, weights=weights * labels, minlength=k)
    return uniques, [count, weight, other, positives]


def _pool_by_hash(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                  binary: bool, label_sums: np.ndarray | None = None) -> DistinctTable:
    # One thread: inside a Spark or Dask worker the cores belong to the engine.
    uniques, sums = _hash_sums(scores, labels, weights, label_sums)
    count, weight, label_sum, positives = sums
    values = uniques.view(np.float64)
    order = np.argsort(values)
    return DistinctTable(values[order], weight[order], positives[order],
                         np.rint(count[order]).astype(np.int64), label_sum[order], binary)


def _pool_by_argsort(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None,
                     binary: bool, label_sums: np.ndarray | None = None) -> DistinctTable:
    order = np.argsort(scores)
    s = scores[order]
    y = labels[order]
    v = y if label_sums is None else label_sums[order]
    w = None if weights is None else weights[order]
    new = np.concatenate(([True], s[1:] != s[:-1]))
    if new.all():  # all distinct: the sorted rows are the table
        count = np.ones(s.shape[0], dtype=np.int64)
        weight = count.astype(np.float64) if w is None else w
        return DistinctTable(s + 0.0, weight, y if w is None else w * y, count, v, binary)
    starts = np.flatnonzero(new)
    count = np.diff(np.append(starts, s.shape[0]))
    label_sum = np.add.reduceat(v, starts)
    if w is None:
        weight = count.astype(np.float64)
        positives = label_sum if label_sums is None else np.add.reduceat(y, starts)
    else:
        # Weights near 1e308 can sum to inf: the fits refuse such sums with
        # a DataError (distcal.errors.sums_overflow) instead of warning here.
        with np.errstate(over="ignore", invalid="ignore"):
            weight = np.add.reduceat(w, starts)
            positives = np.add.reduceat(w * y, starts)
    return DistinctTable(s[starts] + 0.0, weight, positives, count, label_sum, binary)


def merge_tables(tables: list[DistinctTable]) -> DistinctTable:
    """Merge tables of disjoint row sets: concatenate, then pool equal scores.

    Exact in any order, because pooling equal scores commutes with every
    other pooling (docs/design.md).
    """
    tables = [t for t in tables if len(t)]
    if not tables:
        return DistinctTable.empty()
    if len(tables) == 1:
        return tables[0]
    score = np.concatenate([t.score for t in tables])
    # A stable sort keeps runs that are already sorted cheap (timsort merges them).
    order = np.argsort(score, kind="stable")
    s = score[order]
    starts = starts_of_runs(s)

    def pooled(name: str) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # inf: refused by the fits
            return np.add.reduceat(np.concatenate([getattr(t, name) for t in tables])[order],
                                   starts)

    return DistinctTable(s[starts], pooled("weight"), pooled("positives"),
                         pooled("count").astype(np.int64), pooled("label_sum"),
                         all(t.binary for t in tables))
