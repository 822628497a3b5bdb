"""MODL supervised discretisation of a score into intervals (Boullé, 2006).

Input is a *count table*: for V distinct scores in ascending order, the
number of rows of each of J classes, an int array ``counts`` of shape
(V, J). A discretisation cuts the V rows into I contiguous intervals; with
N rows in all, N_i rows in interval i and N_ij of them of class j, MODL
(M. Boullé, "MODL: a Bayes optimal discretization method for continuous
attributes", Machine Learning 65:131-165, 2006) minimises the negative log
posterior of the partition under a hierarchical uniform prior:

    c(P) = log N + log C(N+I-1, I-1)                 (number of intervals, their sizes)
         + sum_i log C(N_i+J-1, J-1)                 (class distribution in each interval)
         + sum_i log(N_i! / prod_j N_ij!)            (labels given the distribution)

natural logs. The two per-interval terms combine into

    f(n_i) = lgamma(N_i + J) - lgamma(J) - sum_j lgamma(N_ij + 1),

so c(P) = log N + g(I) + sum_i f(n_i) with g(I) = log C(N+I-1, I-1).
The sum is additive over intervals, g depends on I only.

The search (proofs in docs/modl.md):

1. **Pure runs are never cut** (:func:`premerge_range`): some optimum has
   no cut between two adjacent rows pure in the same class, so maximal
   runs of them are merged first. The rule looks at two rows only, so each
   score range of a distributed table can apply it alone.
2. **Exact dynamic programme** when at most ``exact_max`` rows remain:
   D_k(v) = min_u D_{k-1}(u) + f(rows u..v-1), the optimum is
   min_k log N + g(k) + D_k(K), stopped once a lower bound on any larger
   k exceeds the best found.
3. **Greedy bottom-up merging** beyond (the article's heuristic): merge the
   adjacent pair of least Delta f = f(a+b) - (f(a) + f(b)), ties to the
   leftmost pair, down to one interval, and keep the cheapest partition on
   that path (plain greedy stops at the first merge that does not lower c,
   a point on the path, so this is never worse). Then the article's
   post-optimisation: the best split of an interval, the merge of two
   (or three) neighbours, the best re-cut of two neighbours (merge-split)
   or of three into two (merge-merge-split), until no move lowers c.
4. **Granularisation** (Khiops' pre-processing, for tables of more than
   ``max_groups`` rows after step 1): contiguous groups of about equal row
   counts (:func:`granularise`, distributed as :func:`range_summary`,
   :func:`plan_groups`, :func:`group_range`, :func:`join_groups`); steps 2
   and 3 then run on the grouped table.

lgamma of integers below 2^16 is read from a table of ``math.lgamma``
values, scipy's ``gammaln`` beyond; class terms are summed in ascending
order of the counts, so f depends on the multiset of counts only and equal
merges get equal gains. Greedy merging and span pricing are compiled with
numba (:mod:`distcal.core.modl_jit`) on tables of 5,000 rows or more (below,
numba's import and compilation cost more than they save) where numba is
importable; the Python path is the reference.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import NamedTuple

import numpy as np

__all__ = ["ModlResult", "RangeGroups", "granularise", "greedy_merge", "group_range",
           "interval_bounds", "join_groups", "modl_cost", "modl_partition", "plan_groups",
           "premerge_range", "premerge_keys", "range_summary", "range_summaries"]

# A post-optimisation move must lower the cost by more than this (relative).
_TOL = 1e-9
# Tables of this many rows or more take the compiled kernels.
COMPILED_MIN_ROWS = 5000
# The default bound on the rows searched (larger tables are granularised).
MAX_GROUPS = 100_000
_LG_TABLE = 1 << 16

SpanF = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ModlResult:
    """A partition of the V rows of a count table into contiguous intervals.

    ``cuts`` are the first rows of the intervals (``cuts[0] == 0``),
    ``interval_counts`` their (I, J) class counts, ``cost`` the MODL
    criterion (:func:`modl_cost` of ``interval_counts``), ``exact`` whether
    it is a proven optimum (of the grouped table when grouped), ``groups``
    the number of groups of the granularised table, None when not grouped.
    """

    cuts: np.ndarray
    interval_counts: np.ndarray
    cost: float
    exact: bool
    groups: int | None = None

    def __len__(self) -> int:
        return int(self.cuts.shape[0])


def _check_counts(counts: np.ndarray) -> np.ndarray:
    c = np.asarray(counts)
    if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0:
        raise ValueError("counts must be a non-empty (V, J) array")
    if not np.issubdtype(c.dtype, np.integer):
        if not np.all(np.isfinite(c)) or np.any(c != np.round(c)):
            raise ValueError("counts must be integers")
    c = c.astype(np.int64)
    if np.any(c < 0):
        raise ValueError("counts must be >= 0")
    if np.any(c.sum(axis=1) == 0):
        # An empty row would make the position of a cut ambiguous.
        raise ValueError("every row of counts must hold at least one row of data")
    return c


# ----------------------------------------------------------------------------
# The criterion
# ----------------------------------------------------------------------------

@functools.cache
def lgamma_table() -> np.ndarray:
    """``math.lgamma(x)`` for the integers 0 < x < 2^16 (entry 0 unused), read-only.

    A pure constant: the arguments of f are integers, mostly small, and a
    table is faster than computing them. The compiled kernel reads the same
    table, so both paths price small counts identically.
    """
    t = np.array([0.0] + [math.lgamma(x) for x in range(1, _LG_TABLE)])
    t.flags.writeable = False
    return t


def _lg(x: np.ndarray) -> np.ndarray:
    """lgamma of an int64 array of integers >= 1."""
    table = lgamma_table()
    small = x < _LG_TABLE
    if small.all():
        out: np.ndarray = table[x]
        return out
    # (here, not at the top: scipy.special is a quarter of `import distcal`)
    from scipy.special import gammaln

    out = np.empty(x.shape)
    out[small] = table[x[small]]
    out[~small] = gammaln(x[~small].astype(np.float64))
    return out


def _f_rows(c: np.ndarray) -> np.ndarray:
    """f of each row of an (n, J) int64 array, class terms summed in ascending count order."""
    J = c.shape[1]
    s = np.sort(c, axis=1) if J > 2 else c
    terms = _lg(s + 1)
    acc = terms[:, 0].copy()
    for j in range(1, J):
        acc = acc + terms[:, j]
    f: np.ndarray = _lg(c.sum(axis=1) + J) - _lg(np.array([J]))[0] - acc
    return f


def _g(N: int, I: int) -> float:
    """g(I) = log C(N+I-1, I-1)."""
    return math.lgamma(N + I) - math.lgamma(I) - math.lgamma(N + 1)


def modl_cost(interval_counts: np.ndarray) -> float:
    """MODL criterion of a partition given its (I, J) interval counts.

    Parameters
    ----------
    interval_counts : ndarray of int, shape (I, J)
        Rows of each class in each interval, intervals in score order.

    Returns
    -------
    float
        log N + log C(N+I-1, I-1) + sum_i log C(N_i+J-1, J-1)
        + sum_i log(N_i! / prod_j N_ij!), natural logarithms.

    Examples
    --------
    >>> import numpy as np
    >>> round(modl_cost(np.array([[3, 0], [0, 3]])), 6)  # log 6 + log 7 + 2 log 4
    6.510258
    >>> bool(modl_cost(np.array([[3, 0], [0, 3]])) < modl_cost(np.array([[3, 3]])))
    True
    """
    c = _check_counts(interval_counts)
    N = int(c.sum())
    return float(math.log(N) + _g(N, c.shape[0]) + _f_rows(c).sum())


# ----------------------------------------------------------------------------
# Pure runs
# ----------------------------------------------------------------------------

def _pure_class(c: np.ndarray) -> np.ndarray:
    """The class of each row if it holds one class only, else -1."""
    nonzero = c > 0
    return np.where(nonzero.sum(axis=1) == 1, np.argmax(nonzero, axis=1), -1)


def _run_starts(c: np.ndarray, heads: np.ndarray | None = None) -> np.ndarray:
    """First rows of the maximal runs of adjacent rows pure in the same class (mixed rows
    alone); ``heads``: rows that start a run whatever their class (the first of each key)."""
    cls = _pure_class(c)
    same = (cls[1:] == cls[:-1]) & (cls[1:] >= 0)
    first = np.concatenate(([True], ~same))
    if heads is not None:
        first[heads] = True
    return np.flatnonzero(first)


def _runs_per_key(runs: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """How many of the ``runs`` (first rows, ascending) start in each key's rows
    ``starts[k]:starts[k + 1]`` (every key's first row starts a run)."""
    key = np.searchsorted(starts[:-1], runs, side="right") - 1
    return np.bincount(key, minlength=starts.shape[0] - 1)


def _pool(counts: np.ndarray, starts: np.ndarray, lo: np.ndarray, hi: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows pooled into the runs beginning at ``starts``: their counts, first lo and last hi."""
    ends = np.append(starts[1:], counts.shape[0]) - 1
    if starts.shape[0] < counts.shape[0]:
        counts = np.add.reduceat(counts, starts, axis=0)
    return counts, lo[starts], hi[ends]


def premerge_range(counts: np.ndarray, scores: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge the rows of one score range that no MODL optimum needs to cut apart.

    Adjacent rows pure in the same single class are merged into one row:
    moving the k rows of such a run across a cut, f of each side is concave
    in k, so one end of the run does at least as well (docs/modl.md). The
    rule looks at two neighbouring rows only, so each contiguous range of a
    range-partitioned table can run it alone; the driver concatenates the
    outputs in score order and merges again across range boundaries.

    Parameters
    ----------
    counts : ndarray of int, shape (V, J)
        Class counts of the range's distinct scores, ascending.
    scores : ndarray of float, shape (V,), optional
        The distinct scores. Without them the bounds are row indices.

    Returns
    -------
    merged : ndarray of int64, shape (K, J)
        Class counts of the merged rows.
    lo, hi : ndarray, shape (K,)
        Smallest and largest score (or row index) of each merged row.

    Examples
    --------
    >>> import numpy as np
    >>> counts = np.array([[2, 0], [1, 0], [0, 4], [1, 1], [0, 1], [0, 2]])
    >>> merged, lo, hi = premerge_range(counts, np.array([.1, .2, .3, .4, .5, .6]))
    >>> merged.tolist(), lo.tolist(), hi.tolist()
    ([[3, 0], [0, 4], [1, 1], [0, 3]], [0.1, 0.3, 0.4, 0.5], [0.2, 0.3, 0.4, 0.6])
    """
    c = _check_counts(counts)
    if scores is not None and np.shape(scores)[0] != c.shape[0]:
        raise ValueError("scores and counts must have the same number of rows")
    s = np.arange(c.shape[0]) if scores is None else np.asarray(scores)
    merged, lo, hi, _ = premerge_keys(c, s, np.array([0, c.shape[0]]))
    return merged, lo, hi


def premerge_keys(counts: np.ndarray, scores: np.ndarray, starts: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`premerge_range` of many keys' tables at once (checked counts).

    Key k's rows are ``starts[k]:starts[k + 1]`` (none empty); its merged
    rows are ``new_starts[k]:new_starts[k + 1]`` of the result
    (merged, lo, hi, new_starts).
    """
    runs = _run_starts(counts, starts[:-1])
    merged, lo, hi = _pool(counts, runs, scores, scores)
    return merged, lo, hi, np.concatenate(([0], np.cumsum(_runs_per_key(runs, starts))))


# ----------------------------------------------------------------------------
# Granularisation (Khiops): contiguous groups of about equal row counts
# ----------------------------------------------------------------------------

class RangeGroups(NamedTuple):
    """What one score range needs to group its rows (:func:`plan_groups`).

    ``rows_before``: rows of the whole table in earlier ranges;
    ``first_start``: position (in rows) where the pure run holding the
    range's first row starts, earlier than ``rows_before`` when that run
    began in an earlier range; ``total_rows``: N; ``max_groups``: G.
    """

    rows_before: int
    first_start: int
    total_rows: int
    max_groups: int


def range_summary(counts: np.ndarray) -> np.ndarray:
    """Five integers that describe one range's count table for :func:`plan_groups`.

    [rows, rows after :func:`premerge_range`, class of the first row if
    pure (else -1), class of the last row if pure (else -1), rows in the
    last pure run (the last row's own count when it is mixed)].
    """
    c = _check_counts(counts)
    out: np.ndarray = range_summaries(c, np.array([0, c.shape[0]]))[0]
    return out


def range_summaries(counts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """:func:`range_summary` of many keys' tables at once (checked counts): row k is
    key k's, whose rows are ``starts[k]:starts[k + 1]`` (none empty)."""
    heads, ends = starts[:-1], starts[1:]
    runs = _run_starts(counts, heads)
    n_runs = _runs_per_key(runs, starts)
    last_run = runs[np.cumsum(n_runs) - 1]
    cls = _pure_class(counts[np.concatenate((heads, ends - 1))])
    rows = np.concatenate(([0], np.cumsum(counts.sum(axis=1))))
    return np.column_stack([rows[ends] - rows[heads], n_runs, cls[:len(heads)],
                            cls[len(heads):], rows[ends] - rows[last_run]]).astype(np.int64)


def plan_groups(summaries: Sequence[np.ndarray], max_groups: int) -> list[RangeGroups] | None:
    """Whether the table of these ranges needs grouping, and if so each range's share.

    ``summaries`` are the :func:`range_summary` of the non-empty ranges in
    score order (a few integers each: the driver needs nothing else). The
    whole table has K rows after merging pure runs: the ranges' own counts,
    less one for each range boundary inside a run. Returns None when
    K <= ``max_groups``; otherwise, per range, the :class:`RangeGroups` that
    :func:`group_range` takes.
    """
    if max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}")
    S = np.asarray(summaries, dtype=np.int64).reshape(-1, 5)
    joins = (S[1:, 2] >= 0) & (S[1:, 2] == S[:-1, 3])
    if int(S[:, 1].sum()) - int(joins.sum()) <= max_groups:
        return None
    N = int(S[:, 0].sum())
    before = np.concatenate(([0], np.cumsum(S[:, 0])[:-1]))
    first = before.copy()
    for r in range(1, S.shape[0]):
        if joins[r - 1]:  # the run of range r-1's last row goes on into range r
            single = S[r - 1, 1] == 1
            first[r] = first[r - 1] if single else before[r] - S[r - 1, 4]
    return [RangeGroups(int(b), int(f), N, int(max_groups)) for b, f in zip(before, first)]


def group_range(counts: np.ndarray, spec: RangeGroups, scores: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Group one range's rows as its :class:`RangeGroups` says.

    Pure runs are merged first (:func:`premerge_range`). A merged row that
    starts s rows into the whole table goes to group floor(s G / N): groups
    are contiguous, never split a distinct score or a pure run, number at
    most G, and each holds fewer than N/G + m rows, m the largest merged
    row. Rows of one group in two ranges get the same group id, which
    :func:`join_groups` uses to add them up.

    Returns (grouped counts (n, J), group ids (n,), lo, hi): lo and hi are
    the smallest and largest score (or row index) of each group.
    """
    merged, lo, hi = premerge_range(counts, scores)
    sizes = merged.sum(axis=1)
    start = spec.rows_before + np.concatenate(([0], np.cumsum(sizes)[:-1]))
    start[0] = spec.first_start
    ids = start * spec.max_groups // spec.total_rows  # (fits int64 for N G < 9.2e18)
    first = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    grouped, lo, hi = _pool(merged, first, lo, hi)
    return grouped, ids[first], lo, hi


def join_groups(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grouped table of the whole key: :func:`group_range` outputs in score order, joined.

    A group cut by a range boundary appears at the end of one part and the
    start of the next with the same id; its rows are added up. Returns
    (counts (G', J), lo, hi).
    """
    counts, ids, lo, hi = (np.concatenate([p[i] for p in parts]) for i in range(4))
    return _pool(counts, np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1]))), lo, hi)


def granularise(counts: np.ndarray, max_groups: int) -> np.ndarray | None:
    """First rows of the groups of a whole count table, or None when no grouping is needed.

    The same groups as :func:`plan_groups` and :func:`group_range` give
    for any split of the table into ranges: the table is one range here.

    Examples
    --------
    >>> import numpy as np
    >>> counts = np.array([[1, 1], [2, 0], [0, 1], [1, 1], [1, 2], [0, 3]])
    >>> granularise(counts, 3).tolist()  # 13 rows; run starts 0,2,4,5,7,10 -> groups 0,0,0,1,1,2
    [0, 3, 5]
    >>> granularise(counts, 6) is None
    True
    """
    c = _check_counts(counts)
    if 0 < max_groups and c.shape[0] <= max_groups:  # (a row holds one run at least)
        return None
    plan = plan_groups([range_summary(c)], max_groups)
    if plan is None:
        return None
    _, _, lo, _ = group_range(c, plan[0])
    return lo.astype(np.intp)


# ----------------------------------------------------------------------------
# Exact optimum
# ----------------------------------------------------------------------------

def _span_f_py(P: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """f of rows u..v-1 for each pair, from prefix sums P (K+1, J), vectorised."""
    return _f_rows(P[v] - P[u])


def _exact_starts(C: np.ndarray) -> np.ndarray:
    """First rows of an optimal partition of the rows of C, by DP over the number of intervals."""
    K, J = C.shape
    N = int(C.sum())
    if K == 1 or J == 1:
        return np.zeros(1, dtype=np.intp)
    P = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(C, axis=0)])
    # G[v, u] = f(rows u..v-1) for u < v, inf elsewhere: the minima over u
    # below run along G's rows, contiguous in memory.
    iu, iv = np.triu_indices(K + 1, 1)
    G = np.full((K + 1, K + 1), np.inf)
    G[iv, iu] = _span_f_py(P, iu, iv)
    # A lower bound on sum f over partitions into any number of intervals:
    # E(K) of E(v) = min_u E(u) + f(rows u..v-1). With g increasing in k,
    # once log N + g(k) + E(K) exceeds the best found, no k' >= k can win.
    # Lowered by 1e-9 relative for sums taken in another order.
    E = np.zeros(K + 1)
    for v in range(1, K + 1):
        E[v] = np.min(E[:v] + G[v, :v])
    any_k = float(E[K]) - 1e-9 * max(1.0, abs(float(E[K])))
    log_n = math.log(N)
    D = G[:, 0].copy()  # D_1(v)
    best, best_k = log_n + _g(N, 1) + D[K], 1
    back: list[np.ndarray] = [np.zeros(0, dtype=np.intp)] * 2
    for k in range(2, K + 1):
        if log_n + _g(N, k) + any_k >= best:
            break
        # D_k(v), v in [k, K], from D_{k-1}(u), u in [k-1, v-1]; G[v, u] is
        # inf from u = v on, so one min over the row slice is the recurrence.
        sub = G[k:K + 1, k - 1:K] + D[k - 1:K]
        arg = np.argmin(sub, axis=1)
        D = np.full(K + 1, np.inf)
        D[k:] = sub[np.arange(K + 1 - k), arg]
        back.append(arg + (k - 1))
        cost = log_n + _g(N, k) + D[K]
        if cost < best:
            best, best_k = cost, k
    starts, v = [0], K
    for k in range(best_k, 1, -1):
        v = int(back[k][v - k])
        starts.append(v)
    return np.asarray(sorted(starts), dtype=np.intp)


# ----------------------------------------------------------------------------
# Greedy bottom-up merging
# ----------------------------------------------------------------------------

def _greedy_path_py(C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy merging of the K rows of C down to one interval: (left, right, gain) per merge.

    The reference for :func:`distcal.core.modl_jit.greedy_path` (same
    heap order: least gain, then leftmost pair). A heap entry (gain, left,
    end) is stale once either interval changed: then the pair's end moved.
    """
    # (here, not at the top: scipy.special is a quarter of `import distcal`)
    from scipy.special import gammaln

    K, J = C.shape
    table: list[float] = lgamma_table().tolist()
    lg_j = table[J]

    def lg(x: int) -> float:
        return table[x] if x < _LG_TABLE else float(gammaln(x))

    def f(c: list[int]) -> float:
        acc = 0.0
        for j, x in enumerate(sorted(c) if J > 2 else c):
            acc = lg(x + 1) if j == 0 else acc + lg(x + 1)
        return lg(sum(c) + J) - lg_j - acc

    cnt = C.tolist()
    fv = _f_rows(C).tolist()
    nxt, prv = list(range(1, K + 1)), list(range(-1, K - 1))
    alive = [True] * K

    def entry(a: int, b: int) -> tuple[float, int, int]:
        return f([x + y for x, y in zip(cnt[a], cnt[b])]) - (fv[a] + fv[b]), a, nxt[b]

    heap = [entry(i, i + 1) for i in range(K - 1)]
    heapq.heapify(heap)
    out: list[tuple[int, int, float]] = []
    while heap:
        g, L, E = heapq.heappop(heap)
        R = nxt[L]
        if not alive[L] or R >= K or nxt[R] != E:
            continue
        cnt[L] = [x + y for x, y in zip(cnt[L], cnt[R])]
        fv[L] = f(cnt[L])
        alive[R] = False
        nxt[L] = nxt[R]
        if nxt[R] < K:
            prv[nxt[R]] = L
        out.append((L, R, g))
        if prv[L] >= 0:
            heapq.heappush(heap, entry(prv[L], L))
        if nxt[L] < K:
            heapq.heappush(heap, entry(L, nxt[L]))
    arr = np.array(out, dtype=np.float64).reshape(-1, 3)
    return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2]


def _greedy(C: np.ndarray, jit: ModuleType | None, to_end: bool) -> np.ndarray:
    """First rows of the intervals greedy merging leaves.

    Plain greedy stops before the first merge that does not lower c, i.e.
    when gain + log((I-1)/(N+I-1)) >= 0 (that is g(I-1) - g(I)). With
    ``to_end`` the path goes on to one interval and its cheapest point is
    kept (earliest on ties), never worse than the plain stopping point.
    """
    K = C.shape[0]
    if K == 1:
        return np.zeros(1, dtype=np.intp)
    left, right, gain = (jit.greedy_path(np.ascontiguousarray(C), lgamma_table())
                         if jit is not None else _greedy_path_py(C))
    N = int(C.sum())
    I = K - np.arange(K - 1)  # intervals before each merge
    delta = gain + np.log((I - 1) / (N + I - 1))
    if to_end:
        total = np.concatenate(([0.0], np.cumsum(delta)))
        steps = int(np.argmin(total))
    else:
        worse = np.flatnonzero(delta >= 0)
        steps = int(worse[0]) if worse.size else K - 1
    keep = np.ones(K, dtype=bool)
    keep[right[:steps]] = False
    return np.flatnonzero(keep)


def greedy_merge(counts: np.ndarray) -> np.ndarray:
    """First rows of the intervals of plain greedy bottom-up merging (no post-optimisation).

    Starts from one interval per row; repeatedly merges the adjacent pair
    with the least Delta f = f(a+b) - (f(a) + f(b)) (ties: the leftmost
    pair) while the merge lowers the criterion. A heap keeps it
    O(V log V); the Python path. Exposed for comparisons with the search.

    Examples
    --------
    >>> import numpy as np
    >>> greedy_merge(np.array([[3, 0], [2, 0], [0, 4], [0, 1]])).tolist()
    [0, 2]
    """
    return _greedy(_check_counts(counts), None, to_end=False)


# ----------------------------------------------------------------------------
# Post-optimisation (Boullé 2006)
# ----------------------------------------------------------------------------

def _seg_min(vals: np.ndarray, seg: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Least value and its first index for each segment id in [0, n); seg ascending."""
    best, at = np.full(n, np.inf), np.full(n, -1, dtype=np.int64)
    if vals.size == 0:
        return best, at
    b = np.flatnonzero(np.concatenate(([True], seg[1:] != seg[:-1])))
    m = np.minimum.reduceat(vals, b)
    hit = np.flatnonzero(vals == np.repeat(m, np.diff(np.append(b, vals.size))))
    first = hit[np.concatenate(([True], seg[hit][1:] != seg[hit][:-1]))]
    best[seg[b]], at[seg[first]] = m, first
    return best, at


def _cost(P: np.ndarray, starts: np.ndarray, span_f: SpanF) -> float:
    K = P.shape[0] - 1
    N = int(P[-1].sum())
    return float(math.log(N) + _g(N, starts.shape[0])
                 + span_f(starts, np.append(starts[1:], K)).sum())


def _best_cuts(starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, iv: np.ndarray, w: int,
               span_f: SpanF) -> tuple[np.ndarray, np.ndarray]:
    """For each run of w neighbours p..p+w-1: the least f(s_p..t) + f(t..e_{p+w-1}) over cuts t.

    t ranges over the rows strictly inside the run's span; the row of
    interval iv[k] is rows[k]. Returns (least value, its cut), lowest t on ties.
    """
    n = starts.shape[0] - w + 1
    best, cut = np.full(n, np.inf), np.zeros(n, dtype=np.int64)
    for o in range(w - 1, -1, -1):  # o: position of the cut's interval in the run
        # A start row is a cut only when it is not the run's first row (o > 0).
        ok = (iv >= o) & (iv - o < n) & ((o > 0) | (rows != starts[iv]))
        t, p = rows[ok], iv[ok] - o
        v, at = _seg_min(span_f(starts[p], t) + span_f(t, ends[p + w - 1]), p, n)
        take = (v <= best) & (at >= 0)  # later (lower) o wins ties: lower cuts
        best[take], cut[take] = v[take], t[at[take]]
    return best, cut


def _post_optimise(P: np.ndarray, starts: np.ndarray, span_f: SpanF) -> np.ndarray:
    """Boullé's moves until none lowers the cost by more than _TOL (relative).

    On w = 1, 2, 3 neighbouring intervals: split one (w = 1), merge two or
    three into one, re-cut two (merge-split) or three into two
    (merge-merge-split). Each pass prices every move at once, O(K) span
    prices per w. The moves that lower c are applied together, best first,
    skipping those that touch an interval already moved; if the batch as a
    whole does not lower c (g is not additive over moves), only the best
    move is applied. Every pass lowers c, so the loop ends.
    """
    K = P.shape[0] - 1
    N = int(P[-1].sum())
    cost = _cost(P, starts, span_f)
    rows = np.arange(K, dtype=np.int64)
    while True:
        I = starts.shape[0]
        ends = np.append(starts[1:], K)
        fi = span_f(starts, ends)
        iv = np.searchsorted(starts, rows, side="right") - 1
        moves = []  # (delta, first interval, intervals spanned, new cut or -1)
        for w in range(1, min(3, I) + 1):
            old = np.lib.stride_tricks.sliding_window_view(fi, w).sum(axis=1)
            if w > 1:  # merge the w into one
                d = span_f(starts[:I - w + 1], ends[w - 1:]) - old + _g(N, I - w + 1) - _g(N, I)
                moves += [(float(d[p]), int(p), w, -1) for p in np.flatnonzero(d < 0)]
            best, cut = _best_cuts(starts, ends, rows, iv, w, span_f)  # the w into two
            d = best - old + _g(N, I - w + 2) - _g(N, I)
            moves += [(float(d[p]), int(p), w, int(cut[p])) for p in np.flatnonzero(d < 0)]
        tol = _TOL * max(1.0, abs(cost))
        moves = sorted(m for m in moves if m[0] < -tol)
        if not moves:
            return starts
        new = _apply(starts, moves)
        new_cost = _cost(P, new, span_f)
        if new_cost >= cost - tol:
            new = _apply(starts, moves[:1])
            new_cost = _cost(P, new, span_f)
            if new_cost >= cost - tol:  # rounding: the move's own price said otherwise
                return starts
        starts, cost = new, new_cost


def _apply(starts: np.ndarray, moves: list[tuple[float, int, int, int]]) -> np.ndarray:
    """Starts after the non-overlapping moves of the list, taken in order."""
    used = np.zeros(starts.shape[0], dtype=bool)
    keep = np.ones(starts.shape[0], dtype=bool)
    add = []
    for _, p, w, cut in moves:
        if used[p:p + w].any():
            continue
        used[p:p + w] = True
        keep[p + 1:p + w] = False
        if cut >= 0:
            add.append(cut)
    return np.unique(np.concatenate((starts[keep], np.asarray(add, dtype=starts.dtype))))


# ----------------------------------------------------------------------------
# Public entry
# ----------------------------------------------------------------------------

def _solve(T: np.ndarray, exact_max: int, compiled: bool | None) -> tuple[np.ndarray, bool]:
    """First rows of the partition of the rows of T, and whether it is exact."""
    K, J = T.shape
    runs = _run_starts(T)
    if J == 1 or K == 1:
        return np.zeros(1, dtype=np.intp), True
    if runs.shape[0] <= exact_max:
        return runs[_exact_starts(np.add.reduceat(T, runs, axis=0))], True
    # Greedy from the single rows; when every row is pure, from the runs:
    # while every interval is pure, merging two of one class lowers f and
    # two of different classes raises it, so the path from single rows
    # first forms exactly the runs, each step lowering c (docs/modl.md).
    all_pure = bool((_pure_class(T) >= 0).all())
    rows = runs if all_pure else np.arange(K)
    B = np.add.reduceat(T, rows, axis=0) if all_pure else T
    P = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(B, axis=0)])
    jit: ModuleType | None = None  # the Python path
    if compiled is not False and (compiled is not None or B.shape[0] >= COMPILED_MIN_ROWS):
        try:
            from . import modl_jit as jit
        except ImportError:  # no numba (a Python with numpy, pandas, pyarrow, scipy only)
            if compiled:
                raise
    table = lgamma_table()

    def span_f(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        if jit is None:
            return _span_f_py(P, u, v)
        out: np.ndarray = jit.span_f(P, u.astype(np.int64), v.astype(np.int64), table)
        return out

    starts = _post_optimise(P, _greedy(B, jit, to_end=True), span_f)
    return rows[starts], False


def modl_partition(counts: np.ndarray, exact_max: int = 1000, max_groups: int = MAX_GROUPS,
                   compiled: bool | None = None) -> ModlResult:
    """MODL discretisation of a count table: exact when small, greedy-or-better otherwise.

    Adjacent rows pure in the same class are merged first (never cut in
    some optimum). If more than ``max_groups`` rows remain, they are grouped
    into at most ``max_groups`` contiguous groups of about equal row counts
    (:func:`granularise`) and the search runs on the grouped table (K below
    is then its row count; ``result.groups`` says how many groups).

    If K <= ``exact_max``, the dynamic programme returns an optimal
    partition (``exact=True``). Otherwise (``exact=False``) greedy
    bottom-up merging runs to one interval and keeps the cheapest partition
    on its path, then split, merge, merge-split and merge-merge-split
    moves run until none lowers the cost by more than 1e-9 relative. Guarantee: the cost is at
    most that of :func:`greedy_merge` on the rows searched (the input rows,
    or their pure runs when every row is pure, which gives the same
    greedy path). O(K log K) for greedy merging, O(K J) per
    post-optimisation pass, O(K^2) memory and O(K^2 I) time for the DP.

    Parameters
    ----------
    counts : ndarray of int, shape (V, J)
        For V ascending distinct scores, rows of each of J classes; every
        row must hold at least one row of data.
    exact_max : int
        Largest table (after merging pure runs) solved exactly; 0 forces
        the greedy path.
    max_groups : int
        Largest table searched; larger ones are granularised first.
    compiled : bool or None
        Greedy merging and span pricing compiled with numba (True), in
        Python (False), or compiled on tables of ``COMPILED_MIN_ROWS`` rows
        or more where numba is importable (None). Equal costs to rounding.

    Returns
    -------
    ModlResult

    Examples
    --------
    >>> import numpy as np
    >>> counts = np.array([[3, 0], [2, 0], [4, 1], [0, 3], [0, 5], [1, 4]])
    >>> res = modl_partition(counts)
    >>> res.cuts.tolist(), res.interval_counts.tolist(), res.exact
    ([0, 3], [[9, 1], [1, 12]], True)
    >>> modl_partition(counts, exact_max=0).cuts.tolist()
    [0, 3]
    """
    c = _check_counts(counts)
    groups = granularise(c, max_groups)
    table = c if groups is None else np.add.reduceat(c, groups, axis=0)
    starts, exact = _solve(table, exact_max, compiled)
    cuts = starts if groups is None else groups[starts]
    ic = np.add.reduceat(c, cuts, axis=0)
    return ModlResult(np.asarray(cuts, dtype=np.intp), ic, modl_cost(ic), exact,
                      None if groups is None else int(groups.shape[0]))


def interval_bounds(result: ModlResult, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(score_min, score_max) of each interval, given the V distinct scores.

    Examples
    --------
    >>> import numpy as np
    >>> res = modl_partition(np.array([[3, 0], [2, 0], [0, 4], [0, 5]]))
    >>> lo, hi = interval_bounds(res, np.array([0.1, 0.2, 0.7, 0.9]))
    >>> lo.tolist(), hi.tolist()
    ([0.1, 0.7], [0.2, 0.9])
    """
    s = np.asarray(scores)
    ends = np.append(result.cuts[1:], s.shape[0]) - 1
    return s[result.cuts], s[ends]
