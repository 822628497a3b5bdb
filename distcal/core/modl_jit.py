"""Compiled (numba) kernel of MODL's greedy bottom-up merging.

Imported by :mod:`distcal.core.modl` only when numba is importable and a
table is large enough to repay loading it; otherwise the pure-Python loop
there runs. Spark executors never import this module (they only pre-merge
pure runs, in numpy), so numba is needed on the driver only.

The kernel makes exactly the merges of the Python loop, in the same order,
with bit-identical floating-point values (docs/modl.md, "Compiled greedy
merging"):

* f of a merged interval is computed with the same operations in the same
  order, and log-gamma by the same algorithm: CPython's ``math.lgamma`` is
  its own Lanczos routine, not the C library's ``lgamma`` (which numba's
  ``math.lgamma`` calls); :func:`_lgamma` evaluates that routine with the
  same constants and operations in the same order (tested equal on every
  integer up to 2^18 and on large ones);
* the priority is ``(rounded gain, left interval)`` compared as a float
  and an int: the Python heap's int key q(gain) is strictly increasing in
  the rounded gain (``-0.0`` and ``0.0`` share a key and compare equal as
  floats), so both orders agree;
* the queues differ (the Python loop's heap invalidates entries lazily,
  the kernel's is indexed and holds current entries only), but both take
  the least current pair at every step, and both merge a new pair at once
  when it is below every entry (the cascade shortcut).
"""

from __future__ import annotations

import math
from typing import Any

import llvmlite.binding
import numpy as np
from numba import njit, types
from numba.extending import get_cython_function_address

__all__ = ["f_from2", "f_to2", "first_gains2", "greedy_merges", "greedy_record", "interleave",
           "least_cut", "premerge2", "prior_shifts", "state_after", "windows_dp2"]

# scipy's own gammaln (the function behind the scipy.special.gammaln ufunc
# that the numpy post-optimisation uses), called from compiled code by name:
# a symbol registered with LLVM, unlike a ctypes pointer, lets numba cache
# the compiled kernels on disk. Its C signature is
# double (double x, int skip_dispatch).
llvmlite.binding.add_symbol(
    "distcal_scipy_gammaln",
    get_cython_function_address("scipy.special.cython_special", "gammaln"))
_gammaln: Any = types.ExternalFunction("distcal_scipy_gammaln",
                                       types.float64(types.float64, types.intc))

# The Lanczos approximation of CPython's math.lgamma: g and the 13 terms of
# the rational function (Boost's lanczos13m53 coefficients, as CPython's
# Modules/mathmodule.c lists them; the denominator is x(x+1)...(x+11)).
_LANCZOS_G = 6.024680040776729583740234375
_LANCZOS_NUM = np.array([
    23531376880.410759688572007674451636754734846804940,
    42919803642.649098768957899047001988850926355848959,
    35711959237.355668049440185451547166705960488635843,
    17921034426.037209699919755754458931112671403265390,
    6039542586.3520280050642916443072979210699388420708,
    1439720407.3117216736632230727949123939715485786772,
    248874557.86205415651146038641322942321632125127801,
    31426415.585400194380614231628318205362874684987640,
    2876370.6289353724412254090516208496135991145378768,
    186056.26539522349504029498971604569928220784236328,
    8071.6720023658162106380029022722506138218516325024,
    210.82427775157934587250973392071336271166969580291,
    2.5066282746310002701649081771338373386264310793408])
_LANCZOS_DEN = np.array([0.0, 39916800.0, 120543840.0, 150917976.0, 105258076.0, 45995730.0,
                         13339535.0, 2637558.0, 357423.0, 32670.0, 1925.0, 66.0, 1.0])


@njit(cache=True, nogil=True)
def _lgamma(x: float) -> float:
    """CPython's ``math.lgamma(x)`` for finite x >= 1, the same operations in the same order.

    log Gamma(x) = log(S(x)) - g + (x - 1/2) (log(x + g - 1/2) - 1), S the
    Lanczos sum num(x)/den(x): Horner's rule in x below 5, in 1/x from 5
    on, where the rescaled rational function avoids overflow.
    """
    if x == math.floor(x) and x <= 2.0:
        return 0.0  # lgamma(1) = lgamma(2) = 0
    num = 0.0
    den = 0.0
    if x < 5.0:
        for i in range(12, -1, -1):
            num = num * x + _LANCZOS_NUM[i]
            den = den * x + _LANCZOS_DEN[i]
    else:
        for i in range(13):
            num = num / x + _LANCZOS_NUM[i]
            den = den / x + _LANCZOS_DEN[i]
    r = math.log(num / den) - _LANCZOS_G
    r += (x - 0.5) * (math.log(x + _LANCZOS_G - 0.5) - 1.0)
    return r

# Rounding grid of the gains: modl._QUANT (the same constant; kept here so
# that this module does not import its caller).
_QUANT = 524288.0


# Columns of the record of an interval in the greedy kernel (one float64
# row, read also as int64): f of the interval, gain and f of the pair it
# starts (gain NaN while it starts none), next and previous interval, where
# that pair's entry is (its position in the heap, or -(q + 2) for rank q
# among the first entries, or -1: none), then its class counts.
_F_FV, _F_GAIN, _F_FPAIR, _F_NXT, _F_PRV, _F_POS, _F_CNT = range(7)
_LINE = 64  # bytes in a cache line


@njit(cache=True, nogil=True, inline="always")
def _before(k: float, s: float, k2: float, s2: float) -> bool:
    """Whether the entry (k, s) comes before (k2, s2): gain first, then the left interval."""
    return k < k2 or (k == k2 and s < s2)


# The heap of greedy merging is 4-ary: a pop, the frequent operation, walks
# half as many levels as in a binary heap, and the four children of a node
# are side by side (four 16-byte entries, one 64-byte cache line when the
# array is so aligned); on a heap of a million entries each level is a
# cache miss, which is what the pops cost. Entry i of the heap is row
# i + _OFF of H, so that children 4i+1..4i+4 start on a multiple of four.
# It is indexed: the entry of pair s sits at H row Ri[s, _F_POS] + _OFF
# (when that field is >= 0), so a pair whose gain changes is re-keyed in
# place and a pair that disappears is removed, and the heap never holds a
# stale entry. With
# lazy invalidation (kept by the Python loop) four pops in five took a
# stale entry on a part of 30,000 rows, each a walk down the heap; the
# position shares the interval's cache line, so keeping it costs no miss
# (the indexed kernel takes ~30% less time a merge on such parts).
_OFF = 3


@njit(cache=True, nogil=True, inline="always")
def _place(H: np.ndarray, Ri: np.ndarray, i: int, k: float, s: int) -> None:
    """Put entry (gain k, pair s) at position i of the heap, and record where it is."""
    H[i + _OFF, 0] = k
    H[i + _OFF, 1] = s
    Ri[s, _F_POS] = i


@njit(cache=True, nogil=True)
def _sift_up(H: np.ndarray, Ri: np.ndarray, i: int, k: float, s: int) -> None:
    """Place entry (k, s) at position i or above, moving down the parents it comes before."""
    while i > 0:
        parent = (i - 1) >> 2
        pk = H[parent + _OFF, 0]
        ps = H[parent + _OFF, 1]
        if pk < k or (pk == k and ps < s):
            break
        _place(H, Ri, i, pk, int(ps))
        i = parent
    _place(H, Ri, i, k, s)


@njit(cache=True, nogil=True)
def _sift_down(H: np.ndarray, Ri: np.ndarray, size: int, i: int, k: float, s: int) -> None:
    """Place entry (k, s) at position i or below, moving up the least children before it."""
    while True:
        c = 4 * i + 1
        if c >= size:
            break
        # The least of the (up to four) children, the first on ties.
        b = c
        bk = H[c + _OFF, 0]
        bs = H[c + _OFF, 1]
        if c + 3 < size:
            # A full node: a tournament of four, with selects where the loop
            # below branches (equal gains are common, and the branches'
            # mispredictions cost about 5% of the kernel's time).
            k1 = H[c + 1 + _OFF, 0]
            s1 = H[c + 1 + _OFF, 1]
            k2 = H[c + 2 + _OFF, 0]
            s2 = H[c + 2 + _OFF, 1]
            k3 = H[c + 3 + _OFF, 0]
            s3 = H[c + 3 + _OFF, 1]
            lt = (k1 < bk) | ((k1 == bk) & (s1 < bs))
            b = c + 1 if lt else c
            bk = k1 if lt else bk
            bs = s1 if lt else bs
            lt2 = (k3 < k2) | ((k3 == k2) & (s3 < s2))
            b2 = c + 3 if lt2 else c + 2
            k2 = k3 if lt2 else k2
            s2 = s3 if lt2 else s2
            lt = (k2 < bk) | ((k2 == bk) & (s2 < bs))
            b = b2 if lt else b
            bk = k2 if lt else bk
            bs = s2 if lt else bs
        else:
            for d in range(c + 1, size):
                dk = H[d + _OFF, 0]
                if dk < bk or (dk == bk and H[d + _OFF, 1] < bs):
                    b = d
                    bk = dk
                    bs = H[d + _OFF, 1]
        if k < bk or (k == bk and s < bs):
            break
        _place(H, Ri, i, bk, int(bs))
        i = b
    _place(H, Ri, i, k, s)


@njit(cache=True, nogil=True)
def _rekey(H: np.ndarray, Ri: np.ndarray, size: int, i: int, k: float, s: int) -> None:
    """Give the entry at position i (pair s) the gain k, and restore the heap order."""
    if i > 0 and _before(k, s, H[((i - 1) >> 2) + _OFF, 0], H[((i - 1) >> 2) + _OFF, 1]):
        _sift_up(H, Ri, i, k, s)
    else:
        _sift_down(H, Ri, size, i, k, s)


@njit(cache=True, nogil=True)
def _push(H: np.ndarray, Ri: np.ndarray, size: int, k: float, s: int) -> int:
    """Add entry (k, s) to the heap of ``size`` entries; returns the new size."""
    _sift_up(H, Ri, size, k, s)
    return size + 1


@njit(cache=True, nogil=True)
def _remove(H: np.ndarray, Ri: np.ndarray, size: int, i: int) -> int:
    """Remove the entry at position i (0: the least); returns the new size."""
    Ri[int(H[i + _OFF, 1]), _F_POS] = -1
    size -= 1
    if i < size:  # the last entry fills the hole, then moves up or down
        _rekey(H, Ri, size, i, H[size + _OFF, 0], int(H[size + _OFF, 1]))
    return size


# log-gamma of the integers below this many is tabulated once per process
# (:func:`_table`): early merges join small intervals, and CPython's
# Lanczos routine costs some 26 divisions. A table entry is the routine's
# value for the same argument, so nothing changes but the time.
_LG_TABLE = 1 << 16


@njit(cache=True, nogil=True)
def _lg(table: np.ndarray, m: int) -> float:
    """CPython's lgamma of the integer m >= 1, from the table when m is in it."""
    if m < table.shape[0]:
        return table[m]
    return _lgamma(float(m))


@njit(cache=True, nogil=True)
def _aligned_rows(n: int, w: int) -> np.ndarray:
    """An uninitialised (n, w) float64 array starting on a cache line (w = 8: one row a line)."""
    buf = np.empty(n * w + _LINE // 8)
    off = (-buf.ctypes.data % _LINE) // 8
    return buf[off:off + n * w].reshape((n, w))


@njit(cache=True, nogil=True)
def _merged_f(Ri: np.ndarray, s: int, t: int, J: int, lg_j: float, table: np.ndarray) -> float:
    """f of intervals s and t merged, as modl._greedy_loop2 (J = 2) and modl._greedy_loop do."""
    if J == 2:
        x = Ri[s, _F_CNT] + Ri[t, _F_CNT]
        y = Ri[s, _F_CNT + 1] + Ri[t, _F_CNT + 1]
        return _lg(table, x + y + 2) - _lg(table, x + 1) - _lg(table, y + 1)
    tot = 0
    acc = 0.0
    for j in range(J):
        x = Ri[s, _F_CNT + j] + Ri[t, _F_CNT + j]
        tot += x
        acc += _lg(table, x + 1)
    return _lg(table, tot + J) - lg_j - acc


def greedy_merges(C: np.ndarray, fv: np.ndarray, keys: np.ndarray, fpair: np.ndarray,
                  N: int, to_end: bool) -> tuple[np.ndarray, np.ndarray]:
    """Greedy merging of the K rows of C: (removed intervals, cost changes) in merge order.

    Parameters and returns as :func:`_greedy`, of which this returns the
    first two arrays. (Python wrappers around the one compiled loop: each
    compiled entry point costs seconds to compile on a fresh machine.)
    """
    none = np.empty(0, dtype=np.int64)
    out = _greedy(C, fv, keys, fpair, N, to_end, False, _table(), none, none, np.empty(0),
                  np.empty(0), none)
    return out[0], out[1]


def greedy_record(C: np.ndarray, fv: np.ndarray, keys: np.ndarray, fpair: np.ndarray, N: int,
                  rem: np.ndarray, left: np.ndarray, key: np.ndarray, delta: np.ndarray,
                  after: np.ndarray) -> None:
    """Greedy merging of one part of a table, to one interval, with what :func:`interleave` needs.

    Writes, for each of the K - 1 merges in order: the removed (right)
    interval, the left interval, the rounded gain (the priority),
    f(a+b) - f(a) - f(b) unrounded (the cost change without the prior term,
    which depends on the number of intervals of the whole table) and the
    interval after the merged one (K: none), into the five arrays given
    (slices of the whole table's: no copy to gather the parts). Indices are
    rows of C. N, the rows of the whole table, only sizes the log-gamma
    table.
    """
    _greedy(C, fv, keys, fpair, N, True, True, _table(), rem, left, key, delta, after)


# Digits of the radix sort in :func:`_stable_order`: 2,048 counters stay in L1.
_RADIX_BITS = 11


@njit(cache=True, nogil=True)
def _stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of rounded gains (:func:`_greedy`'s first entries).

    Written out because numba's stable argsort (a merge sort) took a fifth
    of the greedy kernel's time on the parts of a million-row table (2.0 ms
    for 30,000 keys), and no library sort runs inside a compiled loop:
    rounded gains are multiples of 2^-34 from -2^18 up (modl._quantise), so
    q = (k - min) * 2^34 is an exact integer that orders the keys as the
    floats do (equal floats, -0.0 and 0.0 included, give equal q); with
    the index in its low bits, ``q << b | i`` is a unique int64 key whose
    order is (gain, index), the stable order. An LSD radix sort of these
    keys, 11 bits a pass, takes 0.3 ms for the same 30,000 keys (few
    distinct gains: rows of few instances give few distinct pairs). Keys
    whose integers would not fit 63 bits (gains spread over 2^19 or more,
    or below -2^18) take the merge sort.
    """
    n = keys.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.int64)
    lo = keys.min()
    hi = keys.max()
    b = 1
    while (1 << b) < n:
        b += 1
    if not (lo >= -262144.0 and hi - lo < 524288.0
            and (hi - lo) * 17179869184.0 < 2.0 ** (62 - b)):
        return np.argsort(keys, kind="mergesort")
    mask = (1 << b) - 1
    a = np.empty(n, dtype=np.int64)
    top = 0
    for i in range(n):
        a[i] = (np.int64((keys[i] - lo) * 17179869184.0) << b) | i
        top = max(top, a[i])
    w = np.empty(n, dtype=np.int64)
    nb = 1 << _RADIX_BITS
    cnt = np.empty(nb, dtype=np.int64)
    shift = 0
    while shift < 63 and (top >> shift) > 0:
        cnt[:] = 0
        for i in range(n):
            cnt[(a[i] >> shift) & (nb - 1)] += 1
        acc = 0
        for d in range(nb):
            c = cnt[d]
            cnt[d] = acc
            acc += c
        for i in range(n):
            d = (a[i] >> shift) & (nb - 1)
            w[cnt[d]] = a[i]
            cnt[d] += 1
        a, w = w, a
        shift += _RADIX_BITS
    for i in range(n):
        a[i] &= mask
    return a


@njit(cache=True, nogil=True)
def _greedy(C: np.ndarray, fv: np.ndarray, keys: np.ndarray, fpair: np.ndarray,
            N: int, to_end: bool, rec: bool, table: np.ndarray, o_rem: np.ndarray,
            o_left: np.ndarray, o_key: np.ndarray, o_delta: np.ndarray, o_after: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Greedy merging of the K rows of C: (removed intervals, cost changes) in merge order.

    Parameters
    ----------
    C : int64 array (K, J)
        Class counts of the starting intervals (K >= 2).
    fv : float64 array (K,)
        f of each starting interval (overwritten).
    keys, fpair : float64 arrays (K - 1,)
        Rounded gain and f of the merged pair (s, s + 1) for each s.
    N : int
        Rows in all.
    to_end : bool
        Merge down to one interval; otherwise stop at the first merge with
        ``gain + log((I-1)/(N+I-1)) >= 0``.
    rec : bool
        Record a part's merges (:func:`greedy_record`) into ``o_rem``,
        ``o_left``, ``o_key``, ``o_delta``, ``o_after`` (K - 1 entries
        each; unused without it), merging to one interval.

    Returns
    -------
    removed : int64 array
        The right interval of each merge, in merge order (``o_rem`` with ``rec``).
    steps : float64 array
        The change of the criterion of each merge: f(a+b) - f(a) - f(b)
        + log((I-1)/(N+I-1)), unrounded (empty with ``rec``).
    left, key, delta, after : arrays
        The other records (``rec``), else the empty arrays given.
    """
    K, J = C.shape
    lg_j = _lgamma(float(J))
    # Everything about interval s is in row s of R (see _record): merges
    # happen all over the table in gain order, so each interval touched
    # costs a cache miss, one instead of one per array.
    W = _F_CNT + J
    R = _aligned_rows(K, W)
    Ri = R.view(np.int64)
    for s in range(K):
        R[s, _F_FV] = fv[s]
        Ri[s, _F_NXT] = s + 1
        Ri[s, _F_PRV] = s - 1
        Ri[s, _F_POS] = -1
        for j in range(J):
            Ri[s, _F_CNT + j] = C[s, j]
    for s in range(K - 1):
        R[s, _F_GAIN] = keys[s]
        R[s, _F_FPAIR] = fpair[s]
    R[K - 1, _F_GAIN] = np.nan  # the last interval starts no pair
    # The queue: the K - 1 first entries are not pushed: they are taken in
    # their sorted order (a stable sort by gain: ties by s), sequentially
    # from ``order``; the entry of rank q is marked ``dead`` as soon as its
    # pair's gain changes or the pair disappears (the pair's _F_POS field
    # holds -(q + 2) until then), and dead entries are skipped with a
    # sequential read, without touching the pair's row. The heap H holds an
    # entry for each pair whose gain a merge has set, with that gain, and
    # nothing else (it is indexed: see _OFF). So every pair has exactly one
    # current entry, in one of the two. The float compare orders (k, s) as
    # the Python heap's ints do. The least entry of the queue is the lesser
    # of the two heads.
    order = _stable_order(keys)
    skeys = keys[order]  # read in sequence: one random access less per first entry
    n0 = order.shape[0]
    ip = 0
    dead = np.zeros(n0, dtype=np.bool_)
    for q in range(n0):
        Ri[order[q], _F_POS] = -(q + 2)
    H = _aligned_rows(K + _OFF + 1, 2)
    size = 0
    steps = np.empty(0 if rec else K - 1)  # a part's steps are not returned
    # With ``rec``, the records go to the arrays given (K - 1 entries each).
    removed = o_rem if rec else np.empty(K - 1, dtype=np.int64)
    rec_left = o_left
    rec_key = o_key
    rec_delta = o_delta
    rec_after = o_after
    m = 0
    I = K
    pending = -1  # a pair known to be the least current one: merged without the queue
    while I > 1:
        if pending >= 0:
            s = pending
            pending = -1
        else:
            while ip < n0 and dead[ip]:
                ip += 1
            if ip < n0 and (size == 0 or _before(skeys[ip], order[ip], H[_OFF, 0], H[_OFF, 1])):
                s = order[ip]
                ip += 1
                Ri[s, _F_POS] = -1
            elif size > 0:
                s = int(H[_OFF, 1])
                size = _remove(H, Ri, size, 0)
            else:
                break
        # The same expression as the Python loop: (I-1)/(N+I-1) of two ints
        # exact as floats is the correctly rounded quotient in both. A part
        # (``rec``) merges to one interval and its steps are not returned:
        # no logarithm there (I is the part's, not the table's, anyway).
        shift = 0.0
        if not rec:
            shift = math.log((I - 1) / (N + I - 1))
            if R[s, _F_GAIN] + shift >= 0.0 and not to_end:
                break
        r = Ri[s, _F_NXT]
        fm = R[s, _F_FPAIR]
        removed[m] = r
        delta = fm - R[s, _F_FV] - R[r, _F_FV]
        # delta + shift rounds as the one expression fm - fv_s - fv_r + shift
        # (IEEE operations left to right; nothing is fused).
        if not rec:
            steps[m] = delta + shift
        else:
            rec_left[m] = s
            rec_key[m] = R[s, _F_GAIN]
            rec_delta[m] = delta
            rec_after[m] = Ri[r, _F_NXT]
        m += 1
        for j in range(J):
            Ri[s, _F_CNT + j] += Ri[r, _F_CNT + j]
        R[s, _F_FV] = fm
        pr = Ri[r, _F_POS]
        if pr <= -2:
            dead[-pr - 2] = True
        # r's heap entry, if any, stays until the new entries are placed:
        # the first one to push takes its slot (one sift instead of two);
        # sifts meanwhile keep its position in r's row.
        nr = Ri[r, _F_NXT]
        Ri[s, _F_NXT] = nr
        I -= 1
        p = Ri[s, _F_PRV]
        # The new gains: a pair already in the heap is re-keyed in place; of
        # the new entries, the lesser goes straight to the next merge if it
        # is below the queue's two heads (lower bounds of every current
        # entry; r's entry, still in the heap, is one too), as in the Python
        # loop; the others are pushed, the first into r's slot.
        bk = 0.0
        bs = -1
        if p >= 0:
            fp = _merged_f(Ri, p, s, J, lg_j, table)
            bk = (fp - R[p, _F_FV] - fm + _QUANT) - _QUANT
            R[p, _F_GAIN] = bk
            R[p, _F_FPAIR] = fp
            pp = Ri[p, _F_POS]
            if pp >= 0:
                _rekey(H, Ri, size, pp, bk, p)
            else:
                if pp <= -2:
                    dead[-pp - 2] = True
                    Ri[p, _F_POS] = -1
                bs = p
        if nr < K:
            Ri[nr, _F_PRV] = s
            fn = _merged_f(Ri, s, nr, J, lg_j, table)
            k = (fn - fm - R[nr, _F_FV] + _QUANT) - _QUANT
            R[s, _F_GAIN] = k
            R[s, _F_FPAIR] = fn
            if bs < 0:
                bk = k
                bs = s
            else:
                # Two new entries: the later one in (gain, pair) order is
                # pushed now, into r's slot if it has one.
                if _before(k, s, bk, bs):
                    k, s2, bk, bs = bk, bs, k, s
                else:
                    s2 = s
                pr = Ri[r, _F_POS]
                if pr >= 0:
                    Ri[r, _F_POS] = -1
                    _rekey(H, Ri, size, pr, k, s2)
                else:
                    size = _push(H, Ri, size, k, s2)
        else:
            R[s, _F_GAIN] = np.nan  # s is the last interval: no pair
        pr = Ri[r, _F_POS]
        if bs >= 0 and not ((size == 0 or _before(bk, bs, H[_OFF, 0], H[_OFF, 1]))
                            and (ip == n0 or _before(bk, bs, skeys[ip], order[ip]))):
            if pr >= 0:
                Ri[r, _F_POS] = -1
                _rekey(H, Ri, size, pr, bk, bs)
            else:
                size = _push(H, Ri, size, bk, bs)
        else:
            if pr >= 0:  # r's slot unused: removed
                size = _remove(H, Ri, size, pr)
            if bs >= 0:
                pending = bs
    return removed[:m], steps[:m], rec_left[:m], rec_key[:m], rec_delta[:m], rec_after[:m]


@njit(cache=True, nogil=True)
def _gl(memo: np.ndarray, x: float) -> float:
    """scipy's gammaln(x) of an integral float x >= 1, remembered in ``memo`` when x is in it.

    ``memo`` starts as NaN; an entry, once set, is gammaln's own value, so
    results are the same whether or not it was already there.
    """
    i = int(x)
    if i < memo.shape[0]:
        v = memo[i]
        if v != v:  # not computed yet
            v = _gammaln(x, 0)
            memo[i] = v
        return v
    return _gammaln(x, 0)


@njit(cache=True, nogil=True)
def _f2(a: float, b: float, g2: float, memo: np.ndarray) -> float:
    """modl._f2 of one pair of class counts: the same operations in the same order."""
    return (_gl(memo, a + b + 2.0) - g2) - (_gl(memo, a + 1.0) + _gl(memo, b + 1.0))


@njit(cache=True, nogil=True)
def premerge2(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """modl._premerge of a two-class count table: (merged rows, first and last row of each).

    Adjacent rows pure in the same class are merged (a row is pure in class
    0 when its class-1 count is 0, and vice versa); the same runs as
    modl._pure_run_starts and the same integer sums as numpy's reduceat,
    in one pass.
    """
    V = c.shape[0]
    merged = np.empty((V, 2), dtype=np.int64)
    first = np.empty(V, dtype=np.int64)
    last = np.empty(V, dtype=np.int64)
    n = 0
    for v in range(V):
        x = c[v, 0]
        y = c[v, 1]
        if n > 0 and ((y == 0 and c[v - 1, 1] == 0) or (x == 0 and c[v - 1, 0] == 0)):
            merged[n - 1, 0] += x
            merged[n - 1, 1] += y
            last[n - 1] = v
        else:
            merged[n, 0] = x
            merged[n, 1] = y
            first[n] = v
            last[n] = v
            n += 1
    return merged[:n].copy(), first[:n].copy(), last[:n].copy()


@njit(cache=True, nogil=True, inline="always")
def _gl_table(table: np.ndarray, x: float) -> float:
    """scipy's gammaln(x) of an integral float x >= 1, from ``table`` (its values) when in it."""
    i = int(x)
    if i < table.shape[0]:
        return table[i]
    return _gammaln(x, 0)


@njit(cache=True, nogil=True, inline="always")
def _f2_table(x: int, y: int, g2: float, table: np.ndarray) -> float:
    """modl._f2 of the class counts (x, y), with scipy's gammaln read from ``table``."""
    a = float(x)
    b = float(y)
    return (_gl_table(table, a + b + 2.0) - g2) - (_gl_table(table, a + 1.0)
                                                   + _gl_table(table, b + 1.0))


@njit(cache=True, nogil=True)
def first_gains2(C: np.ndarray, table: np.ndarray, lo: int, hi: int, f_row: np.ndarray,
                 f_pair: np.ndarray, keys: np.ndarray) -> None:
    """modl._f of rows lo..hi-1 and of the pairs they start in a two-class table; rounded gains.

    Writes f_row[lo:hi], and f_pair[s], keys[s] for s in lo..min(hi, K-1)-1:
    the same operations in the same order as numpy's (modl._f2, then
    modl._quantise(f_pair - f_row[:-1] - f_row[1:])), with scipy's gammaln
    of the integers in ``table`` (modl._gammaln_table) read from it as
    modl._gammaln_int does, so the values are numpy's bit for bit; in one
    pass instead of some twenty numpy passes over a million rows. Ranges
    may be filled by two threads at once: f of row hi, which the pair
    before it needs, is computed here again (the same value).
    """
    K = C.shape[0]
    g2 = _gammaln(2.0, 0)
    for s in range(lo, hi):
        f_row[s] = _f2_table(C[s, 0], C[s, 1], g2, table)
    for s in range(lo, min(hi, K - 1)):
        fp = _f2_table(C[s, 0] + C[s + 1, 0], C[s, 1] + C[s + 1, 1], g2, table)
        f_next = f_row[s + 1] if s + 1 < hi else _f2_table(C[s + 1, 0], C[s + 1, 1], g2, table)
        f_pair[s] = fp
        keys[s] = ((fp - f_row[s] - f_next) + _QUANT) - _QUANT


@njit(cache=True, nogil=True)
def _fill_memo(memo: np.ndarray, filled: np.ndarray, top: int) -> None:
    """Set memo[1..top] (top < its size) to scipy's gammaln where not yet set; raise the mark.

    ``filled[0]``: the memo is known filled from 1 up to it. Entries are set
    before the mark is raised, and only ever to gammaln's value, so a
    thread that reads the mark finds them set.
    """
    if filled[0] < top:
        for j in range(1, top + 1):
            if memo[j] != memo[j]:
                memo[j] = _gammaln(float(j), 0)
        filled[0] = max(filled[0], top)


@njit(cache=True, nogil=True)
def f_from2(P0: np.ndarray, P1: np.ndarray, u: int, t0: int, t1: int,
            memo: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """f of rows u..t-1 for t in [t0, t1), two classes, as modl._span_f(P, u, t).

    P0, P1 are the float prefix sums of the two class counts; ``memo`` keeps
    the log-gamma values computed (see :func:`_gl`), ``filled`` its mark
    (:func:`_fill_memo`). When the largest argument, at t1 - 1, is within
    the memo, the memo is filled up to it first and the loop is plain loads
    (a quarter less time than testing each value); otherwise values are
    looked up or computed one at a time. The same operations either way.
    """
    g2 = _gammaln(2.0, 0)
    a0 = P0[u]
    b0 = P1[u]
    n = max(t1 - t0, 0)
    out = np.empty(n)
    M = memo.shape[0]
    if n and int((P0[t1 - 1] - a0) + (P1[t1 - 1] - b0) + 2.0) < M:
        _fill_memo(memo, filled, int((P0[t1 - 1] - a0) + (P1[t1 - 1] - b0) + 2.0))
        for k in range(n):
            a = P0[t0 + k] - a0
            b = P1[t0 + k] - b0
            out[k] = (memo[int(a + b + 2.0)] - g2) - (memo[int(a + 1.0)] + memo[int(b + 1.0)])
        return out
    for k in range(n):
        a = P0[t0 + k] - a0
        b = P1[t0 + k] - b0
        # :func:`_f2` written out for the usual case, all three values in
        # the memo (a third of the time of the calls); the same operations.
        i1 = int(a + b + 2.0)
        i2 = int(a + 1.0)
        i3 = int(b + 1.0)
        if i1 < M:  # i2, i3 <= i1
            v1 = memo[i1]
            v2 = memo[i2]
            v3 = memo[i3]
            if v1 == v1 and v2 == v2 and v3 == v3:
                out[k] = (v1 - g2) - (v2 + v3)
                continue
        out[k] = _f2(a, b, g2, memo)
    return out


@njit(cache=True, nogil=True)
def f_to2(P0: np.ndarray, P1: np.ndarray, v: int, t0: int, t1: int,
          memo: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """f of rows t..v-1 for t in [t0, t1), two classes, as modl._span_f(P, t, v).

    As :func:`f_from2`; the largest argument is at t0.
    """
    g2 = _gammaln(2.0, 0)
    a1 = P0[v]
    b1 = P1[v]
    n = max(t1 - t0, 0)
    out = np.empty(n)
    M = memo.shape[0]
    if n and int((a1 - P0[t0]) + (b1 - P1[t0]) + 2.0) < M:
        _fill_memo(memo, filled, int((a1 - P0[t0]) + (b1 - P1[t0]) + 2.0))
        for k in range(n):
            a = a1 - P0[t0 + k]
            b = b1 - P1[t0 + k]
            out[k] = (memo[int(a + b + 2.0)] - g2) - (memo[int(a + 1.0)] + memo[int(b + 1.0)])
        return out
    for k in range(n):
        a = a1 - P0[t0 + k]
        b = b1 - P1[t0 + k]
        i1 = int(a + b + 2.0)  # as in f_from2
        i2 = int(a + 1.0)
        i3 = int(b + 1.0)
        if i1 < M:
            v1 = memo[i1]
            v2 = memo[i2]
            v3 = memo[i3]
            if v1 == v1 and v2 == v2 and v3 == v3:
                out[k] = (v1 - g2) - (v2 + v3)
                continue
        out[k] = _f2(a, b, g2, memo)
    return out


@njit(cache=True, nogil=True)
def least_cut(left: np.ndarray, right: np.ndarray, n: int, f_old: float) -> tuple[float, int]:
    """Least of (left[j] + right[m - n + j]) - f_old over j < n, and the first j reaching it.

    modl._best_cut's gains of one span from its two sides (m the length of
    ``right``): numpy's ``(a[:n] + b[m - n:]) - f_old`` then argmin, the
    same additions and subtraction, in one pass without temporaries. Eight
    values at a time: their least (no branch, so the loop vectorises) is
    compared with the best so far, and only a block that holds a smaller
    value is scanned again for the first one (2.5x faster on spans of
    2,000 to 200,000 cuts; the same value and index, ties to the first).
    """
    off = right.shape[0] - n
    best = np.inf
    at = 0
    j = 0
    while j + 8 <= n:
        m = (left[j] + right[off + j]) - f_old
        for i in range(1, 8):
            g = (left[j + i] + right[off + j + i]) - f_old
            m = g if g < m else m
        if m < best:
            for i in range(8):
                g = (left[j + i] + right[off + j + i]) - f_old
                if g < best:
                    best = g
                    at = j + i
        j += 8
    while j < n:
        g = (left[j] + right[off + j]) - f_old
        if g < best:
            best = g
            at = j
        j += 1
    return best, at


# ----------------------------------------------------------------------------
# Greedy merging in parts (docs/modl.md, "Greedy merging in parts")
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _lg_table() -> np.ndarray:
    """CPython's lgamma of the integers below _LG_TABLE (entry 0 is never read)."""
    table = np.empty(_LG_TABLE)
    table[0] = np.inf  # never used: every argument is at least 1
    for m in range(1, table.shape[0]):
        table[m] = _lgamma(float(m))
    return table


_TABLE: list[np.ndarray] = []


def _table() -> np.ndarray:
    """:func:`_lg_table`, computed once per process (a few ms; greedy in parts makes many calls).

    The kernels only read it. A race between two first calls computes the
    same values twice.
    """
    if not _TABLE:
        _TABLE.append(_lg_table())
    return _TABLE[0]


@njit(cache=True, nogil=True)
def _interval_f(P: np.ndarray, a: int, e: int, f_row: np.ndarray, f_pair: np.ndarray,
                lg_j: float, table: np.ndarray) -> float:
    """f of rows a..e-1 as the greedy kernel holds it for that interval, bit for bit.

    The kernel starts with numpy's values for single rows (``f_row``) and for
    pairs of rows (``f_pair``); an interval of two rows can only come from
    merging two single rows, so its f is that pair's. Every larger interval
    was made by a merge whose pair the kernel priced itself
    (:func:`_merged_f`, from the class counts: here prefix sums P).
    """
    n = e - a
    if n == 1:
        return f_row[a]
    if n == 2:
        return f_pair[a]
    J = P.shape[1]
    if J == 2:
        x = P[e, 0] - P[a, 0]
        y = P[e, 1] - P[a, 1]
        return _lg(table, x + y + 2) - _lg(table, x + 1) - _lg(table, y + 1)
    tot = 0
    acc = 0.0
    for j in range(J):
        x = P[e, j] - P[a, j]
        tot += x
        acc += _lg(table, x + 1)
    return _lg(table, tot + J) - lg_j - acc


@njit(cache=True, nogil=True)
def _pair(P: np.ndarray, a: int, m: int, e: int, f_row: np.ndarray, f_pair: np.ndarray,
          keys: np.ndarray, lg_j: float, table: np.ndarray) -> tuple[float, float]:
    """(rounded gain, f merged) of the pair of intervals a..m-1 and m..e-1, as the kernel has it."""
    if e - a == 2:
        return keys[a], f_pair[a]  # two single rows: the starting pair, from numpy
    fp = _interval_f(P, a, e, f_row, f_pair, lg_j, table)
    fl = _interval_f(P, a, m, f_row, f_pair, lg_j, table)
    fr = _interval_f(P, m, e, f_row, f_pair, lg_j, table)
    return (fp - fl - fr + _QUANT) - _QUANT, fp


def state_after(starts: np.ndarray, P: np.ndarray, f_row: np.ndarray, f_pair: np.ndarray,
                keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """modl._state_after: the greedy kernel's inputs for the intervals that begin at ``starts``."""
    out: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = _state_after(
        starts, P, f_row, f_pair, keys, _table())
    return out


@njit(cache=True, nogil=True)
def _state_after(starts: np.ndarray, P: np.ndarray, f_row: np.ndarray, f_pair: np.ndarray,
                 keys: np.ndarray, table: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(class counts, f, rounded gain and f merged of the pair) as the kernel holds them."""
    n = starts.shape[0]
    K = P.shape[0] - 1
    J = P.shape[1]
    lg_j = _lgamma(float(J))
    counts = np.empty((n, J), dtype=np.int64)
    fv = np.empty(n)
    gains = np.empty(max(n - 1, 0))
    merged = np.empty(max(n - 1, 0))
    for i in range(n):
        a = starts[i]
        e = starts[i + 1] if i + 1 < n else K
        for j in range(J):
            counts[i, j] = P[e, j] - P[a, j]
        fv[i] = _interval_f(P, a, e, f_row, f_pair, lg_j, table)
    for i in range(n - 1):
        a = starts[i]
        e = starts[i + 2] if i + 2 < n else K
        if e - a == 2:  # two single rows: the starting pair
            gains[i] = keys[a]
            merged[i] = f_pair[a]
        else:
            fp = _interval_f(P, a, e, f_row, f_pair, lg_j, table)
            gains[i] = (fp - fv[i] - fv[i + 1] + _QUANT) - _QUANT
            merged[i] = fp
    return counts, fv, gains, merged


# No candidate: after every (gain, left row) with a finite gain.
_NONE = 1 << 62


@njit(cache=True, nogil=True, inline="always")
def _head(p: int, ptr: np.ndarray, offs: np.ndarray, key: np.ndarray, left: np.ndarray,
          B: np.ndarray, ck: np.ndarray, cs: np.ndarray) -> None:
    """Set candidate p to part p's next merge, or to (inf, _NONE) if it has none left."""
    i = ptr[p]
    if i < offs[p + 1]:
        ck[p] = key[i]
        cs[p] = left[i] + B[p]
    else:
        ck[p] = np.inf
        cs[p] = _NONE


@njit(cache=True, nogil=True, inline="always")
def _replay(tree: np.ndarray, L: int, c: int, ck: np.ndarray, cs: np.ndarray) -> None:
    """Candidate c changed: recompute the winners on its path to the root of the tournament.

    tree[L + c] is leaf c (the candidate itself; -1 pads); node n holds the
    lesser (gain, left row) of its two children's winners.
    """
    n = (L + c) >> 1
    while n >= 1:
        a = tree[2 * n]
        b = tree[2 * n + 1]
        if a < 0 or (b >= 0 and _before(ck[b], cs[b], ck[a], cs[a])):
            a = b
        tree[n] = a
        n >>= 1


def interleave(B: np.ndarray, offs: np.ndarray, rem: np.ndarray, left: np.ndarray,
               key: np.ndarray, delta: np.ndarray, after: np.ndarray, P: np.ndarray,
               f_row: np.ndarray, f_pair: np.ndarray, keys: np.ndarray, N: int, to_end: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """:func:`_interleave` with the log-gamma table.

    Merging to the end, the prior's change log((I-1)/(N+I-1)) of each step
    is computed in a second thread while the merges are interleaved (the
    other core is idle then; a logarithm a merge was a fifth of the loop's
    time) and added afterwards: the same two float64 values added, so the
    same steps.
    """
    if not to_end:  # the stopping test needs each shift as it goes
        out: tuple[np.ndarray, np.ndarray, np.ndarray, bool] = _interleave(
            B, offs, rem, left, key, delta, after, P, f_row, f_pair, keys, N, False, _table(),
            True)
        return out
    from concurrent.futures import ThreadPoolExecutor

    K = int(B[-1])
    with ThreadPoolExecutor(1) as pool:
        shifts = pool.submit(prior_shifts, N, K)
        removed, raw, used, crossed = _interleave(
            B, offs, rem, left, key, delta, after, P, f_row, f_pair, keys, N, True, _table(),
            False)
        shift = shifts.result()
    m = raw.shape[0]
    return removed, raw + shift[K - m + 1:K + 1][::-1], used, crossed  # I = K, K-1, ...


@njit(cache=True, nogil=True)
def prior_shifts(N: int, K: int) -> np.ndarray:
    """out[I] = log((I-1)/(N+I-1)) for I = 2..K: the prior's change when I intervals become I-1.

    The kernels' own expression (math.log of the correctly rounded
    quotient), so the values are theirs.
    """
    out = np.full(K + 1, np.nan)
    for I in range(2, K + 1):
        out[I] = math.log((I - 1) / (N + I - 1))
    return out


@njit(cache=True, nogil=True)
def _interleave(B: np.ndarray, offs: np.ndarray, rem: np.ndarray, left: np.ndarray,
                key: np.ndarray, delta: np.ndarray, after: np.ndarray, P: np.ndarray,
                f_row: np.ndarray, f_pair: np.ndarray, keys: np.ndarray, N: int, to_end: bool,
                table: np.ndarray, shifted: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """The merges of greedy over the whole table, from the merges of its parts, up to a crossing.

    Part p holds rows B[p]..B[p+1]-1; its merges (:func:`greedy_record`,
    indices local to the part) are entries offs[p]..offs[p+1]-1 of the
    other arrays. Until a pair across a boundary between parts merges, the
    whole table's next merge is the least (gain, left interval) among the
    parts' next merges and the pairs across the boundaries: each part's
    state is the one its own greedy run had after the same merges, so its
    next merge is the least of its pairs. The crossing pairs are priced as
    the kernel would price them. Stops at the first crossing merge
    (``crossed``), at one interval, or (without ``to_end``) where plain
    greedy stops.

    Without ``shifted`` (merging to the end only), steps are f(a+b) -
    f(a) - f(b) without the prior's change, which :func:`interleave` adds.

    Returns
    -------
    removed, steps : arrays
        As :func:`greedy_merges` for the merges made, row indices of the table.
    used : int64 array (parts,)
        How many of each part's merges were made.
    crossed : bool
        Whether a crossing pair is the next merge (greedy goes on from the
        state left: modl._state_after).
    """
    k = B.shape[0] - 1
    K = B[k]
    J = P.shape[1]
    lg_j = _lgamma(float(J))
    ptr = offs[:k].copy()
    # The candidates, (gain, left row) side by side: 0..k-1 the next merge of
    # each part ((inf, _NONE) once a part has none left), k + q the pair
    # across boundary q (before row B[q+1]), whose left interval, the last
    # of part q, starts at cs[k + q]; the first of part q+1 ends at re[q].
    n_c = 2 * k - 1
    ck = np.empty(n_c)
    cs = np.empty(n_c, dtype=np.int64)
    re = np.empty(max(k - 1, 0), dtype=np.int64)
    for p in range(k):
        _head(p, ptr, offs, key, left, B, ck, cs)
    for q in range(k - 1):
        cs[k + q] = B[q + 1] - 1
        re[q] = B[q + 1] + 1
        ck[k + q] = _pair(P, cs[k + q], B[q + 1], re[q], f_row, f_pair, keys, lg_j, table)[0]
    # The least candidate is kept by a tournament tree (a winner tree over
    # the candidates): a merge changes one part's candidate and at most two
    # crossing pairs, each replayed in log2(2k) steps, where a scan of all
    # 2k - 1 candidates per merge made many small parts slower than a few
    # large ones (measured: 256 parts took seven times as long to interleave).
    L = 1
    while L < n_c:
        L *= 2
    tree = np.full(2 * L, -1, dtype=np.int64)
    tree[L:L + n_c] = np.arange(n_c)
    # The rule of _replay, written out: routed through one shared inlined
    # helper, numba's code for the merge loop took twice as long (measured).
    for n in range(L - 1, 0, -1):
        a = tree[2 * n]
        b = tree[2 * n + 1]
        if a < 0 or (b >= 0 and _before(ck[b], cs[b], ck[a], cs[a])):
            a = b
        tree[n] = a
    removed = np.empty(K - 1, dtype=np.int64)
    steps = np.empty(K - 1)
    m = 0
    I = K
    crossed = False
    while I > 1:
        who = tree[1]
        if ck[who] == np.inf:  # every part done and no pair across (one part)
            break
        if who >= k:
            crossed = True
            break
        # Part p holds the least candidate. Its following merges are the
        # table's next ones for as long as each comes before every other
        # candidate: take them in a run, against the runner-up (the tree's
        # winner with p's leaf out), replaying only where a pair across
        # changes. A part's merges come in runs of several (its gains rise
        # by steps: a run of one part's merges below its largest so far is
        # taken at once), so this replays the tree a few times less often
        # than once a merge.
        p = who
        ck[p] = np.inf
        cs[p] = _NONE
        _replay(tree, L, p, ck, cs)
        ru = tree[1]
        stop = False
        while I > 1:
            i = ptr[p]
            if i == offs[p + 1]:
                break
            bk = key[i]
            bs = left[i] + B[p]
            if not _before(bk, bs, ck[ru], cs[ru]):
                break
            shift = 0.0
            if shifted:
                shift = math.log((I - 1) / (N + I - 1))
                if bk + shift >= 0.0 and not to_end:
                    stop = True
                    break
            ptr[p] += 1
            r = rem[i] + B[p]
            removed[m] = r
            steps[m] = delta[i] + shift if shifted else delta[i]
            m += 1
            I -= 1
            if p < k - 1 and r == cs[k + p]:  # the last interval of part p grew leftwards
                cs[k + p] = bs
                ck[k + p] = _pair(P, bs, B[p + 1], re[p], f_row, f_pair, keys, lg_j, table)[0]
                _replay(tree, L, k + p, ck, cs)
                ru = tree[1]
            if p > 0 and bs == B[p]:  # the first interval of part p grew rightwards
                re[p - 1] = after[i] + B[p]
                ck[k + p - 1] = _pair(P, cs[k + p - 1], B[p], re[p - 1], f_row, f_pair, keys,
                                      lg_j, table)[0]
                _replay(tree, L, k + p - 1, ck, cs)
                ru = tree[1]
        _head(p, ptr, offs, key, left, B, ck, cs)
        _replay(tree, L, p, ck, cs)
        if stop:
            break
    return removed[:m], steps[:m], ptr - offs[:k], crossed


# ----------------------------------------------------------------------------
# Exact re-partition of a window of rows (modl._refine_windows)
# ----------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def windows_dp2(P0: np.ndarray, P1: np.ndarray, lo: np.ndarray, hi: np.ndarray, kmax: int,
                memo: np.ndarray, filled: np.ndarray, buf_a: np.ndarray, buf_b: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Least sum of f over partitions of rows lo[i]..hi[i]-1 into k = 1..kmax intervals; J = 2.

    For each span i, the dynamic programme of modl._window_dp (its numpy
    twin, which this matches bit for bit): with t(u, v) = f(rows u..v-1)
    by modl._f2's operations (log-gamma values from ``memo``: scipy's
    gammaln), D_1(v) = t(lo, v), D_k(v) = min over u of t(u, v) +
    D_{k-1}(u), the first least u on ties. Returns F (spans, kmax + 1),
    F[i, k] = D_k(hi[i]) (F[i, 0] and k beyond the span's rows: inf), and
    S (spans, kmax + 1, kmax), S[i, k, :k] the first rows of an optimal
    k-partition, relative to lo[i].

    Spans come in order of lo and hi (consecutive windows overlap): the
    values t(u, v) of the previous span's rows that the next one shares
    are copied, not recomputed (about half of them for windows of four
    intervals taken one interval apart). ``buf_a``, ``buf_b``: scratch of
    (longest span + 1)^2 floats each; ``filled[0]``: the memo is known
    filled from 1 up to it (raised here).
    """
    g2 = _gammaln(2.0, 0)
    m = lo.shape[0]
    F = np.full((m, kmax + 1), np.inf)
    S = np.zeros((m, kmax + 1, kmax), dtype=np.int64)
    # The largest argument of log-gamma in any span: once the memo is
    # filled up to it, plain loads, no test or call per value, let the
    # loads overlap (9x faster on heavy rows, whose arguments spread over
    # MiBs). Entries are set before the mark is raised, and only ever to
    # gammaln's value, so a thread that reads the mark finds them set.
    M = memo.shape[0]
    tops = np.empty(m, dtype=np.int64)
    top = 0
    for i in range(m):
        tops[i] = int((P0[hi[i]] - P0[lo[i]]) + (P1[hi[i]] - P1[lo[i]]) + 2.0)
        if tops[i] < M:  # spans beyond the memo take the checked path
            top = max(top, tops[i])
    _fill_memo(memo, filled, top)
    prev_lo = 0
    prev_hi = -1  # no previous span
    cur = buf_a
    old = buf_b
    for i in range(m):
        a = lo[i]
        n = hi[i] - a
        km = min(kmax, n)
        T = cur[:(n + 1) * (n + 1)].reshape((n + 1, n + 1))
        # T[u, v] = t(a+u, a+v) for u < v; rows u are contiguous in v.
        shared = min(prev_hi - a, n) if prev_hi >= a and a >= prev_lo else 0
        if shared > 0:
            pn = prev_hi - prev_lo
            To = old[:(pn + 1) * (pn + 1)].reshape((pn + 1, pn + 1))
            d = a - prev_lo
            for u in range(shared):
                for v in range(u + 1, shared + 1):
                    T[u, v] = To[u + d, v + d]
        fast = tops[i] < M
        for u in range(n):
            x0 = P0[a + u]
            y0 = P1[a + u]
            first = max(u + 1, shared + 1) if u < shared else u + 1
            if fast:
                for v in range(first, n + 1):
                    x = P0[a + v] - x0
                    y = P1[a + v] - y0
                    T[u, v] = ((memo[int(x + y + 2.0)] - g2)
                               - (memo[int(x + 1.0)] + memo[int(y + 1.0)]))
            else:
                for v in range(first, n + 1):
                    T[u, v] = _f2(P0[a + v] - x0, P1[a + v] - y0, g2, memo)
        # D[k, v] = D_k(v), rows u taken in order: D_{k-1}(u) is final once
        # every u' < u has been taken. Only the least values are kept (a
        # plain minimum, which vectorises); the path is found afterwards,
        # taking at each step the first u whose sum equals the minimum:
        # the first least u, argmin's rule, as in the numpy twin.
        D = np.full((km + 1, n + 1), np.inf)
        for v in range(1, n + 1):
            D[1, v] = T[0, v]
        # The last k is read at v = n only (F, and the path's first step).
        for u in range(1, n):
            t = T[u]
            for k in range(2, min(km - 1, u + 1) + 1):
                du = D[k - 1, u]
                Dk = D[k]
                for v in range(u + 1, n + 1):
                    Dk[v] = min(Dk[v], t[v] + du)
            if km >= 2 and u >= km - 1:
                D[km, n] = min(D[km, n], t[n] + D[km - 1, u])
        for k in range(1, km + 1):
            F[i, k] = D[k, n]
        for k in range(2, km + 1):
            v = n
            for j in range(k, 1, -1):
                u = j - 1
                while T[u, v] + D[j - 1, u] != D[j, v]:
                    u += 1
                v = u
                S[i, k, j - 1] = v
        prev_lo = a
        prev_hi = hi[i]
        cur, old = old, cur
    return F, S
