"""The compiled half of MODL: greedy merging and span pricing on large tables (numba).

Two functions, the same algorithms as the Python reference in
:mod:`distcal.core.modl` (``_greedy_path_py`` and ``_span_f_py``), for tables of
thousands of rows where Python's per-merge overhead dominates. The
arithmetic is the reference's, step for step: log-gamma of integers below
``len(table)`` is read from the same table of ``math.lgamma`` values, larger
arguments use numba's ``math.lgamma`` (the C library's, which may differ
from scipy's ``gammaln`` in the last bits). Results therefore agree with the
Python path to rounding, not necessarily bit for bit; the tests hold the
costs equal within 1e-9 relative.

Nothing is cached on disk (``cache=False``): a disk cache would be written
next to this file, inside the installed package. A process compiles the
two functions once, on its first large MODL table (about two seconds).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=False)
def _lg(table: np.ndarray, x: int) -> float:
    if x < table.shape[0]:
        return table[x]
    return math.lgamma(float(x))


@njit(cache=False)
def _f(c: np.ndarray, table: np.ndarray, lg_j: float) -> float:
    """f of one row: lgamma(n+J) - lgamma(J) - sum_j lgamma(c_j+1), classes in ascending order."""
    J = c.shape[0]
    s = c.copy()
    for j in range(1, J):  # insertion sort: ascending order makes f a function of the multiset
        x, k = s[j], j
        while k > 0 and s[k - 1] > x:
            s[k] = s[k - 1]
            k -= 1
        s[k] = x
    n = 0
    acc = 0.0
    for j in range(J):
        n += s[j]
        acc = _lg(table, s[j] + 1) if j == 0 else acc + _lg(table, s[j] + 1)
    return _lg(table, n + J) - lg_j - acc


@njit(cache=False)
def _before(k1: float, l1: int, k2: float, l2: int) -> bool:
    return k1 < k2 or (k1 == k2 and l1 < l2)


@njit(cache=False)
def _push(key: np.ndarray, left: np.ndarray, end: np.ndarray, size: int,
          k: float, lf: int, e: int) -> int:
    i = size
    while i > 0:  # sift up
        p = (i - 1) >> 1
        if not _before(k, lf, key[p], left[p]):
            break
        key[i], left[i], end[i] = key[p], left[p], end[p]
        i = p
    key[i], left[i], end[i] = k, lf, e
    return size + 1


@njit(cache=False)
def _pop(key: np.ndarray, left: np.ndarray, end: np.ndarray, size: int) -> int:
    """Remove the root (read it before calling); returns the new size."""
    size -= 1
    k, lf, e = key[size], left[size], end[size]
    i = 0
    while True:  # sift the last entry down from the root
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _before(key[c + 1], left[c + 1], key[c], left[c]):
            c += 1
        if not _before(key[c], left[c], k, lf):
            break
        key[i], left[i], end[i] = key[c], left[c], end[c]
        i = c
    key[i], left[i], end[i] = k, lf, e
    return size


@njit(cache=False)
def greedy_path(C: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy bottom-up merging of the K rows of C down to one interval.

    Returns (left, right, gain), one entry per merge in order: the interval
    starting at row ``right`` was merged into its left neighbour starting at
    ``left``, which changed the sum of f by ``gain``. A heap of (gain, left
    row) with lazy invalidation: an entry stores the end of the pair and
    is stale once either interval has changed (then the pair's end moved).
    """
    K, J = C.shape
    lg_j = _lg(table, J)
    cnt = C.copy()
    f = np.empty(K)
    for i in range(K):
        f[i] = _f(cnt[i], table, lg_j)
    nxt = np.arange(1, K + 1)
    prv = np.arange(-1, K - 1)
    alive = np.ones(K, dtype=np.bool_)
    cap = 3 * K
    key = np.empty(cap)
    left = np.empty(cap, dtype=np.int64)
    end = np.empty(cap, dtype=np.int64)
    size = 0
    m = np.empty(J, dtype=np.int64)
    for i in range(K - 1):
        for j in range(J):
            m[j] = cnt[i, j] + cnt[i + 1, j]
        size = _push(key, left, end, size, _f(m, table, lg_j) - (f[i] + f[i + 1]), i, i + 2)
    out_l = np.empty(K - 1, dtype=np.int64)
    out_r = np.empty(K - 1, dtype=np.int64)
    out_g = np.empty(K - 1)
    done = 0
    while size > 0:
        g, L, E = key[0], left[0], end[0]
        size = _pop(key, left, end, size)
        if not alive[L]:
            continue
        R = nxt[L]
        if R >= K or nxt[R] != E:
            continue
        for j in range(J):
            cnt[L, j] += cnt[R, j]
        f[L] = _f(cnt[L], table, lg_j)
        alive[R] = False
        nxt[L] = nxt[R]
        if nxt[R] < K:
            prv[nxt[R]] = L
        out_l[done], out_r[done], out_g[done] = L, R, g
        done += 1
        p = prv[L]
        if p >= 0:
            for j in range(J):
                m[j] = cnt[p, j] + cnt[L, j]
            size = _push(key, left, end, size, _f(m, table, lg_j) - (f[p] + f[L]), p, nxt[L])
        q = nxt[L]
        if q < K:
            for j in range(J):
                m[j] = cnt[L, j] + cnt[q, j]
            size = _push(key, left, end, size, _f(m, table, lg_j) - (f[L] + f[q]), L, nxt[q])
    return out_l, out_r, out_g


@njit(cache=False)
def span_f(P: np.ndarray, u: np.ndarray, v: np.ndarray, table: np.ndarray) -> np.ndarray:
    """f of rows u[k]..v[k]-1 for each k, from the (K+1, J) prefix sums P (int64)."""
    J = P.shape[1]
    lg_j = _lg(table, J)
    out = np.empty(u.shape[0])
    c = np.empty(J, dtype=np.int64)
    for k in range(u.shape[0]):
        for j in range(J):
            c[j] = P[v[k], j] - P[u[k], j]
        out[k] = _f(c, table, lg_j)
    return out
