"""MODL supervised discretisation of a score into intervals (Boullé, 2006).

Input is a *count table*: for V distinct scores in ascending order, the
number of rows of each of J classes, an int64 array ``counts`` of shape
(V, J). A discretisation cuts the V rows into I contiguous intervals; with
N rows in all, N_i rows in interval i and N_ij of them of class j, MODL
(Boullé, "MODL: a Bayes optimal discretization method for continuous
attributes", Machine Learning 65:131-165, 2006) minimises the negative log
posterior of the partition under a hierarchical uniform prior:

    c(P) = log N + log C(N+I-1, I-1)                 (number of intervals, their sizes)
         + sum_i log C(N_i+J-1, J-1)                 (class distribution in each interval)
         + sum_i log(N_i! / prod_j N_ij!)            (labels given the distribution)

natural logs, factorials through ``scipy.special.gammaln``. The two
per-interval terms combine into

    f(n_i) = lgamma(N_i + J) - lgamma(J) - sum_j lgamma(N_ij + 1),

so c(P) = log N + g(I) + sum_i f(n_i) with g(I) = log C(N+I-1, I-1). The
sum is additive over intervals but g is not: it depends on the number of
intervals only, which is why the exact dynamic programme is indexed by it.

Three facts this module is built on (proofs in docs/modl.md):

1. **Pure runs are never cut.** If two adjacent rows both hold a single
   class, the same one, some optimal partition has no cut between them
   (Boullé 2006 states it for instances of one class; here for pure rows).
   Moving the k instances of that class across the cut, f of each side is
   concave in k (trigamma is decreasing), so one end of the run does at
   least as well; an emptied interval only lowers g. Maximal runs of pure
   rows of one class are therefore merged before searching
   (:func:`premerge_range`); the rule looks at two rows only, so a range of
   the global table can apply it alone.
2. **Exact optimum by dynamic programming** over the reduced rows: D_k(v),
   the least sum of f over partitions of the first v rows into k intervals,
   follows D_k(v) = min_u D_{k-1}(u) + f(rows u..v-1), one vectorised
   min-plus row per k; the optimum is min_k log N + g(k) + D_k(V). Every
   interval has f >= log J + (its share of the finest partition's
   multinomial terms), so log N + g(k) + k log J + M_0 bounds every
   partition into k or more intervals from below and stops the loop.
   O(K^2 I) time for K reduced rows and I intervals tried, O(K^2) memory.
3. **Greedy bottom-up merging** (the article's heuristic) merges the
   adjacent pair with the least  Delta f = f(a+b) - f(a) - f(b)  while the
   merge lowers c, i.e. while Delta f + log((I-1)/(N+I-1)) < 0. Merging
   two pure intervals of one class has Delta f < 0; two pure intervals of
   different classes have Delta f > 0. So while every interval is pure,
   the least pair is a same-class one, and greedy merging from single rows
   first reaches exactly the maximal pure runs: when every row is pure,
   starting from the reduced table gives the very same result, faster.
   Then the article's post-optimisation (best split of an interval, merge
   of two neighbours, best re-cut of two neighbours) runs until no move
   lowers the cost, and last every window of four consecutive intervals
   spanning at most 1,000 rows is re-partitioned exactly (fact 2 on the
   window's rows, the rest fixed) while that lowers the cost.
"""

from __future__ import annotations

import functools
import heapq
import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import gammaln

__all__ = ["ModlResult", "modl_cost", "modl_partition", "premerge_range", "interval_bounds",
           "greedy_merge"]

_log = logging.getLogger("distcal")

# Merge gains are rounded to a binary grid (see _quantise) before they are
# compared, so that "leftmost pair among equal gains" is well defined whatever
# lgamma implementation computed them (math.lgamma and scipy's gammaln differ
# in the last bits).
_QUANT = 524288.0  # 2^19: grid 2^(19-52) = 2^-33 ~ 1.2e-10 for |gain| < 2^19
# A post-optimisation move must lower the cost by more than this.
_TOL = 1e-9

# (counts, f of each row, rounded gains, f of each pair, N, to_end) -> (removed, steps)
GreedyKernel = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, bool],
                        tuple[np.ndarray, np.ndarray]]
# (P0, P1, end, t0, t1, memo, filled) -> f of rows end..t-1 (f_from) or t..end-1 (f_to)
# for t in [t0, t1); memo: log-gamma values kept between calls (modl_jit._gl), filled:
# the mark up to which it is known filled (modl_jit._fill_memo)
SpanKernel = Callable[[np.ndarray, np.ndarray, int, int, int, np.ndarray, np.ndarray],
                      np.ndarray]
# (B, offs, rem, key) of greedy merging in parts, when the parts are merged
PartsHook = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]
# Entries of that memo: the log-gamma of integers below this many (8 MiB),
# a constant so that the driver holds nothing proportional to the rows;
# the spans priced after the first passes are far shorter than N.
_MEMO = 1 << 20
_MEMO_ARRAY: list[np.ndarray] = []
# The memo is known filled from 1 up to this entry (raised by the windows'
# kernel, modl_jit.windows_dp2, and by _memo_through, which fill ranges at once).
_MEMO_FILLED = np.zeros(1, dtype=np.int64)


def _shared_memo() -> np.ndarray:
    """The process's log-gamma memo for the compiled cut pricing (NaN: not computed yet).

    One for every post-optimisation, also for the two that run at once: an
    entry, once set, is scipy's gammaln of its index whoever set it, so
    results cannot depend on sharing (two threads that both find NaN write
    the same value; 8-byte stores are whole). Sharing spares each call
    filling 8 MiB, and each thread the values the other computed: the two
    post-optimisations price the same integers.
    """
    if not _MEMO_ARRAY:
        _MEMO_ARRAY.append(np.full(_MEMO, np.nan))
    return _MEMO_ARRAY[0]


@dataclass(frozen=True)
class ModlResult:
    """A partition of the V rows of a count table into contiguous intervals.

    ``cuts`` are the first rows of the intervals (``cuts[0] == 0``),
    ``interval_counts`` their (I, J) class counts, ``cost`` the MODL
    criterion of the partition (:func:`modl_cost` of ``interval_counts``),
    ``exact`` whether it is a proven optimum.
    """

    cuts: np.ndarray
    interval_counts: np.ndarray
    cost: float
    exact: bool

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
        # A distinct score holds at least one row; an empty row would make
        # the position of a cut ambiguous.
        raise ValueError("every row of counts must hold at least one row of data")
    return c


# scipy's gammaln of the integers below this many is read from a table: the
# arguments of f are integers (counts plus 1, sizes plus J), mostly small
# on the rows of a count table, and a table entry is gammaln's own value,
# so only the time changes.
_GL_TABLE = 1 << 16


@functools.cache
def _gammaln_table() -> np.ndarray:
    t: np.ndarray = gammaln(np.arange(_GL_TABLE, dtype=np.float64))
    t.flags.writeable = False
    return t


def _gammaln_int(x: np.ndarray) -> np.ndarray:
    """``scipy.special.gammaln(x)`` for an array of integral floats >= 1, bit for bit."""
    table = _gammaln_table()
    i = x.astype(np.intp)
    small = i < _GL_TABLE
    if small.all():
        out: np.ndarray = table[i]
        return out
    out = np.empty(x.shape)
    out[small] = table[i[small]]
    out[~small] = gammaln(x[~small])
    return out


def _memo_through(top: int) -> np.ndarray | None:
    """The process's log-gamma memo, filled from 1 through ``top``; None if it is shorter.

    Filled with gammaln's own values (:func:`_shared_memo`), so a value read
    from it is bit for bit the ufunc's. For the windows' arguments, spread
    over up to a million integers on heavy rows, where the 2^16-entry table
    of :func:`_gammaln_int` misses.
    """
    memo = _shared_memo()
    if top >= memo.shape[0]:
        return None
    if _MEMO_FILLED[0] < top:  # as modl_jit.windows_dp2: fill, then raise the mark
        head = memo[:top + 1]
        gap = np.flatnonzero(np.isnan(head))
        if gap.size:
            head[gap] = gammaln(gap.astype(np.float64))
        _MEMO_FILLED[0] = max(int(_MEMO_FILLED[0]), top)
    return memo


def _f(c: np.ndarray) -> np.ndarray:
    """f of each row of a (..., J) count array (module docstring)."""
    J = c.shape[-1]
    if J == 2:
        return _f2(c[..., 0].astype(np.float64), c[..., 1].astype(np.float64))
    c = c.astype(np.float64)
    f: np.ndarray = (_gammaln_int(c.sum(axis=-1) + J) - gammaln(J)
                     - _gammaln_int(c + 1.0).sum(axis=-1))
    return f


def _f2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f of two-class counts given as two float arrays.

    The same operations in the same order as the general case (the sum of
    two terms is exact in either order), so bit-identical to it, without
    the (..., 2) temporaries and the axis reduction that dominate its time.
    """
    f: np.ndarray = (_gammaln_int(a + b + 2) - gammaln(2)
                     - (_gammaln_int(a + 1.0) + _gammaln_int(b + 1.0)))
    return f


def _log_prior_intervals(N: int, I: np.ndarray | int) -> np.ndarray | float:
    """g(I) = log C(N+I-1, I-1)."""
    g: np.ndarray | float = gammaln(N + I) - gammaln(I) - gammaln(N + 1.0)
    return g


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
    I = c.shape[0]
    return float(math.log(N) + _log_prior_intervals(N, I) + _f(c).sum())


def _pure_run_starts(counts: np.ndarray) -> tuple[np.ndarray, bool]:
    """First rows of the maximal runs of rows pure in one class, and whether all rows are pure.

    A row that holds two classes or more is a run of its own. Rows must
    hold at least one row of data (checked counts).
    """
    if counts.shape[1] == 2:
        # Two classes: a row is pure in class 0 exactly when its class-1
        # count is 0 (and vice versa); the same runs as below in a third of
        # the time, which counts on a million-row table.
        only0, only1 = counts[:, 1] == 0, counts[:, 0] == 0
        same = (only0[1:] & only0[:-1]) | (only1[1:] & only1[:-1])
        return np.flatnonzero(np.concatenate(([True], ~same))), bool((only0 | only1).all())
    nonzero = counts > 0
    pure = nonzero.sum(axis=1) == 1
    cls = np.argmax(nonzero, axis=1)
    same = pure[1:] & pure[:-1] & (cls[1:] == cls[:-1])
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    return starts, bool(pure.all())


def premerge_range(counts: np.ndarray, scores: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge the rows of one score range that no MODL optimum ever cuts apart.

    Adjacent rows pure in the same single class are merged into one row
    (fact 1 of the module docstring). The rule only looks at two
    neighbouring rows, so each contiguous score range of a range-partitioned
    table can run it alone; the driver concatenates the ranges' outputs in
    score order and calls :func:`modl_partition`, which merges again across
    range boundaries. Greedy merging inside a range is *not* safe: whether
    two mixed rows belong together depends on rows outside the range (see
    docs/modl.md).

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
    return _premerge(_check_counts(counts), scores)


def _premerge(c: np.ndarray, scores: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`premerge_range` of int64 counts already checked (callers that built them)."""
    if scores is not None and np.shape(scores)[0] != c.shape[0]:
        raise ValueError("scores and counts must have the same number of rows")
    if (_JIT_WARM and c.shape[1] == 2 and c.shape[0] >= _JIT_MIN_ROWS // 10
            and _jit_kernels() is not None):
        # A process whose kernels are loaded (never a Spark or Dask worker's:
        # they do not import numba): one compiled pass, the same integers.
        from .modl_jit import premerge2

        merged, starts, ends = premerge2(np.ascontiguousarray(c, dtype=np.int64))
    else:
        starts, _ = _pure_run_starts(c)
        ends = np.append(starts[1:], c.shape[0]) - 1
        # Rows of several instances are mostly mixed: nothing to merge, no copy.
        merged = c if starts.shape[0] == c.shape[0] else np.add.reduceat(c, starts, axis=0)
    if scores is None:
        return merged, starts.copy(), ends
    s = np.asarray(scores)
    return merged, s[starts], s[ends]


# ----------------------------------------------------------------------------
# Exact optimum
# ----------------------------------------------------------------------------

def _exact_starts(C: np.ndarray) -> np.ndarray:
    """First rows of an optimal partition of the rows of C, by DP over the number of intervals."""
    K, J = C.shape
    N = int(C.sum())
    if K == 1 or J == 1:
        return np.zeros(1, dtype=np.intp)
    P = np.vstack([np.zeros((1, J)), np.cumsum(C, axis=0, dtype=np.float64)])
    # G[v, u] = f(rows u..v-1) for u < v (the lower triangle; inf above):
    # the recurrences below take minima over u, along G's rows, contiguous.
    iu, iv = np.triu_indices(K + 1, 1)
    d = P[iv] - P[iu]
    G = np.full((K + 1, K + 1), np.inf)
    G[iv, iu] = _gammaln_int(d.sum(axis=1) + J) - gammaln(J) - _gammaln_int(d + 1.0).sum(axis=1)
    log_n = math.log(N)
    # Lower bounds on sum f over any partition into k intervals, so that the
    # loop stops once the prior g(k), which grows with k, makes every larger
    # k dearer than the best found. (a) Each interval has log C(N_i+J-1,
    # J-1) >= log J, and merging rows never lowers the multinomial terms,
    # whose least sum is that of the single rows: k log J + m0. (b) The
    # least sum of f over partitions with any number of intervals, E(K) of
    # E(v) = min_u E(u) + f(rows u..v-1): one O(K^2) pass, and far tighter
    # (on 1,000 rows of ~10^3 instances the loop stops at k = 41 instead of
    # 452 for an optimum of 34 intervals). Lowered by 1e-9 relative for
    # the rounding of sums taken in another order; stopping later changes
    # nothing, since larger k only replace the best when strictly cheaper.
    m0 = float((gammaln(C.sum(axis=1) + 1.0) - gammaln(C + 1.0).sum(axis=1)).sum())
    log_j = math.log(J)
    E = np.zeros(K + 1)
    for v in range(1, K + 1):
        E[v] = np.min(E[:v] + G[v, :v])
    any_k = float(E[K]) - 1e-9 * max(1.0, abs(float(E[K])))

    D = G[:, 0].copy()  # D_1(v)
    best, best_k = log_n + _log_prior_intervals(N, 1) + D[K], 1
    back: list[np.ndarray] = [np.zeros(0, dtype=np.intp)] * 2
    for k in range(2, K + 1):
        if log_n + _log_prior_intervals(N, k) + max(k * log_j + m0, any_k) >= best:
            break
        # D_k(v) for v in [k, K] from D_{k-1}(u), u in [k-1, v-1]: row v of G
        # is inf from u = v on, so one min over the whole row is the recurrence.
        sub = G[k:K + 1, k - 1:K] + D[k - 1:K]
        arg = np.argmin(sub, axis=1)
        Dn = np.full(K + 1, np.inf)
        Dn[k:] = sub[np.arange(K + 1 - k), arg]
        back.append(arg + (k - 1))
        D = Dn
        c = log_n + _log_prior_intervals(N, k) + D[K]
        if c < best:
            best, best_k = c, k
    starts = [0]
    v = K
    for k in range(best_k, 1, -1):
        v = int(back[k][v - k])
        starts.append(v)
    return np.asarray(sorted(starts), dtype=np.intp)


# ----------------------------------------------------------------------------
# Greedy bottom-up merging
# ----------------------------------------------------------------------------

def greedy_merge(counts: np.ndarray) -> np.ndarray:
    """First rows of the intervals of plain greedy bottom-up merging (no post-optimisation).

    Starts from one interval per row and repeatedly merges the adjacent pair
    with the least Delta f (rounded to 2^-33, see ``_quantise``; ties: the
    leftmost pair) while
    the merge lowers the criterion. A heap with lazy invalidation keeps it
    O(V log V). Exposed so that callers (and tests) can compare with the
    full search.

    Examples
    --------
    >>> import numpy as np
    >>> greedy_merge(np.array([[3, 0], [2, 0], [0, 4], [0, 1]])).tolist()
    [0, 2]
    """
    return _greedy_starts(_check_counts(counts))


def _quantise(x: np.ndarray) -> np.ndarray:
    """Round gains to a fixed binary grid (2^-33 for |x| < 2^19), identically in numpy and Python.

    Adding and subtracting 2^19 is exact IEEE arithmetic, so both give the
    same grid value, which makes "leftmost pair among equal gains" a
    well-defined rule whichever lgamma computed the gain.
    """
    return (x + _QUANT) - _QUANT


def _greedy_starts(C: np.ndarray, to_end: bool = False) -> np.ndarray:
    """First rows of the intervals of greedy merging over the rows of C.

    Plain greedy stops at the first merge that does not lower the cost.
    With ``to_end`` merging goes on down to one interval, along the same
    path, and the cheapest partition met is kept (Boullé's variant): never
    worse than the plain stopping point, which is on the path.
    """
    K = C.shape[0]
    if K == 1:
        return np.zeros(1, dtype=np.intp)
    removed, steps = _greedy_path(C, to_end)
    return _kept_starts(K, removed, steps, to_end)


def _greedy_path(C: np.ndarray, to_end: bool, parts_merged: PartsHook | None = None
                 ) -> tuple[Sequence[int] | np.ndarray, Sequence[float] | np.ndarray]:
    """(removed intervals, cost changes) of greedy merging over the K >= 2 rows of C, in order.

    ``parts_merged`` is called when merging runs in parts (:func:`_greedy_in_parts`).
    """
    K = C.shape[0]
    N = int(C.sum())
    kernel = _jit_greedy() if _compiled(K) else None
    if kernel is not None and C.shape[1] == 2:
        f_row, f_pair, keys = _first_gains2(np.ascontiguousarray(C, dtype=np.int64))
    elif kernel is not None and K >= _SPLIT_MIN_ROWS:
        # numpy's log-gamma passes release the GIL: both arrays at once.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            rows = pool.submit(_f, C)
            f_pair = _f(C[:-1] + C[1:])
            f_row = rows.result()
        keys = _quantise(f_pair - f_row[:-1] - f_row[1:])
    else:
        f_row = _f(C)
        f_pair = _f(C[:-1] + C[1:])
        keys = _quantise(f_pair - f_row[:-1] - f_row[1:])
    return _greedy_merges(C, f_row, f_pair, keys, N, to_end, kernel, parts_merged)


def _first_gains2(C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(f of each row, f of each pair of rows, rounded gains) of a two-class int64 table, compiled.

    numpy's values bit for bit (modl_jit.first_gains2); large tables in two
    threads, a half each.
    """
    from .modl_jit import first_gains2

    K = C.shape[0]
    f_row, f_pair, keys = np.empty(K), np.empty(K - 1), np.empty(K - 1)
    table = _gammaln_table()
    if K < _SPLIT_MIN_ROWS:
        first_gains2(C, table, 0, K, f_row, f_pair, keys)
        return f_row, f_pair, keys
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        upper = pool.submit(first_gains2, C, table, K // 2, K, f_row, f_pair, keys)
        first_gains2(C, table, 0, K // 2, f_row, f_pair, keys)
        upper.result()
    return f_row, f_pair, keys


def _greedy_merges(C: np.ndarray, f_row: np.ndarray, f_pair: np.ndarray, keys: np.ndarray,
                   N: int, to_end: bool, kernel: GreedyKernel | None,
                   parts_merged: PartsHook | None = None
                   ) -> tuple[Sequence[int] | np.ndarray, Sequence[float] | np.ndarray]:
    """(removed intervals, cost changes) of greedy merging, compiled or in Python (same values)."""
    K, J = C.shape
    if kernel is not None and K >= _SPLIT_MIN_ROWS and _jit_split() is not None:
        parts = max(2, min(_SPLIT_PARTS, K // _SPLIT_PART_ROWS))
        return _greedy_in_parts(np.ascontiguousarray(C, dtype=np.int64), f_row, f_pair, keys,
                                N, to_end, kernel, parts, parts_merged=parts_merged)
    if kernel is not None:
        return kernel(np.ascontiguousarray(C, dtype=np.int64), f_row.copy(), keys, f_pair, N,
                      to_end)
    heap = _MergeHeap(keys, f_pair, K, N, J)
    if J == 2:
        return _greedy_loop2(heap, f_row.tolist(), C[:, 0].tolist(), C[:, 1].tolist(), N, K,
                             to_end)
    return _greedy_loop(heap, f_row.tolist(), C.tolist(), N, K, J, to_end)


# Greedy merging of at least this many rows (compiled) runs in parts of
# about _SPLIT_PART_ROWS rows (at most _SPLIT_PARTS), two threads each
# taking the next part left, whose merge sequences are interleaved (docs/modl.md,
# "Compiled kernels", point 7): a part's intervals and heap stay in cache.
# The boundaries are rows that a greedy run over a window of _SPLIT_WINDOW
# rows around them merges last.
_SPLIT_MIN_ROWS = 100_000
_SPLIT_PART_ROWS = 30_000
_SPLIT_PARTS = 32
_SPLIT_WINDOW = 1 << 12


def _split_points(C: np.ndarray, f_row: np.ndarray, f_pair: np.ndarray, keys: np.ndarray,
                  N: int, parts: int, kernel: GreedyKernel, window: int = _SPLIT_WINDOW
                  ) -> np.ndarray:
    """First rows of ``parts`` parts of C (and K): boundaries likely to be merged late.

    Around each of the K q / parts, greedy merging over ``window`` rows
    alone; the boundary it merges last, among the middle half of the
    window, is taken. Greedy over the whole table merges mostly the same
    way away from the window's ends, so that boundary is usually among the
    last merged there too (on the benchmark's 1e6-row table, in 32 parts,
    the first pair across parts merges with about 5,600 intervals left).
    Only the time depends on this choice, never the result.
    """
    K = C.shape[0]

    def last_merged(lo: int, hi: int) -> int:
        removed, _ = kernel(C[lo:hi], f_row[lo:hi].copy(), keys[lo:hi - 1], f_pair[lo:hi - 1],
                            N, True)
        when = np.full(hi - lo, -1, dtype=np.int64)
        when[np.asarray(removed, dtype=np.intp)] = np.arange(len(removed))
        inner = np.arange(max(1, (hi - lo) // 4), max(2, 3 * (hi - lo) // 4))
        return lo + int(inner[np.argmax(when[inner])])

    # The windows are independent unless one reaches back to the boundary
    # before it (parts shorter than the window): each is first run from its
    # own centre, two threads taking every other window (the kernel
    # releases the GIL), and redone in order where the previous boundary
    # moves its start, so the boundaries are those of the plain loop.
    centres = [K * q // parts for q in range(1, parts)]
    spans = [(max(1, c - window // 2), min(K, c + window // 2)) for c in centres]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        odd = pool.submit(lambda: [last_merged(*w) for w in spans[1::2]])
        guess = [0] * len(spans)
        guess[0::2] = [last_merged(*w) for w in spans[0::2]]
        guess[1::2] = odd.result()
    bounds = [0]
    for c, (lo, hi), g in zip(centres, spans, guess):
        start = max(bounds[-1] + 1, c - window // 2)
        bounds.append(g if start == lo else last_merged(start, hi))
    bounds.append(K)
    return np.asarray(bounds, dtype=np.int64)


def _greedy_in_parts(C: np.ndarray, f_row: np.ndarray, f_pair: np.ndarray, keys: np.ndarray,
                     N: int, to_end: bool, kernel: GreedyKernel, parts: int,
                     bounds: np.ndarray | None = None, parts_merged: PartsHook | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_greedy_merges` of the compiled kernel, computed in parts: the same two arrays.

    Each part of the table is merged greedily on its own to one interval
    (two threads, each taking the next part left); the parts' merges, interleaved by (gain, left
    interval), are the whole table's merges until a pair across two parts
    is the least (modl_jit.interleave). From there the kernel goes on over
    the intervals then present, with the values it would hold for them
    (:func:`_state_after`): identical merges and cost changes throughout.
    ``parts_merged(B, offs, rem, key)``, if given, is called once the parts
    are merged, before the interleaving: part p's rows B[p]..B[p+1]-1, its
    merges entries offs[p]..offs[p+1]-1 of ``rem`` (removed row, local to
    the part) and ``key`` (rounded gain); it must not change them.
    """
    split = _jit_split()
    assert split is not None
    record, interleave = split
    K = C.shape[0]
    B = (_split_points(C, f_row, f_pair, keys, N, parts, kernel, _SPLIT_WINDOW) if bounds is None
         else np.asarray(bounds, dtype=np.int64))
    k = B.shape[0] - 1

    # Part p's K_p - 1 merges are entries offs[p]..offs[p+1]-1 of five arrays,
    # written in place by the kernel.
    offs = B - np.arange(k + 1)
    rem, left, after = (np.empty(K - k, dtype=np.int64) for _ in range(3))
    key, delta = np.empty(K - k), np.empty(K - k)

    def run(p: int) -> None:
        a, e = int(B[p]), int(B[p + 1])
        o, z = int(offs[p]), int(offs[p + 1])
        record(C[a:e], f_row[a:e].copy(), keys[a:e - 1], f_pair[a:e - 1], N,
               rem[o:z], left[o:z], key[o:z], delta[o:z], after[o:z])

    from concurrent.futures import ThreadPoolExecutor

    # Two threads (this one and one more), each taking the next part left:
    # parts differ in time by up to 2x, so a fixed split leaves one idle.
    todo = iter(range(k))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                p = next(todo, None)
            if p is None:
                return
            run(p)

    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(work)
        work()
        other.result()
    if parts_merged is not None:
        parts_merged(B, offs, rem, key)
    P = np.empty((K + 1, C.shape[1]), dtype=np.int64)
    P[0] = 0
    np.cumsum(C, axis=0, out=P[1:])
    removed, steps, used, crossed = interleave(B, offs, rem, left, key, delta, after, P, f_row,
                                               f_pair, keys, N, to_end)
    if not crossed:
        return removed, steps
    # A part's run removes each of its rows but the first once: those left
    # after its first used[p] merges are its first row and the rows its
    # later merges remove.
    starts = np.sort(np.concatenate(
        [np.concatenate(([B[p]], rem[offs[p] + used[p]:offs[p + 1]] + B[p])) for p in range(k)]
    )).astype(np.int64)
    counts, fv, gains, merged_f = _state_after(starts, P, f_row, f_pair, keys)
    more_removed, more_steps = kernel(counts, fv, gains, merged_f, N, to_end)
    return (np.concatenate((removed, starts[more_removed])),
            np.concatenate((steps, more_steps)))


def _state_after(starts: np.ndarray, P: np.ndarray, f_row: np.ndarray, f_pair: np.ndarray,
                 keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The greedy kernel's inputs for the intervals that begin at ``starts``, as it holds them.

    (class counts, f of each interval, rounded gain and f merged of each
    pair) with the very values the compiled kernel has for those intervals
    after merging up to them, so that it goes on from there exactly as over
    the whole table. It starts with numpy's f of single rows (``f_row``) and
    of pairs of rows (``f_pair``, gains ``keys``); an interval of two rows
    can only come from merging two single rows, so its f is that pair's;
    every larger interval, and every pair with one, was priced by the kernel
    from its counts with CPython's lgamma (its own copy, bit for bit:
    modl_jit._lgamma), as the Python loop prices them. Compiled
    (modl_jit.state_after, with the kernel's own pricing): only the path in
    parts, itself compiled, needs it.
    """
    from .modl_jit import state_after

    out: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = state_after(
        np.ascontiguousarray(starts, dtype=np.int64), P, f_row, f_pair, keys)
    return out


def _kept_starts(K: int, removed: Sequence[int] | np.ndarray, steps: Sequence[float] | np.ndarray,
                 to_end: bool) -> np.ndarray:
    """First rows left after the merges kept: the prefix with the least cumulative change.

    All of them for plain greedy, whose every step lowers the cost.
    """
    n_keep = len(removed)
    if to_end and len(steps):
        path = np.concatenate(([0.0], np.cumsum(steps)))
        n_keep = int(np.argmin(path))
    return _starts_after(K, removed, n_keep)


def _starts_after(K: int, removed: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """First rows of the intervals left after the first n merges of a greedy path over K rows."""
    if len(removed) == K - 1:
        # The path goes down to one interval: every row but the first is
        # removed exactly once, so those left are the first row and the
        # rows removed later (sorting them beats marking K rows).
        return np.sort(np.concatenate((np.zeros(1, dtype=np.intp),
                                       np.asarray(removed[n:], dtype=np.intp))))
    alive = np.ones(K, dtype=bool)
    alive[np.asarray(removed[:n], dtype=np.intp)] = False
    return np.flatnonzero(alive)


# Greedy merging of at least this many rows runs in the compiled kernel
# (distcal.core.modl_jit) when numba is importable. Below, the Python loop
# takes less time than importing numba and loading the compiled code; once
# the kernels have run in this process (``_JIT_WARM``), there is nothing
# left to import or load, and tables from a tenth of it take them too (on
# 10,000 rows about half the Python path's time; the same results).
_JIT_MIN_ROWS = 20_000
_JIT_WARM = False


def _compiled(K: int) -> bool:
    """Whether a table of K rows takes the compiled kernels (same results either way)."""
    limit = _JIT_MIN_ROWS // 10 if _JIT_WARM else _JIT_MIN_ROWS
    return K >= limit and _jit_kernels() is not None


@functools.cache
def _jit_kernels() -> tuple[GreedyKernel, SpanKernel, SpanKernel] | None:
    """The compiled kernels, or None where numba is missing or unusable (the Python path runs)."""
    try:
        from .modl_jit import f_from2, f_to2, greedy_merges
    except (ImportError, RuntimeError) as exc:  # RuntimeError: numba found no cache directory
        _log.info("MODL runs its greedy path in Python (compiled kernels unavailable: %s)", exc)
        return None
    return greedy_merges, f_from2, f_to2


def _jit_split() -> tuple[Callable[..., None], Callable[..., tuple[Any, ...]]] | None:
    """The compiled kernels of greedy merging in parts, or None (see :func:`_jit_kernels`)."""
    if _jit_kernels() is None:
        return None
    from .modl_jit import greedy_record, interleave
    return greedy_record, interleave


def _jit_greedy() -> GreedyKernel | None:
    """The compiled greedy kernel, or None."""
    kernels = _jit_kernels()
    return None if kernels is None else kernels[0]


def _ordered_bits(x: float) -> int:
    """An int with the order of the float x (its IEEE bits, negatives mirrored); never -0.0."""
    b = int(np.float64(x).view(np.int64))
    return b if b >= 0 else -(b & 0x7FFF_FFFF_FFFF_FFFF)


class _MergeHeap:
    """The greedy-merge priority queue: one Python int per entry, lazily invalidated.

    An entry is ``q << sb | s`` where q is the rounded gain as an int with
    the same order and s the left interval of the pair: ints order as the
    tuples (gain, s), so the heap pops the least gain, leftmost on ties,
    exactly as a heap of tuples would, and one int comparison is much
    cheaper than a tuple comparison. ``cur[s]`` is the entry of the current
    pair starting at s (None: no pair); every change to s or to its right
    neighbour pushes a new entry, and a popped entry that is not ``cur[s]``
    is stale and skipped. A stale entry equal to ``cur[s]`` carries the
    current pair's own priority, so taking it instead of its twin changes
    nothing: validity needs no stamps.

    Gains are on the grid of ``_quantise``: at least -2^18 they are
    multiples of 2^-34 (2^-33 above 0), so q = int(gain * 2^34) is exact.
    A gain is at least -log C(N+J-1, J-1) (merging never lowers the
    multinomial term, and log C(n+J-1, J-1) is increasing in n), so this
    holds unless that bound reaches 2^17; then q comes from the float's bits.
    """

    SCALE = 2.0**34

    def __init__(self, keys: np.ndarray, f_pair: np.ndarray, K: int, N: int, J: int) -> None:
        self.sb = K.bit_length()
        self.mask = (1 << self.sb) - 1
        bound = float(gammaln(N + J) - gammaln(J) - gammaln(N + 1.0))
        self.scaled = bound < 2.0**17
        self.qkey = self._scaled if self.scaled else _ordered_bits
        sb = self.sb
        q = [self.qkey(k) for k in keys.tolist()]
        self.heap: list[int] = [(k << sb) | s for s, k in enumerate(q)]
        self.cur: list[int | None] = [*self.heap, None]
        heapq.heapify(self.heap)
        # The gain and f of the merged pair of each interval's current pair.
        self.gain = keys.tolist() + [0.0]
        self.fpair = f_pair.tolist() + [0.0]

    @classmethod
    def _scaled(cls, k: float) -> int:
        return int(k * cls.SCALE)

    def drop_stale(self, n_alive: int) -> None:
        """Rebuild without stale entries once they outnumber the live ones (each costs a pop)."""
        if len(self.heap) > 4 * n_alive + 64:
            cur, mask = self.cur, self.mask
            self.heap = [e for e in self.heap if cur[e & mask] == e]
            heapq.heapify(self.heap)

    def entry(self, s: int, key: float, f_merged: float) -> int:
        """Make the (new, current) entry of the pair starting at interval s."""
        e = (self.qkey(key) << self.sb) | s
        self.cur[s] = e
        self.gain[s] = key
        self.fpair[s] = f_merged
        return e


def _greedy_loop2(h: _MergeHeap, fv: list[float], A: list[int], B: list[int], N: int, K: int,
                  to_end: bool) -> tuple[list[int], list[float]]:
    """:func:`_greedy_run` for two classes, inlined: f = log((n+1)! / (a! b!)), same decisions."""
    lg, log, Q = math.lgamma, math.log, _QUANT
    heappop, heappush = heapq.heappop, heapq.heappush
    cur, gain, fpair, mask = h.cur, h.gain, h.fpair, h.mask
    qkey, sb = h.qkey, h.sb
    scaled, S = h.scaled, h.SCALE
    nxt = list(range(1, K + 1))
    prv = list(range(-1, K - 1))
    I = K
    removed: list[int] = []
    steps: list[float] = []
    rm, sp = removed.append, steps.append
    pending = -1
    while I > 1:
        if pending >= 0:
            s, pending = pending, -1
        else:
            if not h.heap:
                break
            e = heappop(h.heap)
            s = e & mask
            if cur[s] != e:
                if len(h.heap) > 4 * I + 64:
                    h.drop_stale(I)
                continue
        shift = log((I - 1) / (N + I - 1))
        if gain[s] + shift >= 0.0 and not to_end:
            break
        r = nxt[s]
        fm = fpair[s]
        rm(r)
        sp(fm - fv[s] - fv[r] + shift)
        a = A[s] + A[r]
        b = B[s] + B[r]
        A[s] = a
        B[s] = b
        fv[s] = fm
        cur[r] = None
        nr = nxt[r]
        nxt[s] = nr
        I -= 1
        p = prv[s]
        best = None
        if p >= 0:
            x, y = A[p] + a, B[p] + b
            fp = lg(x + y + 2) - lg(x + 1) - lg(y + 1)
            k = (fp - fv[p] - fm + Q) - Q
            best = ((int(k * S) if scaled else qkey(k)) << sb) | p
            cur[p] = best
            gain[p] = k
            fpair[p] = fp
        if nr < K:
            prv[nr] = s
            x, y = a + A[nr], b + B[nr]
            fn = lg(x + y + 2) - lg(x + 1) - lg(y + 1)
            k = (fn - fm - fv[nr] + Q) - Q
            e = ((int(k * S) if scaled else qkey(k)) << sb) | s
            cur[s] = e
            gain[s] = k
            fpair[s] = fn
            if best is None:
                best = e
            elif e < best:
                heappush(h.heap, best)
                best = e
            else:
                heappush(h.heap, e)
        else:
            cur[s] = None
        if best is None:
            continue
        if not h.heap or best < h.heap[0]:
            pending = best & mask
        else:
            heappush(h.heap, best)
    return removed, steps


def _greedy_loop(h: _MergeHeap, fv: list[float], cnt: list[list[int]], N: int, K: int, J: int,
                 to_end: bool) -> tuple[list[int], list[float]]:
    """The greedy loop for any number of classes, counts as lists."""
    lg = math.lgamma
    lg_j = lg(J)

    def merged_f(s: int, t: int) -> float:
        c = [a + b for a, b in zip(cnt[s], cnt[t])]
        # Summed left to right in a loop, as the compiled kernel does; sum()
        # of floats is compensated from Python 3.12 on.
        acc = 0.0
        for x in c:
            acc += lg(x + 1)
        return lg(sum(c) + J) - lg_j - acc

    def absorb(s: int, r: int) -> None:
        cnt[s] = [a + b for a, b in zip(cnt[s], cnt[r])]

    return _greedy_run(h, fv, merged_f, absorb, N, K, to_end)


def _greedy_run(h: _MergeHeap, fv: list[float], merged_f: Callable[[int, int], float],
                absorb: Callable[[int, int], None], N: int, K: int, to_end: bool
                ) -> tuple[list[int], list[float]]:
    """Greedy merging on a :class:`_MergeHeap`: (removed intervals, cost changes) in merge order.

    One shortcut, which changes no decision: a merge creates at most two
    new pairs, and when the lesser of their entries is below the heap's top
    (a lower bound of every entry in it, stale or not) it is the global
    minimum, i.e. the next merge; it is taken without a push and a pop.
    Cascades of that kind are frequent (a merged interval's new gains are
    often the least), so this saves a large share of the heap operations.
    """
    log, Q = math.log, _QUANT
    heappop, heappush = heapq.heappop, heapq.heappush
    cur, gain, fpair, mask = h.cur, h.gain, h.fpair, h.mask
    nxt = list(range(1, K + 1))
    prv = list(range(-1, K - 1))
    I = K
    removed: list[int] = []
    steps: list[float] = []
    pending = -1  # the interval whose pair is known to be the next merge
    while I > 1:
        if pending >= 0:
            s, pending = pending, -1
        else:
            if not h.heap:
                break
            e = heappop(h.heap)
            s = e & mask
            if cur[s] != e:
                h.drop_stale(I)
                continue  # stale
        shift = log((I - 1) / (N + I - 1))
        if gain[s] + shift >= 0.0 and not to_end:
            break  # the best merge does not lower the criterion
        r = nxt[s]
        fm = fpair[s]
        removed.append(r)
        steps.append(fm - fv[s] - fv[r] + shift)
        absorb(s, r)
        fv[s] = fm
        cur[r] = None
        nr = nxt[r]
        nxt[s] = nr
        I -= 1
        p = prv[s]
        best = None  # the lesser new entry (entries can be negative ints)
        if p >= 0:
            fp = merged_f(p, s)
            best = h.entry(p, (fp - fv[p] - fm + Q) - Q, fp)
        if nr < K:
            prv[nr] = s
            fn = merged_f(s, nr)
            e = h.entry(s, (fn - fm - fv[nr] + Q) - Q, fn)
            if best is None:
                best = e
            else:
                heappush(h.heap, max(best, e))
                best = min(best, e)
        else:
            cur[s] = None
        if best is None:
            continue
        if not h.heap or best < h.heap[0]:
            pending = best & mask
        else:
            heappush(h.heap, best)
    return removed, steps


# ----------------------------------------------------------------------------
# Post-optimisation: split, merge, merge-split
# ----------------------------------------------------------------------------

def _best_in_segments(gain: np.ndarray, seg_start: np.ndarray, n_seg: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Least gain and its position in each of n_seg consecutive non-empty segments."""
    best = np.minimum.reduceat(gain, seg_start) if gain.size else np.zeros(0)
    # Position of the (first) minimum of each segment.
    seg_id = np.repeat(np.arange(n_seg), np.diff(np.append(seg_start, gain.shape[0])))
    hit = gain == best[seg_id]
    first = np.full(n_seg, -1, dtype=np.intp)
    idx = np.flatnonzero(hit)
    # Reversed assignment keeps the first hit of each segment.
    first[seg_id[idx[::-1]]] = idx[::-1]
    return best, first


def _span_f(P: list[np.ndarray], u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """f of rows u..v-1 for arrays of u < v, from per-class float prefix sums P."""
    if len(P) == 2:
        return _f2(P[0][v] - P[0][u], P[1][v] - P[1][u])
    return _f(np.stack([p[v] - p[u] for p in P], axis=-1))


def _best_cut(P: list[np.ndarray], lo: np.ndarray, hi: np.ndarray, f_old: np.ndarray,
              cache: dict[tuple[int, int], np.ndarray] | _Sides
              ) -> tuple[np.ndarray, np.ndarray]:
    """For each span of rows [lo, hi) (hi - lo >= 2): least f(left) + f(right) - f_old, and its cut.

    All cuts lo < t < hi of all uncached spans at once, with per-class
    prefix sums P. ``cache`` maps a span to its array of f(left) + f(right)
    over its cuts, filled here: a span comes back when a pair is merged
    into an interval or an interval is split into a pair, and the gains of
    a cached span are computed from the same values with the same
    subtraction, so the result is the same. With a :class:`_Sides` instead
    (two classes, compiled), f(left) and f(right) are kept per end of the
    span; the sums, and so the result, are the same.
    """
    n = lo.shape[0]
    best = np.empty(n)
    cut = np.empty(n, dtype=np.intp)
    if isinstance(cache, _Sides):
        for i, (a, z) in enumerate(zip(lo.tolist(), hi.tolist())):
            # (f(left) + f(right)) - f_old at each cut and its first least, in one
            # compiled pass: the same sums and subtraction as numpy's, the
            # first least as argmin and _best_in_segments take it.
            left, right = cache.sides(a, z)
            best[i], j = cache.least(left, right, z - a - 1, float(f_old[i]))
            cut[i] = a + 1 + j
        return best, cut
    keys = list(zip(lo.tolist(), hi.tolist()))
    hit = np.fromiter((k in cache for k in keys), dtype=bool, count=n)
    miss = np.flatnonzero(~hit)
    if miss.size:
        lo_m, hi_m = lo[miss], hi[miss]
        L = hi_m - lo_m - 1
        seg = np.concatenate(([0], np.cumsum(L)[:-1]))
        t = np.arange(L.sum()) + np.repeat(lo_m + 1 - seg, L)
        sums = _span_f(P, np.repeat(lo_m, L), t) + _span_f(P, t, np.repeat(hi_m, L))
        gain = sums - np.repeat(f_old[miss], L)
        b, pos = _best_in_segments(gain, seg, miss.size)
        best[miss], cut[miss] = b, t[pos]
        for i, a, z in zip(miss.tolist(), seg.tolist(), (seg + L).tolist()):
            if z - a >= 256:  # small spans are cheap to redo; copies free the big array
                cache[keys[i]] = sums[a:z].copy()
    for i in np.flatnonzero(hit).tolist():
        g = cache[keys[i]] - f_old[i]
        j = int(np.argmin(g))  # the first least, as _best_in_segments
        best[i], cut[i] = g[j], lo[i] + 1 + j
    return best, cut


class _Sides:
    """f(rows lo..t-1) per left end lo and f(rows t..hi-1) per right end hi, over cuts t.

    The post-optimisation prices the cuts of spans that share their ends: an
    interval and the pair it starts have the same left end, the pair it
    ends has its right end, and splitting an interval keeps both of its
    ends. Keeping the values per end, and extending them on demand, prices
    each cut of a span with about half the log-gamma calls of pricing
    whole spans. Values come from the compiled kernels (two classes), bit
    for bit those of :func:`_span_f`; f(left) + f(right) is the same
    addition, so every move is the same as with the span cache.
    """

    def __init__(self, P: list[np.ndarray], f_from: SpanKernel, f_to: SpanKernel) -> None:
        from .modl_jit import least_cut  # the kernels are loaded: so is their module

        self.P0, self.P1 = P
        self.f_from, self.f_to = f_from, f_to
        self.least = least_cut
        self.memo = _shared_memo()
        self.left: dict[int, np.ndarray] = {}   # lo -> f(lo..t-1), t = lo+1, lo+2, ...
        self.right: dict[int, np.ndarray] = {}  # hi -> f(t..hi-1), t = ..., hi-2, hi-1
        # The ends each post-optimisation sharing these values still uses.
        self.live: dict[object, tuple[set[int], set[int]]] = {}

    @classmethod
    def of_table(cls, C: np.ndarray) -> _Sides | None:
        """Sides of the table C (two classes, compiled path), or None where they do not apply.

        One object may serve several post-optimisations of the same table,
        also at once in two threads: the values stored for an end are
        f of fixed spans, the same whoever computes them (a race stores one
        of two equal arrays), and each reader keeps the arrays it took.
        """
        K, J = C.shape
        kernels = _jit_kernels() if J == 2 and _compiled(K) else None
        if kernels is None:
            return None
        Pi = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(C, axis=0)])
        return cls([Pi[:, j].astype(np.float64) for j in range(J)], kernels[1], kernels[2])

    def sides(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """f(rows lo..t-1) from t = lo+1 on and f(rows t..hi-1) up to t = hi-1.

        Both hold at least the hi - lo - 1 cuts of the span: the first n
        values of the first array and the last n of the second.
        """
        n = hi - lo - 1
        a = self.left.get(lo)
        have = 0 if a is None else a.shape[0]
        if have < n:
            more = self.f_from(self.P0, self.P1, lo, lo + 1 + have, hi, self.memo,
                               _MEMO_FILLED)
            a = more if a is None else np.concatenate((a, more))
            self.left[lo] = a
        b = self.right.get(hi)
        have = 0 if b is None else b.shape[0]
        if have < n:
            more = self.f_to(self.P0, self.P1, hi, lo + 1, hi - have, self.memo,
                             _MEMO_FILLED)
            b = more if b is None else np.concatenate((more, b))
            self.right[hi] = b
        assert a is not None and b is not None
        return a, b

    def prune(self, starts: np.ndarray, ends: np.ndarray, owner: object) -> None:
        """Forget the ends that no post-optimisation sharing them has among its intervals now.

        ``owner`` identifies the caller; its ends are replaced by those of
        ``starts`` and ``ends``. (list() of a dict is taken whole under the
        GIL, and pop tolerates a key another thread removed first.)
        """
        self.live[owner] = (set(starts.tolist()), set(ends.tolist()))
        keep_lo: set[int] = set().union(*(lo for lo, _ in list(self.live.values())))
        keep_hi: set[int] = set().union(*(hi for _, hi in list(self.live.values())))
        for k in [k for k in list(self.left) if k not in keep_lo]:
            self.left.pop(k, None)
        for k in [k for k in list(self.right) if k not in keep_hi]:
            self.right.pop(k, None)


def _post_optimise(C: np.ndarray, starts: np.ndarray, sides: _Sides | None = None
                   ) -> np.ndarray:
    """Apply improving split / merge / merge-split moves until none lowers the cost.

    The f-part of every move (best split of each interval, merge and best
    re-cut of each pair of neighbours) is kept in arrays, computed at once
    with prefix sums and recomputed after each pass only for the intervals
    the pass changed. The best non-overlapping improving moves are applied
    together when that lowers the true cost (the prior term g is not
    additive over moves), else the single best one.
    """
    K, J = C.shape
    N = int(C.sum())
    # f(left) + f(right) over the cuts of the spans of current intervals and
    # pairs (see _best_cut); pruned after each pass. ``sides``, if given,
    # are the table's (_Sides.of_table(C)), maybe shared with another
    # post-optimisation of C.
    if sides is None:
        sides = _Sides.of_table(C)
    cache: dict[tuple[int, int], np.ndarray] | _Sides
    if sides is not None:
        P = [sides.P0, sides.P1]
        cache = sides
    else:
        # Per-class prefix sums as floats (exact below 2^53): f of rows u..v-1
        # is then _span_f(P, u, v), with the same values as _f of the int sums.
        Pi = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(C, axis=0)])
        P = [Pi[:, j].astype(np.float64) for j in range(J)]
        cache = {}
    owner = object()
    starts = np.asarray(starts, dtype=np.intp)

    def total(st: np.ndarray) -> float:
        ends = np.append(st[1:], K)
        return float(_log_prior_intervals(N, st.shape[0]) + _span_f(P, st, ends).sum())

    def evaluate(st: np.ndarray, en: np.ndarray, f_int: np.ndarray, todo: np.ndarray,
                 todo_pairs: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(split gain, split cut) for intervals todo; (merge gain, re-cut gain, cut) for pairs."""
        sg = np.full(todo.shape[0], np.inf)
        sc = np.full(todo.shape[0], -1, dtype=np.intp)
        ok = np.flatnonzero(en[todo] - st[todo] >= 2)
        if ok.size:
            i = todo[ok]
            sg[ok], sc[ok] = _best_cut(P, st[i], en[i], f_int[i], cache)
        i = todo_pairs
        pair_f = f_int[i] + f_int[i + 1]
        mg = _span_f(P, st[i], en[i + 1]) - pair_f
        if i.size:
            rg, rc = _best_cut(P, st[i], en[i + 1], pair_f, cache)
        else:
            rg, rc = np.zeros(0), np.zeros(0, dtype=np.intp)
        return sg, sc, mg, rg, rc

    cost = total(starts)
    ends = np.append(starts[1:], K)
    f_int = _span_f(P, starts, ends)
    I = starts.shape[0]
    split_g, split_c, merge_g, recut_g, recut_c = evaluate(
        starts, ends, f_int, np.arange(I), np.arange(I - 1))
    while True:
        I = starts.shape[0]
        sg = split_g + math.log((N + I) / I)
        cand = [(float(sg[i]), 0, int(i), int(split_c[i])) for i in np.flatnonzero(sg < -_TOL)]
        if I >= 2:
            mg = merge_g + math.log((I - 1) / (N + I - 1))
            cand += [(float(mg[i]), 1, int(i), -1) for i in np.flatnonzero(mg < -_TOL)]
            cand += [(float(recut_g[i]), 2, int(i), int(recut_c[i]))
                     for i in np.flatnonzero(recut_g < -_TOL)]
        if not cand:
            return starts
        cand.sort()
        used = np.zeros(I, dtype=bool)
        chosen = []
        for mv in cand:
            _, kind, i, _ = mv
            span = slice(i, i + 1) if kind == 0 else slice(i, i + 2)
            if used[span].any():
                continue
            used[span] = True
            chosen.append(mv)
        new = _apply_moves(starts, chosen)
        new_cost = total(new)
        if new_cost >= cost - _TOL and len(chosen) > 1:
            new = _apply_moves(starts, chosen[:1])
            new_cost = total(new)
        if new_cost >= cost - _TOL:
            return starts
        # Carry the moves of the intervals (and pairs) that did not change.
        new_ends = np.append(new[1:], K)
        key_old = starts * (K + 1) + ends
        key_new = new * (K + 1) + new_ends
        old_idx = np.searchsorted(key_old, key_new)  # keys increase with the start
        old_idx = np.minimum(old_idx, I - 1)
        same = key_old[old_idx] == key_new
        n_new = new.shape[0]
        new_f = np.empty(n_new)
        new_f[same] = f_int[old_idx[same]]
        changed = np.flatnonzero(~same)
        new_f[changed] = _span_f(P, new[changed], new_ends[changed])
        pair_same = same[:-1] & same[1:]
        changed_pairs = np.flatnonzero(~pair_same)
        sg, sc, mg, rg, rc = evaluate(new, new_ends, new_f, changed, changed_pairs)
        n_split_g = np.empty(n_new)
        n_split_c = np.empty(n_new, dtype=np.intp)
        n_split_g[same], n_split_c[same] = split_g[old_idx[same]], split_c[old_idx[same]]
        n_split_g[changed], n_split_c[changed] = sg, sc
        ps = np.flatnonzero(pair_same)
        n_merge_g = np.empty(n_new - 1)
        n_recut_g = np.empty(n_new - 1)
        n_recut_c = np.empty(n_new - 1, dtype=np.intp)
        o = old_idx[ps]
        n_merge_g[ps], n_recut_g[ps], n_recut_c[ps] = merge_g[o], recut_g[o], recut_c[o]
        n_merge_g[changed_pairs], n_recut_g[changed_pairs] = mg, rg
        n_recut_c[changed_pairs] = rc
        starts, ends, f_int, cost = new, new_ends, new_f, new_cost
        if isinstance(cache, _Sides):
            cache.prune(starts, ends, owner)
        else:
            live = set(zip(starts.tolist(), ends.tolist()))
            live.update(zip(starts[:-1].tolist(), ends[1:].tolist()))
            for k in [k for k in cache if k not in live]:
                del cache[k]
        split_g, split_c, merge_g, recut_g, recut_c = (n_split_g, n_split_c, n_merge_g,
                                                       n_recut_g, n_recut_c)


def _two_starts(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Post-optimised partitions of C from greedy merging and top-down.

    The second start, top-down from one interval, is there because the
    moves cannot always leave greedy's local optimum (e.g. where three
    intervals must become one); splitting from the top takes few passes.
    On tables of more than ``_TOP_COARSE`` rows it splits the coarse table
    of the intervals greedy merging has left at ``_TOP_COARSE`` (or at its
    kept partition, if that has more) and its result is post-optimised on
    the whole table (:func:`_coarse_top_down`). On the compiled path that
    and the post-optimisation of greedy's result run in two threads (the
    compiled pricing of cuts releases the GIL); each only reads C and keeps
    its own state, so the results are those of running them one after the
    other.
    """
    global _JIT_WARM
    one = np.zeros(1, dtype=np.intp)
    K, J = C.shape
    compiled = _compiled(K)
    # Both post-optimisations price cuts of the same table, mostly of the
    # same spans (their results are close): one store of f per end serves
    # both (compiled path).
    if K <= _TOP_COARSE:
        sides = _Sides.of_table(C)
        local = _post_optimise(C, _greedy_starts(C, to_end=True), sides)
        top = _post_optimise(C, one, sides)
    elif not compiled:
        removed, steps = _greedy_path(C, to_end=True)
        kept = _kept_starts(K, removed, steps, True)
        return _post_optimise(C, kept), _coarse_top_down(C, removed, kept.shape[0])
    else:
        from concurrent.futures import Future, ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            # The prefix sums of the sides, meanwhile (numpy passes that
            # release the GIL; greedy merging does not need them).
            table_sides = pool.submit(_Sides.of_table, C)
            early: list[Future[tuple[np.ndarray, np.ndarray] | None]] = []

            def parts_merged(B: np.ndarray, offs: np.ndarray, rem: np.ndarray,
                             key: np.ndarray) -> None:
                # The coarse phase of the top-down start on a guess of its
                # table, while the parts' merges are interleaved (one core
                # is idle then); used only if the guess is the table.
                early.append(pool.submit(_early_coarse_split, C, B, offs, rem, key))

            removed, steps = _greedy_path(C, to_end=True, parts_merged=parts_merged)
            kept = _kept_starts(K, removed, steps, True)
            sides = table_sides.result()
            # (The early job, if any, was queued first: done when this one starts.)
            guessed = early[0].result if early else None
            future = pool.submit(_coarse_top_down, C, removed, kept.shape[0], sides, guessed)
            local = _post_optimise(C, kept, sides)
            top = future.result()
    if compiled and J == 2:
        _JIT_WARM = True  # the greedy kernel and the cut pricing are loaded
    return local, top


# The top-down start of tables of more than this many rows splits the
# intervals greedy merging has left at this many, not the rows (docs/modl.md,
# "Post-optimisation"): 16,384 intervals price ~60 times fewer cuts than a
# million rows and, on the tables measured, lead to the same or a better
# partition once post-optimised on the whole table.
_TOP_COARSE = 1 << 14


def _coarse_top_down(C: np.ndarray, removed: Sequence[int] | np.ndarray, n_kept: int,
                     sides: _Sides | None = None,
                     guessed: Callable[[], tuple[np.ndarray, np.ndarray] | None] | None = None
                     ) -> np.ndarray:
    """The top-down start on greedy's coarse intervals, then post-optimised on all rows of C.

    ``removed`` are greedy's merges to one interval in order, ``n_kept``
    the intervals of its kept partition. The coarse table is the state
    after the merges that leave max(``_TOP_COARSE``, ``n_kept``) intervals:
    a prefix of greedy's path, so its cuts are the boundaries greedy keeps
    longest. Post-optimisation from one interval runs on that table (its
    cuts can only be those boundaries), and its result, a partition of the
    rows of C, is post-optimised again with every row boundary as a cut
    (with ``sides``, C's :class:`_Sides`, maybe shared). ``guessed``, if
    given, returns (coarse table's first rows, :func:`_coarse_split` of
    them) computed ahead from a guess (:func:`_early_coarse_split`) or
    None; it is used when the guess is the coarse table, exactly.
    """
    K = C.shape[0]
    n0 = min(K, max(_TOP_COARSE, n_kept))
    coarse = _starts_after(K, removed, K - n0)
    early = guessed() if guessed is not None else None
    if early is not None and np.array_equal(early[0], coarse):
        start = early[1]
    else:
        start = _coarse_split(C, coarse)
    return _post_optimise(C, start, sides)


def _coarse_split(C: np.ndarray, coarse: np.ndarray) -> np.ndarray:
    """Post-optimisation from one interval of the table of intervals starting at ``coarse``.

    Its result as first rows of C (a subset of ``coarse``).
    """
    part = _post_optimise(np.add.reduceat(C, coarse, axis=0), np.zeros(1, dtype=np.intp))
    starts: np.ndarray = coarse[part]
    return starts


def _early_coarse_split(C: np.ndarray, B: np.ndarray, offs: np.ndarray, rem: np.ndarray,
                        key: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(guessed coarse table, its :func:`_coarse_split`) from the parts' merges, or None.

    The guess (:func:`_coarse_guess`) assumes that greedy leaves
    ``_TOP_COARSE`` intervals before any pair across two parts merges and
    that the kept partition has no more; :func:`_coarse_top_down` checks it
    against the path itself.
    """
    coarse = _coarse_guess(B, offs, rem, key, _TOP_COARSE)
    return None if coarse is None else (coarse, _coarse_split(C, coarse))


def _coarse_guess(B: np.ndarray, offs: np.ndarray, rem: np.ndarray, key: np.ndarray,
                  n0: int) -> np.ndarray | None:
    """First rows of the n0 intervals the parts' merges interleaved leave, or None if unsure.

    Part p (rows B[p]..B[p+1]-1) merged to one interval on its own; its
    merges are entries offs[p].. of ``rem`` (row removed, local to the
    part) and ``key`` (rounded gain). Interleaving takes the least of the
    parts' next merges (by gain, then left row) while no pair across two
    parts comes first (modl_jit.interleave). A merge larger than all
    earlier ones of its part *leads* a block: the merges after it, up to
    the next leader, are smaller, so once the leader is taken (the least of
    the parts' next merges) they are less than every other part's next
    merge and are taken right after it. The blocks are therefore taken in
    the order of their leaders, and a merge's place is set by its part's
    running maximum of gains: the first M = K - n0 merges are those whose
    running maximum is below the M-th least running maximum, and, among
    those equal to it, the first in their part (None when equal values
    lie in several parts: the order would need the left rows). A guess:
    whether a pair across parts merges before, the interleaving decides.
    """
    K, k = int(B[-1]), B.shape[0] - 1
    total = int(offs[-1])
    M = K - n0
    if M <= 0 or M > total:
        return None
    running = np.empty(total)
    for p in range(k):
        np.maximum.accumulate(key[offs[p]:offs[p + 1]], out=running[offs[p]:offs[p + 1]])
    level = np.partition(running, M - 1)[M - 1]
    taken = running < level
    short = M - int(np.count_nonzero(taken))
    if short > 0:
        at_level = np.flatnonzero(running == level)
        part = np.searchsorted(offs, at_level[[0, -1]], side="right") - 1
        if part[0] != part[1]:
            return None
        taken[at_level[:short]] = True
    alive = np.ones(K, dtype=bool)
    alive[(rem[:total] + np.repeat(B[:-1], np.diff(offs)))[taken]] = False
    return np.flatnonzero(alive)


def _table_cost(C: np.ndarray, starts: np.ndarray) -> float:
    return modl_cost(np.add.reduceat(C, starts, axis=0))


def _apply_moves(starts: np.ndarray, moves: list[tuple[float, int, int, int]]) -> np.ndarray:
    keep = np.ones(starts.shape[0], dtype=bool)
    add = []
    for _, kind, i, t in moves:
        if kind == 0:
            add.append(t)
        elif kind == 1:
            keep[i + 1] = False
        else:
            keep[i + 1] = False
            add.append(t)
    return np.sort(np.concatenate([starts[keep], np.asarray(add, dtype=np.intp)]))


# ----------------------------------------------------------------------------
# Exact re-partition of windows of consecutive intervals
# ----------------------------------------------------------------------------

# A window is this many consecutive intervals of the result; it is solved
# exactly when it spans at most _WINDOW_ROWS rows (docs/modl.md, "Greedy
# path", point 5, "Windows solved exactly"). On 20 tables of 1,000 rows with ~1,000 instances each,
# windows of 2 intervals reached the exact optimum on 3, of 3 on 18, of 4
# on all 20, where split/merge/merge-split moves alone reached it on 3.
_WINDOW_INTERVALS = 4
_WINDOW_ROWS = 1000


def _window_dp(P: list[np.ndarray], a: int, b: int, kmax: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Least sum of f over partitions of rows a..b-1 into k = 1..kmax intervals (numpy).

    F[k] = D_k(n), n = b - a, of D_1(v) = f(rows a..a+v-1), D_k(v) = min
    over u of D_{k-1}(u) + f(rows a+u..a+v-1) (the first least u), and
    S[k, :k] the first rows of that k-partition relative to a: as
    modl_jit.windows_dp2, bit for bit, for any number of classes.
    """
    return _windows_dp(P, [(a, b)], kmax)[0]


# Columns (ends v) per block of the numpy window DP: a block's values of t
# and its sums (<= 1,001 x 128 floats, 1 MiB each) stay in a core's L2
# cache while every k is taken on them; wider blocks measured slower, and
# narrower ones pay numpy's per-row cost on rows too short.
_DP_BLOCK = 128


def _windows_dp(P: list[np.ndarray], spans: list[tuple[int, int]], kmax: int
                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`_window_dp` of each span; consecutive spans share the f values of their common rows.

    One :class:`_WindowSolver` taking the spans in order.
    """
    if not spans:
        return []
    solver = _WindowSolver(P, max(b - a for a, b in spans))
    out = []
    for a, b in spans:
        F, Dp = solver.solve(a, b, kmax)
        km = F.shape[0] - 1
        S = np.zeros((km + 1, km), dtype=np.int64)
        for k in range(2, km + 1):
            S[k, :k] = _window_path(P, a, F, Dp, k)
        out.append((F, S))
    return out


class _WindowSolver:
    """The numpy window DP (:func:`_window_dp`) of spans given one at a time.

    The values t(u, v) = f(rows a+u..a+v-1) are kept by lag d = v - u and
    end v, in S[d, v] = t(v - d, v) (1 <= d <= v; other cells are +inf or
    some f value, never NaN). Along a row of S the class counts, so the
    log-gamma arguments, stay close and the memo is read in cache-sized
    stretches (along v at a fixed u they jump by a row's instances at
    each step: a cache miss per value on heavy rows). With
    T_{k-1}[d, v] = D_{k-1}(v - d) (+inf for v < d, a strided view),
    D_k(v) = min over d of S[d, v] + T_{k-1}[d, v]: the same sums as over
    u = v - d, so the same minima, a column-wise minimum of two arrays.
    Columns go in blocks of ``_DP_BLOCK``: a block's S is computed (its
    rows d < the block's end only: the triangle) and every k is taken on
    it while it is in cache; D_{k-1} is final below the block's end by
    then. As in the compiled kernel, a span that starts inside the
    previous one and ends at or after its end copies the values of the
    rows both hold and computes only the others (the previous S is the
    other of two buffers), whether it comes in the same call or the next:
    so the windows the refinement solves one by one as it goes, after a
    change, share with the window just changed.
    """

    def __init__(self, P: list[np.ndarray], widest: int = 0) -> None:
        self.P = P
        self.J = len(P)
        self.gJ = float(gammaln(self.J))
        self.W = 0
        self._room(widest + 1)

    def _room(self, w: int) -> None:
        """Buffers for spans of up to w - 1 rows (new ones share nothing with the span before)."""
        if w <= self.W:
            return
        W, B = w, min(_DP_BLOCK, w)
        self.W, self.B = W, B
        # +inf, then only ever f values: cells a span does not set are finite
        # or +inf, so a sum with T's +inf is +inf, not NaN.
        self.bufs = [np.full((W, W), np.inf), np.full((W, W), np.inf)]
        self.sums, self.xs, self.ys, self.zs = (np.empty((W, B)) for _ in range(4))
        self.ints = np.empty((self.J + 1, W, B), dtype=np.int64)
        self.prev: tuple[int, int, np.ndarray] = (0, -1, self.bufs[1])
        self.turn = 0

    def solve(self, a: int, b: int, kmax: int) -> tuple[np.ndarray, np.ndarray]:
        """(F, Dp) for rows a..b-1: F as :func:`_window_dp`'s, Dp[k, n + v] = D_k(v).

        The least k-partitions are read from them by :func:`_window_path`.
        """
        P, J, gJ = self.P, self.J, self.gJ
        n = b - a
        km = min(kmax, n)
        w = n + 1
        self._room(w)
        B, sums, xs_buf, ys_buf, zs_buf, ints = (self.B, self.sums, self.xs, self.ys, self.zs,
                                                  self.ints)
        S = self.bufs[self.turn][:w, :w]
        prev_a, prev_b, prev_S = self.prev
        shared = prev_b - a if prev_a <= a < prev_b <= b else 0
        if shared > 0:
            d0 = a - prev_a
            S[1:shared + 1, :shared + 1] = prev_S[1:shared + 1, d0:d0 + shared + 1]
        # The counts of rows a+v-d..a+v-1 plus 1, class j: front[j][v] - back[j][d, v];
        # front[J] - back[J]: their total plus J (the arguments of f's log-gammas).
        back, front = [], []
        total = np.zeros(n + w, dtype=np.int64)
        for p in P:
            q = np.empty(n + w, dtype=np.int64)
            q[:n] = int(p[a])  # v - d < 0: the cell is not read, any count does
            q[n:] = p[a:b + 1]
            total += q
            back.append(_lagged(q))
            front.append(q[n:] + 1)
        back.append(_lagged(total))
        front.append(total[n:] + J)
        memo = _memo_through(int(front[J][-1] - total[n]))
        # Dp[k, n + v] = D_k(v); +inf at v < k and at the pad (v < 0).
        Dp = np.full((km + 1, n + w), np.inf)
        T = [_lagged(Dp[k]) for k in range(km)]
        edges = [*range(0, shared + 1, B), shared + 1, *range(shared + 1 + B, w, B), w]
        for v0, v1 in zip(edges[:-1], edges[1:]):
            r, nb = v1 - 1, v1 - v0  # rows d = 1..v1-1 reach into the block
            if r < 1 or nb < 1:
                continue
            if v0 > shared:  # new values: f by modl._f2's / _f's operations
                idx = [np.subtract(front[j][v0:v1], back[j][1:v1, v0:v1], out=ints[j, :r, :nb])
                       for j in range(J + 1)]
                xs, ys, zs = xs_buf[:r, :nb], ys_buf[:r, :nb], zs_buf[:r, :nb]
                if memo is not None:
                    np.take(memo, idx[J], out=xs)
                    np.take(memo, idx[0], out=ys)
                    for j in range(1, J):
                        ys += np.take(memo, idx[j], out=zs)
                else:  # beyond the memo: the ufunc itself
                    xs[...] = gammaln(idx[J].astype(np.float64))
                    ys[...] = gammaln(idx[0].astype(np.float64))
                    for j in range(1, J):
                        ys += gammaln(idx[j].astype(np.float64))
                xs -= gJ
                np.subtract(xs, ys, out=S[1:v1, v0:v1])
            lo = max(v0, 1)
            Dp[1, n + lo:n + v1] = S[lo:v1, lo:v1].diagonal()  # D_1(v) = t(0, v)
            for k in range(2, km):
                rk = v1 - k  # D_{k-1}(v - d) is +inf for d > v - k + 1
                if rk < 1:
                    continue
                sm = np.add(S[1:rk + 1, v0:v1], T[k - 1][1:rk + 1, v0:v1], out=sums[:rk, :nb])
                np.min(sm, axis=0, out=Dp[k, n + v0:n + v1])
        F = np.full(km + 1, np.inf)
        F[1:km] = Dp[1:km, 2 * n]
        if km >= 2:  # the last k is read at v = n only (F, and the path's first step)
            F[km] = (S[1:n - km + 2, n] + Dp[km - 1, n + km - 1:2 * n][::-1]).min()
        else:
            F[km] = Dp[km, 2 * n]
        self.prev = (a, b, S)
        self.turn = 1 - self.turn
        return F, Dp


def _lagged(x: np.ndarray) -> np.ndarray:
    """L[d, v] = x[v - d] (a strided view) for x of length 2n + 1, its first n entries v - d < 0."""
    m = x.shape[0] // 2
    isz = x.itemsize
    return np.lib.stride_tricks.as_strided(x[m:], shape=(m + 1, m + 1), strides=(-isz, isz),
                                           writeable=False)


def _half_of_work(spans: list[tuple[int, int]]) -> int:
    """How many of the spans, from the first, hold half of the work (sum of n^2).

    Windows differ in rows, and a window's DP time goes as their square.
    """
    work = np.cumsum([(b - a) ** 2 for a, b in spans])
    return int(np.searchsorted(work, work[-1] / 2)) + 1


def _window_path(P: list[np.ndarray], a: int, F: np.ndarray, Dp: np.ndarray, k: int
                 ) -> np.ndarray:
    """First rows, relative to a, of the least k-partition that :meth:`_WindowSolver.solve` found.

    (F, Dp) is what it returned for rows a..a+n-1. At each step back the
    first u whose sum t(u, v) + D_{j-1}(u) equals D_j(v) (argmin's rule, as
    the compiled kernel); t is recomputed here by :func:`_span_f`, the same
    operations on the same integers as the solver's, so the same sums. Only
    the windows that change the partition need their paths, a few of them.
    """
    km = Dp.shape[0] - 1
    n = (Dp.shape[1] - 1) // 2
    first = np.zeros(k, dtype=np.int64)
    v = n
    for j in range(k, 1, -1):
        least = F[km] if j == km else Dp[j, n + v]
        us = np.arange(j - 1, v)
        row = _span_f(P, a + us, np.full(us.shape[0], a + v)) + Dp[j - 1, n + j - 1:n + v]
        v = j - 1 + int(np.flatnonzero(row == least)[0])
        first[j - 1] = v
    return first


def _first_rows(S: np.ndarray, k: int) -> np.ndarray:
    """S[k, :k]: the first rows of a window's least k-partition (modl_jit.windows_dp2's S of it)."""
    rows: np.ndarray = S[k, :k]
    return rows


def _refine_windows(C: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Re-partition windows of _WINDOW_INTERVALS consecutive intervals exactly, while that helps.

    For the window of intervals i..i+w-1 (rows a..b-1, at most _WINDOW_ROWS
    of them) the best partition of its rows into k <= w + 1 intervals, the
    rest fixed, minimises g(I - w + k) + F_k, F_k the least sum of f over
    its k-partitions (one DP, :func:`_window_dp`); it replaces the window's
    intervals when that lowers the criterion by more than _TOL. Windows
    are taken left to right and the passes repeat until one changes
    nothing: the result is then optimal against every such re-partition
    (and so against the split, merge and merge-split moves of any windows
    taken), with a cost never above the input's. F and S of a span are
    kept: a window whose rows did not change is not solved again when
    only I, so the prior, moved.
    """
    K, J = C.shape
    st = [int(x) for x in starts]
    w = min(_WINDOW_INTERVALS, len(st))
    ends = st[w:] + [K]
    spans = [(a, b) for a, b in zip(st, ends) if b - a <= _WINDOW_ROWS]
    if not spans:  # every window too wide (light rows): nothing to solve
        return np.asarray(starts, dtype=np.intp)
    N = int(C.sum())
    Pi = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(C, axis=0)])
    P = [Pi[:, j].astype(np.float64) for j in range(J)]
    kernels = _jit_kernels() if J == 2 and _compiled(K) else None
    # Per window: F, and the first rows (relative) of its least k-partition for a given k.
    Solved = list[tuple[np.ndarray, Callable[[int], np.ndarray]]]
    solve_all: Callable[[list[tuple[int, int]], int], Solved]
    if kernels is not None:
        from .modl_jit import windows_dp2

        memo = _shared_memo()
        side = min(_WINDOW_ROWS, K) + 1
        scratch: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # one pair per thread

        def solve_all(spans: list[tuple[int, int]], kmax: int) -> Solved:
            if not spans:
                return []
            bufs = scratch.setdefault(threading.get_ident(),
                                      (np.empty(side * side), np.empty(side * side)))
            lo = np.asarray([a for a, _ in spans], dtype=np.int64)
            hi = np.asarray([b for _, b in spans], dtype=np.int64)
            F, S = windows_dp2(P[0], P[1], lo, hi, kmax, memo, _MEMO_FILLED, *bufs)
            ks = np.minimum(kmax, hi - lo) + 1
            return [(F[i, :k], functools.partial(_first_rows, S[i])) for i, k in
                    enumerate(ks.tolist())]
    else:
        def solve_all(spans: list[tuple[int, int]], kmax: int) -> Solved:
            solver = _WindowSolver(P, max(b - a for a, b in spans))
            return [lazy_paths(a, *solver.solve(a, b, kmax)) for a, b in spans]

    def lazy_paths(a: int, F: np.ndarray, Dp: np.ndarray
                   ) -> tuple[np.ndarray, Callable[[int], np.ndarray]]:
        # numpy: a window's paths are found when it changes the partition only.
        return F, functools.partial(_window_path, P, a, F, Dp)

    # Compiled: the first pass's windows are solved up front in two threads,
    # each a run of consecutive windows (the DP reuses what neighbours
    # share; the kernel releases the GIL), and windows made by changes as
    # they come, a run of up to four at a time, also split in two. numpy:
    # the second half of the first pass is solved up front in a second
    # thread (numpy's large operations release the GIL), and this thread
    # solves every other window when the passes reach it, one at a time
    # with one solver, which shares f values with the window before: with
    # the window just changed, too (a run of the compiled kernel starts
    # afresh). Each solve only reads, so the results are those of solving
    # one after the other.
    from concurrent.futures import ThreadPoolExecutor

    main_solver = None if kernels is not None else _WindowSolver(P, max(b - a for a, b in spans))

    pool = ThreadPoolExecutor(1)

    def solve_in_two(spans: list[tuple[int, int]], kmax: int) -> Solved:
        if len(spans) < 2:
            return solve_all(spans, kmax)
        half = min(_half_of_work(spans), len(spans) - 1)
        other = pool.submit(solve_all, spans[half:], kmax)
        mine = solve_all(spans[:half], kmax)
        return mine + other.result()

    try:
        # Keyed by (a, b, kmax): the same rows make a window of fewer intervals
        # (fewer k tried) when the partition has fewer than _WINDOW_INTERVALS.
        solved: dict[tuple[int, int, int], tuple[np.ndarray, Callable[[int], np.ndarray]]] = {}
        # (numpy) the windows the second thread solves, in order, and its future
        later: list[tuple[int, int, int]] = []
        theirs = None
        if main_solver is None:
            solved.update(((a, b, w + 1), r) for (a, b), r in zip(spans, solve_in_two(spans,
                                                                                      w + 1)))
        else:
            half = _half_of_work(spans)
            later = [(a, b, w + 1) for a, b in spans[half:]]
            theirs = pool.submit(solve_all, spans[half:], w + 1)
        changed = True
        while changed:
            changed = False
            i = 0
            while True:
                I = len(st)
                w = min(_WINDOW_INTERVALS, I)
                if i + w > I:
                    break
                a = st[i]
                b = st[i + w] if i + w < I else K
                if b - a > _WINDOW_ROWS:
                    i += 1
                    continue
                if (a, b, w + 1) not in solved and theirs is not None and (a, b, w + 1) in later:
                    solved.update(zip(later, theirs.result()))
                    theirs = None
                if (a, b, w + 1) not in solved and main_solver is not None:
                    solved[(a, b, w + 1)] = lazy_paths(a, *main_solver.solve(a, b, w + 1))
                elif (a, b, w + 1) not in solved:
                    # After a change, the next windows are new too and share
                    # rows with this one: solved in the same run.
                    ahead = [(st[j], st[j + w] if j + w < I else K)
                             for j in range(i, min(i + _WINDOW_INTERVALS, I - w + 1))]
                    ahead = [(x, y) for x, y in ahead
                             if y - x <= _WINDOW_ROWS and (x, y, w + 1) not in solved]
                    solved.update(((x, y, w + 1), r)
                                  for (x, y), r in zip(ahead, solve_in_two(ahead, w + 1)))
                F, first_rows = solved[(a, b, w + 1)]
                ks = np.arange(1, F.shape[0])
                cost = np.asarray(_log_prior_intervals(N, I - w + ks)) + F[1:]
                k = int(np.argmin(cost)) + 1
                # The window's own intervals, f summed left to right as the DP sums them.
                cur_f = _span_f(P, np.asarray(st[i:i + w]), np.asarray(st[i + 1:i + w] + [b]))
                now = 0.0
                for v in cur_f.tolist():
                    now += v
                if float(cost[k - 1]) < float(_log_prior_intervals(N, I)) + now - _TOL:
                    st[i:i + w] = [a + int(x) for x in first_rows(k)]
                    changed = True
                i += 1
    finally:
        pool.shutdown()
    return np.asarray(st, dtype=np.intp)


# ----------------------------------------------------------------------------
# Public entry
# ----------------------------------------------------------------------------

def modl_partition(counts: np.ndarray, exact_max: int = 1000) -> ModlResult:
    """MODL discretisation of a count table: exact when small, greedy-or-better otherwise.

    Rows pure in one class that are adjacent and of the same class are first
    merged (never cut in some optimum, module docstring). If K, the number
    of rows left, is at most ``exact_max``, the dynamic programme returns an
    optimal partition (``exact=True``): its cost is the least over all
    2^(V-1) partitions of the V input rows, and where several partitions
    are optimal the one with fewest intervals, then leftmost cuts, is
    typically returned (ties are broken on floating-point values).

    Otherwise (``exact=False``) greedy bottom-up merging runs on to one
    interval, keeping the cheapest partition on its path, then
    post-optimisation with split, merge and merge-split moves until none
    lowers the cost by more than 1e-9; a second post-optimisation starts
    top-down from one interval (on tables of more than 16,384 rows it
    splits the 16,384 intervals greedy merging leaves, then goes on over
    all rows), and of the cheaper result every window of four consecutive
    intervals spanning at most 1,000 rows is re-partitioned exactly into
    at most five intervals (a dynamic programme on its rows), passes
    repeating while one lowers the cost by more than 1e-9.
    Guarantee: the cost is at most that of :func:`greedy_merge` on the
    *input rows* (plain greedy merging started from single distinct scores,
    gains rounded to 2^-33, leftmost pair on ties), up to rounding. When
    every input row is pure, greedy merging started from the pure runs is
    provably identical to it and is used; otherwise greedy merging starts
    from the single rows. Beyond it, the result is optimal against every
    re-partition of the windows solved (four consecutive intervals of at
    most 1,000 rows; none on tables whose intervals are wider); no global
    optimality is claimed for this path. Time is O(V log V) for
    the greedy phase (a heap; compiled with numba on tables of 20,000 rows or
    more when numba is importable, 2,000 once the kernels have run in the
    process, with the same result), O(V J) per
    post-optimisation pass, and O(n^2) per window of n rows.

    Parameters
    ----------
    counts : ndarray of int, shape (V, J)
        For V ascending distinct scores, rows of each of J classes; every
        row must hold at least one row of data. J is the number of columns,
        also when a class never occurs.
    exact_max : int
        Largest reduced table solved exactly; 0 forces the greedy path.

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
    return _partition(_check_counts(counts), exact_max)


def _partition(c: np.ndarray, exact_max: int = 1000) -> ModlResult:
    """:func:`modl_partition` of int64 counts already checked (callers that built them)."""
    V, J = c.shape
    run_starts, all_pure = _pure_run_starts(c)
    if J == 1 or V == 1:
        cuts, exact = np.zeros(1, dtype=np.intp), True
    elif run_starts.shape[0] <= exact_max:
        cuts, exact = run_starts[_exact_starts(np.add.reduceat(c, run_starts, axis=0))], True
    else:
        table, rows = ((np.add.reduceat(c, run_starts, axis=0), run_starts) if all_pure
                       else (c, np.arange(V)))
        local, top = _two_starts(table)
        if _table_cost(table, top) < _table_cost(table, local):
            local = top
        cuts, exact = rows[_refine_windows(table, local)], False
    cuts = np.asarray(cuts, dtype=np.intp)
    ic = np.add.reduceat(c, cuts, axis=0)
    return ModlResult(cuts, ic, modl_cost(ic), exact)


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
