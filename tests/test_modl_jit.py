"""The compiled MODL kernels (distcal.core.modl_jit) against the pure-Python path they replace.

The pure-Python greedy loop and the numpy post-optimisation are the
reference (themselves checked against brute force, a plain dynamic
programme and an O(V^2) greedy in tests/test_modl.py). The compiled path
must make the very same merges and moves: equal arrays, equal floats, not
approximately equal ones. Both paths run in the same test on the same
table; the compiled one is forced on small tables by lowering the size
threshold, the Python one by hiding numba.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit
from scipy.special import gammaln
from test_modl import make_counts, plain_greedy, plain_greedy_path

from distcal.core import modl, modl_jit


@pytest.fixture
def jit_always(monkeypatch):
    """The compiled kernels for every table, however small."""
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)


def mixed_table(rng: np.random.Generator, V: int, J: int, kind: str) -> np.ndarray:
    """Rows of several instances each: nearly every row mixed, many equal gains ('ties')."""
    if kind == "ties":
        return make_counts(rng, V, J, "ties")
    if kind == "noise":
        return make_counts(rng, V, J, "noise")
    # 'heavy': ~10 rows per distinct score with a smooth signal, as the 1e6 benchmark.
    s = np.sort(rng.random(V))
    p = np.stack([s ** (2 * j + 1) for j in range(J)], axis=1)
    p /= p.sum(axis=1, keepdims=True)
    return np.stack([rng.multinomial(int(n), q) for n, q in zip(rng.integers(1, 20, V), p)])


def python_and_jit_merges(C: np.ndarray, to_end: bool):
    K = C.shape[0]
    f_row = modl._f(C)
    f_pair = modl._f(C[:-1] + C[1:])
    keys = modl._quantise(f_pair - f_row[:-1] - f_row[1:])
    N = int(C.sum())
    py = modl._greedy_merges(C, f_row, f_pair, keys, N, to_end, None)
    jit = modl._greedy_merges(C, f_row, f_pair, keys, N, to_end, modl_jit.greedy_merges)
    assert len(py[0]) <= K - 1
    return py, jit


# ----------------------------------------------------------------------------
# The primitives are bit-identical
# ----------------------------------------------------------------------------


@njit(cache=True)
def _lgammas(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = modl_jit._lgamma(x[i])
    return out


@njit(cache=True)
def _scipy_gammalns(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = modl_jit._gammaln(x[i], 0)
    return out


def _integer_arguments() -> np.ndarray:
    """Every integer up to 2^18 (the greedy kernel tabulates those below 2^16); some to 2^45."""
    rng = np.random.default_rng(0)
    return np.concatenate([np.arange(1.0, 2.0**18 + 1), rng.integers(1, 2**45, 100_000)
                           .astype(np.float64)])


def test_compiled_lgamma_is_cpython_math_lgamma():
    """The Python loop uses math.lgamma; the kernel its own copy of CPython's algorithm."""
    x = _integer_arguments()
    expected = np.fromiter(map(math.lgamma, x.tolist()), dtype=np.float64, count=x.shape[0])
    assert np.array_equal(_lgammas(x), expected)


def test_compiled_gammaln_is_scipys_ufunc():
    """The post-optimisation kernel calls scipy's gammaln by address: equal to the ufunc."""
    x = np.concatenate([_integer_arguments(), np.random.default_rng(1).random(1000) * 50])
    assert np.array_equal(_scipy_gammalns(x), gammaln(x))


def test_shared_sides_keep_the_ends_of_every_user():
    """Two post-optimisations sharing one _Sides: an end is forgotten only when neither uses it."""
    C = mixed_table(np.random.default_rng(5), 600, 2, "heavy")
    P = [np.concatenate(([0.0], np.cumsum(C[:, j]).astype(np.float64))) for j in range(2)]
    sides = modl._Sides(P, modl_jit.f_from2, modl_jit.f_to2)
    one, two = object(), object()
    for lo, hi in ((0, 200), (200, 600), (0, 350), (350, 600)):
        sides.sides(lo, hi)
    sides.prune(np.array([0, 200]), np.array([200, 600]), one)
    assert sorted(sides.left) == [0, 200] and sorted(sides.right) == [200, 600]
    sides.sides(350, 600)  # the other user's interval, priced again
    sides.prune(np.array([0, 350]), np.array([350, 600]), two)
    assert sorted(sides.left) == [0, 200, 350] and sorted(sides.right) == [200, 600]
    sides.prune(np.array([0, 350]), np.array([350, 600]), one)  # both on the same ends now
    assert sorted(sides.left) == [0, 350] and sorted(sides.right) == [600]
    # The values kept are f of the spans, whoever stored them.
    a, b = sides.sides(0, 350)
    t = np.arange(1, 350)
    assert np.array_equal(a[:349], modl._span_f(P, np.zeros_like(t), t))
    assert np.array_equal(b[b.shape[0] - 349:], modl._span_f(P, t, np.full_like(t, 350)))


@pytest.mark.parametrize("seed", range(4))
def test_premerge_compiled_equals_numpy(monkeypatch, seed):
    """Pure runs merged in one compiled pass (a warm process) against numpy's, with scores."""
    rng = np.random.default_rng(seed)
    V = 5000
    C = rng.integers(0, 3, (V, 2)) * (rng.random((V, 1)) < 0.6)  # pure runs and mixed rows
    C[C.sum(axis=1) == 0] = [[0, 1]]
    scores = np.sort(rng.random(V))
    monkeypatch.setattr(modl, "_JIT_WARM", False)
    want = modl._premerge(C.astype(np.int64), scores)
    plain = modl._premerge(C.astype(np.int64))
    monkeypatch.setattr(modl, "_JIT_WARM", True)
    got = modl._premerge(C.astype(np.int64), scores)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert all(np.array_equal(a, b) for a, b in zip(modl._premerge(C.astype(np.int64)), plain))
    assert got[0].shape[0] < V  # runs were merged


def test_least_cut_is_numpys_sum_and_first_argmin():
    """The fused pass of the cut pricing against numpy's temporaries and argmin, ties included."""
    rng = np.random.default_rng(8)
    for n in (1, 2, 7, 8, 9, 15, 16, 17, 50, 3000):  # blocks of eight and a tail
        for shape in ("noise", "falling", "last"):
            left = np.round(rng.normal(0, 3, n + int(rng.integers(0, 9))), 1)  # rounded: ties
            right = np.round(rng.normal(0, 3, n + int(rng.integers(0, 9))), 1)
            if shape == "falling":  # a new least at every cut
                left[:n] = -np.arange(n, dtype=np.float64) * 10.0
            elif shape == "last":  # the least at the last cut
                left[n - 1] = -1e6
            f_old = float(rng.normal())
            g = (left[:n] + right[right.shape[0] - n:]) - f_old
            best, at = modl_jit.least_cut(left, right, n, f_old)
            assert (best, at) == (g[int(np.argmin(g))], int(np.argmin(g)))
    # Every cut equal: the first.
    assert modl_jit.least_cut(np.ones(9), np.zeros(12), 9, 0.5) == (0.5, 0)
    assert modl_jit.least_cut(np.ones(40), np.zeros(40), 40, 0.5) == (0.5, 0)


@pytest.mark.parametrize("top", [3, 1 << 10, 1 << 17, 1 << 40])
def test_first_gains_compiled_equal_numpy_bit_for_bit(top):
    """f of rows and pairs and the rounded gains: the kernel's against numpy's, the table's edge."""
    rng = np.random.default_rng(top)
    C = rng.integers(0, top, (3000, 2))
    C[C.sum(axis=1) == 0, 0] = 1
    C[:20] = [[(1 << 16) - 2, 0], [0, (1 << 16) - 1], [1, (1 << 16) - 3], [7, 9]] * 5
    f_row, f_pair = modl._f(C), modl._f(C[:-1] + C[1:])
    keys = modl._quantise(f_pair - f_row[:-1] - f_row[1:])
    C = C.astype(np.int64)
    for got in (modl._first_gains2(C), _first_gains_in(C, [0, 1000, 1001, 2999, 3000])):
        for a, b in zip(got, (f_row, f_pair, keys)):
            assert a.view(np.int64).tolist() == b.view(np.int64).tolist()


def _first_gains_in(C: np.ndarray, bounds: list[int]) -> tuple[np.ndarray, ...]:
    """modl_jit.first_gains2 over consecutive ranges, the last first (as a second thread may)."""
    K = C.shape[0]
    out = np.full(K, np.nan), np.full(K - 1, np.nan), np.full(K - 1, np.nan)
    for lo, hi in reversed(list(zip(bounds[:-1], bounds[1:]))):
        modl_jit.first_gains2(C, modl._gammaln_table(), lo, hi, *out)
    return out


# ----------------------------------------------------------------------------
# Greedy merging: the same merges in the same order
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("J,kind,seed", [(J, kind, seed) for J in (2, 3, 5)
                                         for kind in ("heavy", "ties", "noise")
                                         for seed in range(2)])
@pytest.mark.parametrize("to_end", [False, True])
def test_greedy_kernel_equals_python_loop(J, kind, seed, to_end):
    C = mixed_table(np.random.default_rng([J, seed, 31]), 2000, J, kind)
    (py_removed, py_steps), (removed, steps) = python_and_jit_merges(C, to_end)
    assert len(py_removed) > 0
    assert removed.tolist() == list(py_removed)
    assert steps.tolist() == list(py_steps)  # the same floats, bit for bit


def test_greedy_kernel_equals_python_loop_large():
    """30,000 mixed rows with 10 instances each: long cascades, many heap updates."""
    C = mixed_table(np.random.default_rng(32), 30_000, 2, "heavy")
    (py_removed, py_steps), (removed, steps) = python_and_jit_merges(C, True)
    assert removed.tolist() == list(py_removed) and steps.tolist() == list(py_steps)


def test_greedy_kernel_with_gains_beyond_the_int_scaling():
    """Many classes (gains below -2^18, the Python heap orders their bits): same merges."""
    rng = np.random.default_rng(8)
    J = 100_000
    C = rng.multinomial(50_000, np.full(J, 1.0 / J), size=5)
    C[:, :3] += np.array([[40, 0, 0], [38, 2, 0], [0, 0, 40], [1, 0, 39], [0, 40, 0]])
    assert not modl._MergeHeap(np.zeros(4), np.zeros(4), 5, int(C.sum()), J).scaled
    for to_end in (False, True):
        (py_removed, py_steps), (removed, steps) = python_and_jit_merges(C, to_end)
        assert removed.tolist() == list(py_removed) and steps.tolist() == list(py_steps)


@pytest.mark.parametrize("J,kind", [(2, "ties"), (3, "signal"), (5, "noise")])
def test_greedy_kernel_against_the_oracles(jit_always, J, kind):
    """Independent of the Python loop: the O(V^2) greedy of tests/test_modl.py."""
    counts = make_counts(np.random.default_rng([J, 33]), 120, J, kind)
    assert modl.greedy_merge(counts).tolist() == plain_greedy(counts)
    assert modl._greedy_starts(counts, to_end=True).tolist() == plain_greedy_path(counts)


def test_indexed_heap_against_a_dict_of_current_entries():
    """The kernel's heap (push, re-key, remove anywhere, pop) against sorted (gain, pair) tuples.

    Many equal gains and -0.0 among them; positions kept in the interval
    rows must always point at the pair's own entry.
    """
    rng = np.random.default_rng(37)
    n = 600
    H = modl_jit._aligned_rows(n + modl_jit._OFF + 1, 2)
    assert H.ctypes.data % 64 == 0
    R = modl_jit._aligned_rows(n, 8)
    Ri = R.view(np.int64)
    Ri[:, modl_jit._F_POS] = -1
    ref: dict[int, float] = {}  # pair -> gain of its entry
    size = 0
    popped, expected = [], []
    for step in range(20_000):
        op = rng.integers(0, 4)
        s = int(rng.integers(0, n))
        k = float(rng.integers(-5, 5)) / 4.0 or (-0.0 if rng.random() < 0.5 else 0.0)
        if op == 0 and s not in ref:
            size = modl_jit._push(H, Ri, size, k, s)
            ref[s] = k
        elif op == 1 and s in ref:
            modl_jit._rekey(H, Ri, size, int(Ri[s, modl_jit._F_POS]), k, s)
            ref[s] = k
        elif op == 2 and s in ref:
            size = modl_jit._remove(H, Ri, size, int(Ri[s, modl_jit._F_POS]))
            del ref[s]
        elif op == 3 and size:
            popped.append((H[modl_jit._OFF, 0], int(H[modl_jit._OFF, 1])))
            expected.append(min((g, t) for t, g in ref.items()))
            size = modl_jit._remove(H, Ri, size, 0)
            del ref[popped[-1][1]]
        assert size == len(ref)
        if step % 997 == 0:
            live = [t for t in range(n) if Ri[t, modl_jit._F_POS] >= 0]
            assert sorted(live) == sorted(ref)
            assert all(int(H[Ri[t, modl_jit._F_POS] + modl_jit._OFF, 1]) == t
                       and H[Ri[t, modl_jit._F_POS] + modl_jit._OFF, 0] == ref[t] for t in live)
    assert len(popped) > 3000
    assert popped == expected
    while size:
        popped.append((H[modl_jit._OFF, 0], int(H[modl_jit._OFF, 1])))
        size = modl_jit._remove(H, Ri, size, 0)
    assert popped[len(expected):] == sorted((g, t) for t, g in ref.items())


@pytest.mark.parametrize("n", [0, 1, 2, 7, 4096, 30_000])
def test_stable_order_is_numpys_stable_argsort(n):
    """The radix sort of the first gains against numpy's stable argsort, and its fallback."""
    rng = np.random.default_rng(n)
    cases = [
        rng.integers(-3, 3, n) * 0.5,                 # few distinct gains, many ties
        rng.normal(size=n) * 5,                       # the usual spread
        np.where(rng.random(n) < 0.5, -0.0, 0.0),     # -0.0 and 0.0 tie
        rng.normal(size=n) * 1e5,                     # spread beyond 63 bits: merge sort
        rng.normal(size=n) * 300 - 3e5,               # below -2^18: merge sort
    ]
    for keys in cases:
        keys = modl._quantise(keys)
        assert modl_jit._stable_order(keys).tolist() == np.argsort(keys, kind="stable").tolist()


# ----------------------------------------------------------------------------
# Greedy merging in parts: the same merges as in one piece
# ----------------------------------------------------------------------------


def _merge_inputs(C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    f_row = modl._f(C)
    f_pair = modl._f(C[:-1] + C[1:])
    return f_row, f_pair, modl._quantise(f_pair - f_row[:-1] - f_row[1:]), int(C.sum())


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), V=st.integers(2, 300), J=st.sampled_from([2, 3]),
       kind=st.sampled_from(["heavy", "ties", "noise"]), parts=st.integers(2, 5),
       to_end=st.booleans())
def test_greedy_in_parts_equals_one_piece(seed, V, J, kind, parts, to_end):
    """Parts merged alone and interleaved, then the rest: the kernel's merges and floats.

    Boundaries anywhere (a crossing pair may merge first), up to one part per
    row pair; the reference is greedy over the whole table, compiled and in Python.
    """
    rng = np.random.default_rng(seed)
    C = np.ascontiguousarray(mixed_table(rng, V, J, kind), dtype=np.int64)
    f_row, f_pair, keys, N = _merge_inputs(C)
    inner = rng.choice(np.arange(1, V), min(parts, V) - 1, replace=False) if V > 1 else []
    B = np.unique(np.concatenate(([0, V], inner))).astype(np.int64)
    removed, steps = modl._greedy_in_parts(C, f_row, f_pair, keys, N, to_end,
                                           modl_jit.greedy_merges, 0, B)
    one = modl_jit.greedy_merges(C, f_row.copy(), keys, f_pair, N, to_end)
    py = modl._greedy_merges(C, f_row, f_pair, keys, N, to_end, None)
    assert removed.tolist() == one[0].tolist() == list(py[0])
    assert steps.tolist() == one[1].tolist() == list(py[1])  # bit for bit


def test_greedy_in_parts_crossing_early_and_late():
    """The same merges whether the first crossing merge comes first or last (heavy rows).

    A boundary picked by :func:`modl._split_points` is merged late; one
    between two rows of the same pure run first of all.
    """
    C = np.ascontiguousarray(mixed_table(np.random.default_rng(38), 6000, 2, "heavy"))
    C[2999:3001] = [[0, 30], [0, 30]]  # the pair across row 3000 merges first
    f_row, f_pair, keys, N = _merge_inputs(C)
    one = modl_jit.greedy_merges(C, f_row.copy(), keys, f_pair, N, True)
    picked = modl._split_points(C, f_row, f_pair, keys, N, 3, modl_jit.greedy_merges, 1000)
    when = np.empty(6000, dtype=np.int64)
    when[one[0]] = np.arange(5999)
    assert (when[picked[1:-1]] > 5900).all()  # fewer than 100 intervals left then
    for B in (picked, np.array([0, 3000, 6000])):
        for to_end in (True, False):
            ref = one if to_end else modl_jit.greedy_merges(C, f_row.copy(), keys, f_pair, N,
                                                            False)
            removed, steps = modl._greedy_in_parts(C, f_row, f_pair, keys, N, to_end,
                                                   modl_jit.greedy_merges, 0, B)
            assert removed.tolist() == ref[0].tolist() and steps.tolist() == ref[1].tolist()


def test_greedy_in_parts_many_boundaries():
    """Larger tables cut at random rows into up to 12 parts: crossings at every stage."""
    rng = np.random.default_rng(40)
    for trial in range(12):
        J, kind = (2, 3)[trial % 2], ("heavy", "ties", "noise")[trial % 3]
        C = np.ascontiguousarray(mixed_table(rng, int(rng.integers(500, 2500)), J, kind))
        K = C.shape[0]
        f_row, f_pair, keys, N = _merge_inputs(C)
        inner = rng.choice(np.arange(1, K), int(rng.integers(1, 12)), replace=False)
        B = np.unique(np.concatenate(([0, K], inner))).astype(np.int64)
        for to_end in (True, False):
            ref = modl_jit.greedy_merges(C, f_row.copy(), keys, f_pair, N, to_end)
            removed, steps = modl._greedy_in_parts(C, f_row, f_pair, keys, N, to_end,
                                                   modl_jit.greedy_merges, 0, B)
            assert removed.tolist() == ref[0].tolist() and steps.tolist() == ref[1].tolist()


def test_coarse_guess_is_the_interleaved_state(monkeypatch):
    """modl._coarse_guess from the parts' merges alone: the intervals the whole table's greedy
    leaves after M merges, for every M before the first crossing merge (and None or a
    different table is what modl._coarse_top_down then detects)."""
    rng = np.random.default_rng(44)
    record, interleave = modl._jit_split()
    seen = {}

    def spy(B, offs, rem, left, key, *rest):
        out = interleave(B, offs, rem, left, key, *rest)
        seen.update(B=B.copy(), offs=offs.copy(), rem=rem.copy(), key=key.copy(),
                    before_crossing=int(out[2].sum()))
        return out

    monkeypatch.setattr(modl, "_jit_split", lambda: (record, spy))
    checked = 0
    for trial in range(10):
        kind = ("heavy", "ties", "noise")[trial % 3]
        C = np.ascontiguousarray(mixed_table(rng, int(rng.integers(800, 3000)), 2, kind))
        K = C.shape[0]
        f_row, f_pair, keys, N = _merge_inputs(C)
        B = np.asarray(modl._split_points(C, f_row, f_pair, keys, N, int(rng.integers(2, 6)),
                                          modl_jit.greedy_merges, 400), dtype=np.int64)
        removed, _ = modl._greedy_in_parts(C, f_row, f_pair, keys, N, True,
                                           modl_jit.greedy_merges, 0, B)
        for M in rng.integers(1, seen["before_crossing"] + 1, 6).tolist():
            guess = modl._coarse_guess(seen["B"], seen["offs"], seen["rem"], seen["key"], K - M)
            if guess is not None:  # None: equal running maxima in two parts at the M-th
                assert guess.tolist() == modl._starts_after(K, removed, M).tolist()
                checked += 1
    assert checked >= 30  # 34 of the 60 (seeded); the others met equal maxima


def _split_points_in_order(C, f_row, f_pair, keys, N, parts, window):
    """The boundaries of modl._split_points by a plain loop, one window after the other."""
    K = C.shape[0]
    bounds = [0]
    for q in range(1, parts):
        c = K * q // parts
        lo, hi = max(bounds[-1] + 1, c - window // 2), min(K, c + window // 2)
        removed, _ = modl_jit.greedy_merges(C[lo:hi], f_row[lo:hi].copy(), keys[lo:hi - 1],
                                            f_pair[lo:hi - 1], N, True)
        when = np.full(hi - lo, -1)
        when[removed] = np.arange(len(removed))
        inner = np.arange(max(1, (hi - lo) // 4), max(2, 3 * (hi - lo) // 4))
        bounds.append(lo + int(inner[np.argmax(when[inner])]))
    return bounds + [K]


@pytest.mark.parametrize("K,parts,window", [(6000, 4, 1000), (3000, 12, 1000), (900, 30, 64)])
def test_split_points_in_two_threads_equal_the_plain_loop(K, parts, window):
    """Windows run from their own centres in two threads, redone where they overlap: same cuts.

    (3000, 12, 1000) and (900, 30, 64): windows longer than the parts or
    reaching back past the previous boundary, so some are redone.
    """
    C = np.ascontiguousarray(mixed_table(np.random.default_rng(K), K, 2, "heavy"))
    f_row, f_pair, keys, N = _merge_inputs(C)
    picked = modl._split_points(C, f_row, f_pair, keys, N, parts, modl_jit.greedy_merges, window)
    assert picked.tolist() == _split_points_in_order(C, f_row, f_pair, keys, N, parts, window)
    assert (np.diff(picked) > 0).all()


def test_partition_in_parts_equals_python(monkeypatch):
    """modl_partition with greedy in four parts (forced on 4,000 rows) against the Python path."""
    C = mixed_table(np.random.default_rng(39), 4000, 2, "heavy")
    calls = []
    in_parts = modl._greedy_in_parts
    monkeypatch.setattr(modl, "_greedy_in_parts",
                        lambda *a, **k: calls.append(a[-1]) or in_parts(*a, **k))
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)
    monkeypatch.setattr(modl, "_SPLIT_MIN_ROWS", 0)
    monkeypatch.setattr(modl, "_SPLIT_PART_ROWS", 1000)
    monkeypatch.setattr(modl, "_SPLIT_WINDOW", 500)
    compiled = modl.modl_partition(C, exact_max=0)
    assert calls == [4]
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 10**12)
    python = modl.modl_partition(C, exact_max=0)
    assert compiled.cuts.tolist() == python.cuts.tolist() and compiled.cost == python.cost


# ----------------------------------------------------------------------------
# Post-optimisation and the whole partition
# ----------------------------------------------------------------------------


def test_best_cut_from_the_ends_equals_numpy():
    """Compiled f per span end (_Sides) against the numpy span cache; spans grow and shrink."""
    rng = np.random.default_rng(34)
    C = mixed_table(rng, 5000, 2, "heavy")
    P = [np.concatenate(([0.0], np.cumsum(C[:, j]).astype(np.float64))) for j in range(2)]
    sides = modl._Sides(P, modl_jit.f_from2, modl_jit.f_to2)
    lo = np.sort(rng.choice(4000, 40, replace=False))
    for _ in range(3):  # shared ends, longer and shorter spans of the same ends
        hi = lo + rng.integers(2, 1000, 40)
        f_old = rng.normal(0, 50, 40)
        best, cut = modl._best_cut(P, lo, hi, f_old, {})
        s_best, s_cut = modl._best_cut(P, lo, hi, f_old, sides)
        assert np.array_equal(s_best, best) and np.array_equal(s_cut, cut)
    t = np.arange(1, 5000)
    # Log-gamma values remembered from earlier calls, or not, or past the memo: the same f.
    # A memo past the largest argument is filled first (plain loads); a smaller one is
    # looked up value by value.
    top = max(int(P[0][4999] + P[1][4999] + 2),  # f of rows 0..4998
              int(P[0][5000] - P[0][1] + P[1][5000] - P[1][1] + 2))  # f of rows 1..4999
    for memo in (np.full(top + 1, np.nan), np.full(700, np.nan), np.zeros(0)):
        filled = np.zeros(1, dtype=np.int64)
        for _ in range(2):
            assert np.array_equal(modl_jit.f_from2(P[0], P[1], 0, 1, 5000, memo, filled),
                                  modl._span_f(P, np.zeros_like(t), t))
            assert np.array_equal(modl_jit.f_to2(P[0], P[1], 5000, 1, 5000, memo, filled),
                                  modl._span_f(P, t, np.full_like(t, 5000)))
        assert memo.size == 0 or not np.isnan(memo[1:]).all()
        assert filled[0] == (top if memo.size > top else 0)
        if memo.size > top:
            assert np.array_equal(memo[1:], gammaln(np.arange(1.0, top + 1)))


@pytest.mark.parametrize("J,kind,seed", [(2, "heavy", 0), (2, "ties", 1), (2, "noise", 2),
                                         (3, "heavy", 3), (5, "ties", 4)])
def test_partition_compiled_equals_python(monkeypatch, J, kind, seed):
    """modl_partition's greedy path, compiled vs pure Python: identical cuts and cost."""
    C = mixed_table(np.random.default_rng([seed, 35]), 4000, J, kind)
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)
    compiled = modl.modl_partition(C, exact_max=0)
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 10**12)
    python = modl.modl_partition(C, exact_max=0)
    assert compiled.cuts.tolist() == python.cuts.tolist()
    assert compiled.cost == python.cost
    assert np.array_equal(compiled.interval_counts, python.interval_counts)


@pytest.mark.parametrize("J,kind,seed", [(2, "heavy", 5), (3, "ties", 6)])
def test_partition_top_down_on_greedy_intervals_compiled_equals_python(monkeypatch, J, kind,
                                                                       seed):
    """The top-down start on greedy's intervals (forced on 4,000 rows), in a second thread."""
    C = mixed_table(np.random.default_rng([seed, 35]), 4000, J, kind)
    monkeypatch.setattr(modl, "_TOP_COARSE", 300)
    calls = []
    coarse = modl._coarse_top_down
    monkeypatch.setattr(modl, "_coarse_top_down", lambda *a: calls.append(a[2]) or coarse(*a))
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)
    compiled = modl.modl_partition(C, exact_max=0)
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 10**12)
    python = modl.modl_partition(C, exact_max=0)
    assert len(calls) == 2
    assert compiled.cuts.tolist() == python.cuts.tolist() and compiled.cost == python.cost


def test_partition_coarse_split_ahead_equals_python(monkeypatch):
    """Greedy in parts and the top-down start's coarse phase computed ahead, on the guessed
    table (forced on 6,000 rows): used when the guess is the table, the same result as the
    Python path; a wrong guess is not used."""
    C = mixed_table(np.random.default_rng(45), 6000, 2, "heavy")
    monkeypatch.setattr(modl, "_TOP_COARSE", 400)
    monkeypatch.setattr(modl, "_SPLIT_MIN_ROWS", 0)
    monkeypatch.setattr(modl, "_SPLIT_PART_ROWS", 1500)
    monkeypatch.setattr(modl, "_SPLIT_WINDOW", 500)
    splits = []
    coarse_split = modl._coarse_split
    monkeypatch.setattr(modl, "_coarse_split", lambda C, c: splits.append(c) or coarse_split(C, c))
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)
    compiled = modl.modl_partition(C, exact_max=0)
    assert len(splits) == 1  # computed ahead only: the guess was the coarse table
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 10**12)
    python = modl.modl_partition(C, exact_max=0)
    assert compiled.cuts.tolist() == python.cuts.tolist() and compiled.cost == python.cost

    K = C.shape[0]
    removed, steps = modl._greedy_path(C, True)
    n_kept = modl._kept_starts(K, removed, steps, True).shape[0]
    want = modl._coarse_top_down(C, removed, n_kept)
    coarse = modl._starts_after(K, removed, K - 400)
    wrong = np.delete(coarse, 7)
    splits.clear()
    got = modl._coarse_top_down(C, removed, n_kept, None,
                                lambda: (wrong, modl._coarse_split(C, wrong)))
    assert got.tolist() == want.tolist() and len(splits) == 2  # recomputed on the table


def test_loaded_kernels_take_smaller_tables(monkeypatch):
    """Once the kernels have run in the process, a tenth of _JIT_MIN_ROWS suffices: same result."""
    rng = np.random.default_rng(41)
    C = mixed_table(rng, 600, 2, "heavy")
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 5000)
    monkeypatch.setattr(modl, "_JIT_WARM", False)
    calls = []
    kernel = modl._jit_greedy()
    assert kernel is not None
    monkeypatch.setattr(modl, "_jit_greedy", lambda: lambda *a: calls.append(a[0].shape[0])
                        or kernel(*a))
    cold = modl.modl_partition(C, exact_max=0)
    assert calls == [] and not modl._JIT_WARM  # 600 rows, nothing run yet: the Python path
    modl.modl_partition(mixed_table(rng, 5000, 2, "heavy"), exact_max=0)
    assert calls == [5000] and modl._JIT_WARM
    warm = modl.modl_partition(C, exact_max=0)
    assert calls == [5000, 600]
    assert warm.cuts.tolist() == cold.cuts.tolist() and warm.cost == cold.cost
    assert modl.modl_partition(C[:499], exact_max=0).cost > 0 and calls == [5000, 600]


def test_fallback_without_numba(monkeypatch):
    """Without numba the module runs the Python path and finds the same partition."""
    C = mixed_table(np.random.default_rng(36), 3000, 2, "heavy")
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)
    compiled = modl.modl_partition(C, exact_max=0)
    assert modl._jit_kernels() == (modl_jit.greedy_merges, modl_jit.f_from2, modl_jit.f_to2)
    monkeypatch.setitem(sys.modules, "numba", None)
    monkeypatch.delitem(sys.modules, "distcal.core.modl_jit")
    modl._jit_kernels.cache_clear()
    try:
        assert modl._jit_kernels() is None and modl._jit_greedy() is None
        fallback = modl.modl_partition(C, exact_max=0)
        merged, _, _ = modl.premerge_range(C)
    finally:
        monkeypatch.undo()
        modl._jit_kernels.cache_clear()
    assert np.array_equal(merged.sum(axis=0), C.sum(axis=0))  # the executors' step needs no numba
    assert fallback.cuts.tolist() == compiled.cuts.tolist() and fallback.cost == compiled.cost


@pytest.mark.subprocess
def test_importing_modl_does_not_import_numba():
    """Executors import distcal.core.modl (premerge_range) and have no numba."""
    code = ("import sys, numpy as np, distcal.core.modl as m; "
            "m.premerge_range(np.array([[1, 0], [2, 0], [0, 1]])); "
            "m.modl_partition(np.array([[3, 1], [1, 3]] * 20), exact_max=0); "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------
# Windows solved exactly: the compiled DP against its numpy twin
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["heavy", "ties", "noise", "huge"])
def test_windows_dp2_equals_numpy(kind):
    """F and the k-partitions of runs of overlapping windows, bit for bit; fresh and filled memo.

    Consecutive spans share rows (the kernel copies those values instead of
    recomputing them), some do not, some are single rows; 'huge' rows (half
    a million instances) put log-gamma arguments beyond the memo: the
    kernel's checked path.
    """
    rng = np.random.default_rng(len(kind))
    if kind == "huge":
        n = rng.integers(400_000, 600_000, 80)
        pos = rng.binomial(n, np.sort(rng.random(80)))
        C = np.column_stack([n - pos, pos]).astype(np.int64)
    else:
        C = np.ascontiguousarray(mixed_table(rng, 1500, 2, kind), dtype=np.int64)
    K = C.shape[0]
    Pi = np.vstack([np.zeros((1, 2), dtype=np.int64), np.cumsum(C, axis=0)])
    P = [Pi[:, j].astype(np.float64) for j in range(2)]
    fresh = np.full(modl._MEMO, np.nan)
    for trial in range(6):
        cuts = np.sort(rng.choice(np.arange(1, K), int(rng.integers(3, 12)), replace=False))
        bounds = [0, *cuts.tolist(), K]
        w = int(rng.integers(1, 4))
        spans = [(bounds[i], bounds[i + w]) for i in range(len(bounds) - w)
                 if bounds[i + w] - bounds[i] <= 400]
        if trial == 0:
            # One row; then sharing a start, an end; then one inside the
            # previous span (the numpy twin shares nothing there).
            spans = [(5, 6), (5, 9), (7, 9), (7, 14), (8, 11), (9, 16)]
        if not spans:
            continue
        kmax = int(rng.integers(1, 7))
        lo = np.asarray([a for a, _ in spans], dtype=np.int64)
        hi = np.asarray([b for _, b in spans], dtype=np.int64)
        memo, filled = ((fresh, np.zeros(1, dtype=np.int64)) if trial % 2
                        else (modl._shared_memo(), modl._MEMO_FILLED))
        side = int((hi - lo).max()) + 1
        F2, S2 = modl_jit.windows_dp2(P[0], P[1], lo, hi, kmax, memo, filled,
                                      np.empty(side * side), np.empty(side * side))
        run = modl._windows_dp(P, spans, kmax)  # numpy, sharing as the kernel does
        for i, (a, b) in enumerate(spans):
            F, S = modl._window_dp(P, a, b, kmax)
            k = F.shape[0]
            assert F.tolist() == F2[i, :k].tolist() == run[i][0].tolist()  # equal, not close
            assert np.isinf(F2[i, k:]).all()
            assert S.tolist() == S2[i, :k, :k - 1].tolist() == run[i][1].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_refine_windows_numpy_equals_compiled(monkeypatch, seed):
    """_refine_windows from a greedy partition: the numpy path (half the first pass in a
    second thread, the rest solved one window at a time as the passes reach it, paths found
    only for windows that change) against the compiled kernel's runs, where windows change."""
    rng = np.random.default_rng([seed, 46])
    V = int(rng.integers(1500, 4000))
    s = np.sort(rng.random(V))
    n = rng.poisson(int(rng.integers(50, 400)), V) + 1
    pos = rng.binomial(n, s * s if seed % 2 else 0.5 + 0.4 * np.sin(9 * s))
    C = np.column_stack([n - pos, pos]).astype(np.int64)
    start = modl._greedy_starts(C, to_end=True)
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)
    compiled = modl._refine_windows(C, start)
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 10**12)
    python = modl._refine_windows(C, start)
    assert compiled.tolist() == python.tolist()
    assert compiled.tolist() != start.tolist()  # windows changed the partition


def test_partition_with_windows_compiled_equals_python(monkeypatch):
    """modl_partition on 3,000 heavy rows whose windows change the result: both paths alike."""
    rng = np.random.default_rng(41)
    s = np.sort(rng.random(3000))
    n = rng.poisson(300, 3000) + 1
    pos = rng.binomial(n, s * s)
    C = np.column_stack([n - pos, pos]).astype(np.int64)
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 0)
    compiled = modl.modl_partition(C, exact_max=0)
    monkeypatch.setattr(modl, "_JIT_MIN_ROWS", 10**12)
    python = modl.modl_partition(C, exact_max=0)
    assert compiled.cuts.tolist() == python.cuts.tolist() and compiled.cost == python.cost
    monkeypatch.setattr(modl, "_refine_windows", lambda C, starts: starts)
    without = modl.modl_partition(C, exact_max=0)
    assert without.cost > python.cost + 1e-6  # the windows did work here
