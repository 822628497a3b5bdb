"""MODL discretisation (distcal.core.modl) against independent oracles.

The oracles below recompute the criterion from its definition with
math.lgamma (never with the module's functions): brute force over all
2^(V-1) partitions, a plain O(V^3) dynamic programme, and plain O(V^2)
greedy merging.
"""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln

from distcal.core import modl
from distcal.core.modl import (
    greedy_merge,
    interval_bounds,
    modl_cost,
    modl_partition,
    premerge_range,
)

# ----------------------------------------------------------------------------
# Oracles
# ----------------------------------------------------------------------------


def lfact(n: int) -> float:
    return math.lgamma(n + 1)


def oracle_interval(row: list[int]) -> float:
    """log C(N_i+J-1, J-1) + log(N_i! / prod_j N_ij!), written as in Boullé (2006)."""
    n, J = sum(row), len(row)
    return (lfact(n + J - 1) - lfact(J - 1) - lfact(n)) + (lfact(n) - sum(lfact(x) for x in row))


def oracle_cost(interval_counts) -> float:
    rows = [list(map(int, r)) for r in interval_counts]
    N, I = sum(map(sum, rows)), len(rows)
    return (math.log(N) + lfact(N + I - 1) - lfact(I - 1) - lfact(N)
            + sum(oracle_interval(r) for r in rows))


def sum_rows(counts, cuts) -> list[list[int]]:
    rows = [list(map(int, r)) for r in counts]
    bounds = list(cuts) + [len(rows)]
    return [[sum(col) for col in zip(*rows[a:b])] for a, b in zip(bounds[:-1], bounds[1:])]


def brute_force(counts) -> list[tuple[float, tuple[int, ...]]]:
    """(cost, cuts) of every partition, best first."""
    V = len(counts)
    out = []
    for mask in itertools.product((False, True), repeat=V - 1):
        cuts = (0,) + tuple(i + 1 for i, m in enumerate(mask) if m)
        out.append((oracle_cost(sum_rows(counts, cuts)), cuts))
    out.sort()
    return out


def plain_dp(counts) -> float:
    """Least cost by D[k][v] = min_u D[k-1][u] + cost(rows u..v-1), then min over k."""
    rows = [list(map(int, r)) for r in counts]
    V, N = len(rows), sum(map(sum, rows))
    cost = [[0.0] * (V + 1) for _ in range(V + 1)]
    for u in range(V):
        acc = [0] * len(rows[0])
        for v in range(u + 1, V + 1):
            acc = [a + b for a, b in zip(acc, rows[v - 1])]
            cost[u][v] = oracle_interval(acc)
    inf = float("inf")
    D = [inf] * (V + 1)
    D[0] = 0.0
    best = inf
    for k in range(1, V + 1):
        Dn = [inf] * (V + 1)
        for v in range(k, V + 1):
            Dn[v] = min(D[u] + cost[u][v] for u in range(k - 1, v))
        D = Dn
        best = min(best, math.log(N) + lfact(N + k - 1) - lfact(k - 1) - lfact(N) + D[V])
    return best


def full_dp_numpy(counts: np.ndarray) -> tuple[float, list[int]]:
    """(least cost, cuts) by the DP over every k = 1..V, no bound: numpy, for a few hundred rows.

    f from math.lgamma on integer prefix sums, ties to fewest intervals
    then the first argmin; independent of distcal's own f and bounds.
    """
    C = np.asarray(counts, dtype=np.int64)
    V, J = C.shape
    N = int(C.sum())
    P = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(C, axis=0)])
    F = np.full((V + 1, V + 1), np.inf)
    for u in range(V):
        for v in range(u + 1, V + 1):
            F[u, v] = oracle_interval((P[v] - P[u]).tolist())
    D = F[0].copy()
    back = [None, None]
    best, best_k = math.log(N) + lfact(N) - lfact(0) - lfact(N) + D[V], 1
    for k in range(2, V + 1):
        sub = D[k - 1:V, None] + F[k - 1:V, k:V + 1]
        arg = np.argmin(sub, axis=0)
        D = np.full(V + 1, np.inf)
        D[k:] = sub[arg, np.arange(V + 1 - k)]
        back.append(arg + (k - 1))
        c = math.log(N) + lfact(N + k - 1) - lfact(k - 1) - lfact(N) + D[V]
        if c < best:
            best, best_k = c, k
    cuts, v = [0], V
    for k in range(best_k, 1, -1):
        v = int(back[k][v - k])
        cuts.append(v)
    return best, sorted(cuts)


@pytest.mark.parametrize("V,rows,seed", [(300, 3_000, 0), (500, 60_000, 1),
                                         pytest.param(700, 400_000, 2, marks=pytest.mark.slow),
                                         (400, 2_000, 3)])
def test_exact_path_stops_early_with_the_same_optimum(V, rows, seed):
    """The exact DP's stopping bound (least f over any partition) leaves its result unchanged.

    Against the DP run over every number of intervals, with no bound, on
    tables of hundreds of mixed rows with signal, where the loop now stops
    near the optimum's size instead of running hundreds of steps more.
    """
    rng = np.random.default_rng(seed)
    s = rng.integers(0, V, rows)
    y = rng.random(rows) < (s / V) ** 2
    counts = np.zeros((V, 2), dtype=np.int64)
    np.add.at(counts, (s, y.astype(int)), 1)
    counts = counts[counts.sum(axis=1) > 0]
    res = modl_partition(counts)
    best, cuts = full_dp_numpy(premerge_range(counts)[0])
    assert res.exact
    assert res.cost == pytest.approx(best, abs=1e-9 * best)
    # the same partition, in the rows of the pre-merged table
    assert np.add.reduceat(counts, res.cuts, axis=0).tolist() == \
        np.add.reduceat(premerge_range(counts)[0], cuts, axis=0).tolist()


def plain_greedy(counts) -> list[int]:
    """Greedy bottom-up merging from single rows, recomputing every gain at each step.

    Gains rounded to the grid 2^-33 as the API documents; ties: leftmost pair.
    """
    rows = [list(map(int, r)) for r in counts]
    N = sum(map(sum, rows))
    ivals = [(i, r) for i, r in enumerate(rows)]
    while len(ivals) > 1:
        I = len(ivals)
        gains = []
        for (_, a), (_, b) in zip(ivals[:-1], ivals[1:]):
            m = [x + y for x, y in zip(a, b)]
            g = oracle_interval(m) - oracle_interval(a) - oracle_interval(b)
            gains.append((g + 2.0**19) - 2.0**19)
        best = min(range(I - 1), key=lambda i: (gains[i], i))
        if gains[best] + math.log((I - 1) / (N + I - 1)) >= 0.0:
            break
        (s, a), (_, b) = ivals[best], ivals[best + 1]
        ivals[best:best + 2] = [(s, [x + y for x, y in zip(a, b)])]
    return [s for s, _ in ivals]


def pure_runs(counts) -> list[int]:
    """First rows of maximal runs of rows pure in one class (mixed rows alone)."""
    starts = [0]
    for v in range(1, len(counts)):
        a, b = np.flatnonzero(counts[v - 1]), np.flatnonzero(counts[v])
        if not (len(a) == 1 and len(b) == 1 and a[0] == b[0]):
            starts.append(v)
    return starts


# ----------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------


def make_counts(rng: np.random.Generator, V: int, J: int, kind: str) -> np.ndarray:
    """A (V, J) table: 'signal' (class depends on the score), 'noise', 'ties' (mixed rows)."""
    if kind == "noise":
        n = rng.integers(1, 4, V)
        return np.stack([rng.multinomial(k, np.full(J, 1.0 / J)) for k in n])
    pos = np.linspace(0.0, 1.0, V)
    centres = np.linspace(0.0, 1.0, J)
    logits = -((pos[:, None] - centres[None, :]) ** 2) * rng.uniform(5.0, 40.0)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    n = rng.integers(1, 6, V) if kind == "ties" else np.ones(V, dtype=np.int64)
    return np.stack([rng.multinomial(k, q) for k, q in zip(n, p)])


CASES = [(V, J, kind, seed) for seed in range(6) for J in (2, 3, 5)
         for kind in ("signal", "noise", "ties") for V in (1, 2, 5, 9, 12)]


# ----------------------------------------------------------------------------
# Criterion
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_cost_against_definition(seed):
    rng = np.random.default_rng(seed)
    ic = rng.integers(0, 30, size=(rng.integers(1, 8), rng.integers(1, 6)))
    ic[:, 0] += 1  # no empty interval
    assert modl_cost(ic) == pytest.approx(oracle_cost(ic), abs=1e-9)


def test_cost_hand_value():
    # log 6 + log C(7, 1) + 2 log C(4, 1) for two pure intervals of 3.
    assert modl_cost(np.array([[3, 0], [0, 3]])) == pytest.approx(
        math.log(6) + math.log(7) + 2 * math.log(4), abs=1e-12)


@pytest.mark.parametrize("bad", [np.zeros((0, 2)), np.array([[1, -1]]), np.array([[1, 0], [0, 0]]),
                                 np.array([[0.5, 1.0]]), np.array([1, 2])])
def test_invalid_counts(bad):
    with pytest.raises(ValueError):
        modl_partition(bad)


# ----------------------------------------------------------------------------
# Exact path
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("V,J,kind,seed", CASES)
def test_exact_against_brute_force(V, J, kind, seed):
    counts = make_counts(np.random.default_rng([V, J, seed]), V, J, kind)
    ranked = brute_force(counts)
    res = modl_partition(counts)
    assert res.exact
    assert res.cost == pytest.approx(ranked[0][0], abs=1e-9)
    assert res.cost == pytest.approx(oracle_cost(res.interval_counts), abs=1e-9)
    if len(ranked) == 1 or ranked[1][0] > ranked[0][0] + 1e-7:  # unique optimum
        assert tuple(res.cuts.tolist()) == ranked[0][1]


@pytest.mark.parametrize("V,J,kind,seed", CASES[::3])
def test_pure_runs_are_never_needed_brute_force(V, J, kind, seed):
    """The best partition without cuts inside pure runs is as good as the best partition."""
    counts = make_counts(np.random.default_rng([V, J, seed, 7]), V, J, kind)
    ranked = brute_force(counts)
    allowed = set(pure_runs(counts))
    restricted = [c for c, cuts in ranked if set(cuts) <= allowed]
    assert restricted[0] == pytest.approx(ranked[0][0], abs=1e-9)


def test_pure_runs_brute_force_crafted():
    """Long pure runs between mixed rows, where cutting a run looks tempting."""
    counts = np.array([[0, 3], [2, 2], [1, 0], [1, 0], [1, 0], [3, 1], [0, 1], [0, 1],
                       [0, 2], [1, 1], [2, 0], [2, 0]])
    ranked = brute_force(counts)
    res = modl_partition(counts)
    assert res.cost == pytest.approx(ranked[0][0], abs=1e-9)
    allowed = set(pure_runs(counts))
    assert min(c for c, cuts in ranked if set(cuts) <= allowed) == pytest.approx(ranked[0][0])


@pytest.mark.parametrize("V,J,kind,seed", [(200, 2, "signal", 0), (150, 3, "ties", 1),
                                           (120, 5, "ties", 2), (200, 2, "ties", 3),
                                           (100, 2, "noise", 4), (60, 3, "signal", 5)])
def test_exact_against_plain_dp(V, J, kind, seed):
    counts = make_counts(np.random.default_rng([V, J, seed]), V, J, kind)
    res = modl_partition(counts)
    assert res.exact
    assert res.cost == pytest.approx(plain_dp(counts), abs=1e-9)


def test_exact_many_intervals():
    """Alternating heavy pure rows: the optimum keeps every cut (the DP runs to k = V)."""
    counts = np.array([[50, 0], [0, 50]] * 20)
    res = modl_partition(counts)
    assert len(res) == 40
    assert res.cost == pytest.approx(plain_dp(counts), abs=1e-9)


@pytest.mark.parametrize("exact_max", [1000, 0])
def test_noise_gives_one_interval(exact_max):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 3000)
    counts = np.stack([1 - y, y], axis=1)
    res = modl_partition(counts, exact_max=exact_max)
    assert res.cuts.tolist() == [0]
    assert res.cost == pytest.approx(oracle_cost([counts.sum(axis=0)]), abs=1e-9)


@pytest.mark.parametrize("exact_max", [1000, 0])
def test_single_class_gives_one_interval(exact_max):
    for counts in (np.array([[3], [1], [4]]), np.array([[3, 0], [1, 0], [4, 0]]),
                   np.array([[0, 2, 0]] * 50)):
        res = modl_partition(counts, exact_max=exact_max)
        assert res.cuts.tolist() == [0]
        assert res.interval_counts.tolist() == [counts.sum(axis=0).tolist()]


def test_clear_signal_is_found():
    counts = np.array([[5, 0]] * 30 + [[0, 5]] * 30)
    for exact_max in (1000, 0):
        assert modl_partition(counts, exact_max=exact_max).cuts.tolist() == [0, 30]


# ----------------------------------------------------------------------------
# Greedy path
# ----------------------------------------------------------------------------

GREEDY_CASES = [(V, J, kind, seed) for seed in range(5) for J in (2, 3, 5)
                for kind in ("signal", "noise", "ties") for V in (2, 7, 25, 60)]


@pytest.mark.parametrize("V,J,kind,seed", GREEDY_CASES)
def test_greedy_against_plain_greedy(V, J, kind, seed):
    counts = make_counts(np.random.default_rng([V, J, seed, 1]), V, J, kind)
    baseline = plain_greedy(counts)
    assert greedy_merge(counts).tolist() == baseline
    res = modl_partition(counts, exact_max=0)
    assert not res.exact or V == 1
    assert res.cost <= oracle_cost(sum_rows(counts, baseline)) + 1e-9
    assert res.cost == pytest.approx(oracle_cost(res.interval_counts), abs=1e-9)


def plain_greedy_path(counts) -> list[int]:
    """Greedy merging from single rows down to one interval; the cheapest partition on the way.

    Every gain recomputed at each step (O(V^2) gains), rounded as in plain_greedy.
    """
    rows = [list(map(int, r)) for r in counts]
    ivals = [(i, r) for i, r in enumerate(rows)]
    best_cost, best = oracle_cost([r for _, r in ivals]), [s for s, _ in ivals]
    while len(ivals) > 1:
        I = len(ivals)
        gains = [(oracle_interval([x + y for x, y in zip(a, b)]) - oracle_interval(a)
                  - oracle_interval(b) + 2.0**19) - 2.0**19
                 for (_, a), (_, b) in zip(ivals[:-1], ivals[1:])]
        i = min(range(I - 1), key=lambda k: (gains[k], k))
        (s, a), (_, b) = ivals[i], ivals[i + 1]
        ivals[i:i + 2] = [(s, [x + y for x, y in zip(a, b)])]
        cost = oracle_cost([r for _, r in ivals])
        if cost < best_cost:
            best_cost, best = cost, [s for s, _ in ivals]
    return best


def heap_greedy(counts) -> list[int]:
    """Plain greedy merging with a textbook heap of (gain, left row, version) tuples.

    Independent of the module's int-encoded heap and of its cascade
    shortcut; f through math.lgamma only. Fast enough for tens of thousands
    of rows, where plain_greedy is not.
    """
    import heapq

    rows = [list(map(int, r)) for r in counts]
    K, N = len(rows), sum(map(sum, rows))
    f = [oracle_interval(r) for r in rows]
    nxt, prv, ver = list(range(1, K + 1)), list(range(-1, K - 1)), [0] * K

    def entry(s):
        m = [x + y for x, y in zip(rows[s], rows[nxt[s]])]
        ver[s] += 1
        return ((oracle_interval(m) - f[s] - f[nxt[s]] + 2.0**19) - 2.0**19, s, ver[s])

    heap = [entry(s) for s in range(K - 1)]
    heapq.heapify(heap)
    I, alive = K, [True] * K
    while heap:
        g, s, v = heapq.heappop(heap)
        if not alive[s] or v != ver[s] or nxt[s] >= K:
            continue
        if g + math.log((I - 1) / (N + I - 1)) >= 0.0:
            break
        r = nxt[s]
        rows[s] = [x + y for x, y in zip(rows[s], rows[r])]
        f[s] = oracle_interval(rows[s])
        alive[r], nxt[s], I = False, nxt[r], I - 1
        if nxt[s] < K:
            prv[nxt[s]] = s
            heapq.heappush(heap, entry(s))
        else:
            ver[s] += 1
        if prv[s] >= 0:
            heapq.heappush(heap, entry(prv[s]))
    return [s for s in range(K) if alive[s]]


@pytest.mark.parametrize("V,J,kind,seed", [(V, J, kind, seed) for seed in range(2) for J in (2, 3)
                                           for kind in ("signal", "noise", "ties")
                                           for V in (40, 160)])
def test_greedy_to_the_end_against_plain_path(V, J, kind, seed):
    """The greedy path kept by modl_partition: same merges, same order, same cheapest prefix."""
    counts = make_counts(np.random.default_rng([V, J, seed, 2]), V, J, kind)
    assert modl._greedy_starts(counts, to_end=True).tolist() == plain_greedy_path(counts)


@pytest.mark.parametrize("seed", range(2))
def test_greedy_large_against_textbook_heap(seed):
    """A/B on random tables of 5,000 mixed rows, where cascades and heap rebuilds are frequent."""
    rng = np.random.default_rng([seed, 3])
    J = (2, 3)[seed]
    counts = make_counts(rng, 5_000, J, ("ties", "noise")[seed])
    assert greedy_merge(counts).tolist() == heap_greedy(counts)


def test_greedy_with_gains_beyond_the_int_scaling():
    """Many classes: gains may fall below -2^18, and the heap orders them by their bits."""
    rng = np.random.default_rng(8)
    J = 100_000
    counts = rng.multinomial(50_000, np.full(J, 1.0 / J), size=5)
    counts[:, :3] += np.array([[40, 0, 0], [38, 2, 0], [0, 0, 40], [1, 0, 39], [0, 40, 0]])
    assert not modl._MergeHeap(np.zeros(4), np.zeros(4), 5, int(counts.sum()), J).scaled
    assert greedy_merge(counts).tolist() == plain_greedy(counts)


def test_ordered_bits_orders_as_floats():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 1, 500), rng.normal(0, 1e6, 500), [0.0, 1e-300, -1e-300,
                        2.0**-34, -(2.0**-34), 1e300, -1e300]])
    x = np.unique(x)  # ascending, distinct
    q = [modl._ordered_bits(v) for v in x.tolist()]
    assert all(a < b for a, b in zip(q, q[1:]))


def test_two_class_f_is_bit_identical_to_the_general_formula():
    rng = np.random.default_rng(1)
    c = np.concatenate([rng.integers(0, 10, (1000, 2)), rng.integers(0, 10**9, (1000, 2))])
    cf = c.astype(np.float64)
    general = gammaln(cf.sum(axis=-1) + 2) - gammaln(2) - gammaln(cf + 1.0).sum(axis=-1)
    assert np.array_equal(modl._f(c), general)


def test_tabulated_gammaln_is_scipys():
    """f reads gammaln of small integers from a table: the same values as scipy's, bit for bit."""
    rng = np.random.default_rng(2)
    x = np.concatenate([np.arange(1.0, 2.0**17), rng.integers(1, 2**40, 1000).astype(np.float64)])
    assert np.array_equal(modl._gammaln_int(x), gammaln(x))
    assert np.array_equal(modl._gammaln_int(x[:100]), gammaln(x[:100]))  # all in the table
    c = np.concatenate([rng.integers(0, 10, (500, 3)), rng.integers(0, 10**6, (500, 3))])
    cf = c.astype(np.float64)
    general = gammaln(cf.sum(axis=-1) + 3) - gammaln(3) - gammaln(cf + 1.0).sum(axis=-1)
    assert np.array_equal(modl._f(c), general)


def test_greedy_from_pure_runs_equals_plain_greedy():
    """All rows pure: the module starts greedy from the pure runs; plain greedy from rows agrees."""
    for seed in range(30):
        rng = np.random.default_rng(seed)
        J = int(rng.integers(2, 5))
        y = np.minimum((np.linspace(0, J, 80) + rng.normal(0, 0.7, 80)).astype(int), J - 1)
        y = np.maximum(y, 0)
        counts = np.zeros((80, J), dtype=np.int64)
        counts[np.arange(80), y] = rng.integers(1, 4, 80)
        starts = np.asarray(pure_runs(counts))
        reduced = np.add.reduceat(counts, starts, axis=0)
        assert starts[greedy_merge(reduced)].tolist() == plain_greedy(counts)


def test_greedy_matches_exact_in_most_small_cases():
    """Fraction of small random tables where greedy + post-optimisation finds the optimum."""
    hits = total = 0
    for seed in range(150):
        rng = np.random.default_rng([seed, 11])
        J = int(rng.choice([2, 3, 5]))
        kind = ("signal", "noise", "ties")[seed % 3]
        counts = make_counts(rng, int(rng.integers(5, 40)), J, kind)
        exact = modl_partition(counts)
        greedy = modl_partition(counts, exact_max=0)
        assert greedy.cost >= exact.cost - 1e-9
        hits += greedy.cost <= exact.cost + 1e-9
        total += 1
    # Observed: 150 / 150 (plain greedy alone: 136 / 150).
    assert hits / total >= 0.95, hits / total


# ----------------------------------------------------------------------------
# Pre-merging per range
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_premerge_keeps_the_optimum(seed):
    rng = np.random.default_rng([seed, 5])
    J = int(rng.choice([2, 3]))
    counts = make_counts(rng, int(rng.integers(1, 13)), J, ("signal", "ties")[seed % 2])
    merged, lo, hi = premerge_range(counts)
    best_raw = brute_force(counts)[0][0]
    assert brute_force(merged)[0][0] == pytest.approx(best_raw, abs=1e-9)
    assert modl_partition(merged).cost == pytest.approx(best_raw, abs=1e-9)
    assert lo.tolist() == pure_runs(counts)
    assert (hi[:-1] + 1).tolist() == lo[1:].tolist() and hi[-1] == len(counts) - 1


@pytest.mark.parametrize("seed", range(20))
def test_premerge_per_range_then_concatenate(seed):
    rng = np.random.default_rng([seed, 9])
    V = int(rng.integers(20, 300))
    J = int(rng.choice([2, 3, 5]))
    counts = make_counts(rng, V, J, ("signal", "ties", "noise")[seed % 3])
    scores = np.sort(rng.random(V))
    bounds = np.unique(np.concatenate(([0, V], rng.integers(0, V, 4))))
    parts = [premerge_range(counts[a:b], scores[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    table = np.concatenate([p[0] for p in parts])
    lo = np.concatenate([p[1] for p in parts])
    hi = np.concatenate([p[2] for p in parts])
    whole = modl_partition(counts)
    driver = modl_partition(table)
    assert driver.exact and whole.exact
    assert driver.cost == pytest.approx(whole.cost, abs=1e-9)
    assert driver.cost == pytest.approx(plain_dp(counts), abs=1e-9) if V <= 120 else True
    # The driver's intervals, in scores, are a partition of the whole table's rows.
    d_lo, d_hi = interval_bounds(driver, lo)[0], interval_bounds(driver, hi)[1]
    w_lo, w_hi = interval_bounds(whole, scores)
    cuts = np.searchsorted(scores, d_lo)
    assert oracle_cost(sum_rows(counts, cuts)) == pytest.approx(whole.cost, abs=1e-9)
    if np.array_equal(d_lo, w_lo):
        assert np.array_equal(d_hi, w_hi)


def test_premerge_with_scores():
    counts = np.array([[2, 0], [1, 0], [0, 4], [1, 1], [0, 1], [0, 2]])
    merged, lo, hi = premerge_range(counts, np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))
    assert merged.tolist() == [[3, 0], [0, 4], [1, 1], [0, 3]]
    assert lo.tolist() == [0.1, 0.3, 0.4, 0.5] and hi.tolist() == [0.2, 0.3, 0.4, 0.6]


# ----------------------------------------------------------------------------
# Fixed vectors from Discretizers.jl
# ----------------------------------------------------------------------------

# From sisl/Discretizers.jl, test/test_disc_MODL.jl (cases 1-7): scores 1..n,
# one row each, the class of each row, and the bin edges returned by its
# exact DP (DiscretizeMODL_Optimal) and by DiscretizeMODL_PostGreedy without
# a bin limit. An inner edge x.5 is a cut between scores x and x+1, i.e. a new
# interval starting at row x (0-based). Its J is the number of classes seen.
_CASE7 = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
          1, 1, 2, 3, 2, 1, 2, 2, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
          3, 3, 3, 3, 3, 3, 3, 2, 2, 3, 2, 3, 2, 3, 3, 3, 3, 2, 2, 2,
          1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 3, 3, 3, 3, 4, 4, 4, 4,
          4, 4, 4, 4, 4, 4, 4, 4, 1, 1, 4, 1, 4, 1, 4, 4, 4, 4, 4, 1]
DISCRETIZERS_JL = [
    ([1], [1.0, 1.0]),
    ([1, 1, 2, 2], [1.0, 4.0]),
    ([1, 1, 1, 2, 1, 2, 1, 2, 2, 2], [1.0, 10.0]),
    ([1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2], [1.0, 20.0]),
    ([1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2], [1.0, 3.5, 20.0]),
    ([i // 20 for i in range(100)], [1.0, 20.5, 40.5, 60.5, 80.5, 100.0]),
    (_CASE7, [1.0, 12.5, 38.5, 57.5, 72.5, 76.5, 100.0]),
]
# Its plain greedy result where it differs from the optimum (cases 4, 5, 7).
DISCRETIZERS_JL_GREEDY = {3: [1.0, 3.5, 10.5, 14.5, 20.0], 4: [1.0, 3.5, 10.5, 15.5, 20.0],
                          6: [1.0, 12.5, 38.5, 60.5, 72.5, 76.5, 100.0]}


def _jl_counts(classes):
    labels = sorted(set(classes))
    counts = np.zeros((len(classes), len(labels)), dtype=np.int64)
    counts[np.arange(len(classes)), [labels.index(c) for c in classes]] = 1
    return counts


def _jl_cuts(edges):
    return [0] + [int(e) for e in edges[1:-1]]


@pytest.mark.parametrize("case", range(len(DISCRETIZERS_JL)))
def test_discretizers_jl_optimal(case):
    classes, edges = DISCRETIZERS_JL[case]
    res = modl_partition(_jl_counts(classes))
    assert res.exact
    assert res.cuts.tolist() == _jl_cuts(edges)


@pytest.mark.parametrize("case", range(len(DISCRETIZERS_JL)))
def test_discretizers_jl_post_greedy(case):
    """Its post-optimised greedy equals its optimum on all 7 cases; so does ours."""
    classes, edges = DISCRETIZERS_JL[case]
    counts = _jl_counts(classes)
    res = modl_partition(counts, exact_max=0)
    assert res.cuts.tolist() == _jl_cuts(edges)
    if case in DISCRETIZERS_JL_GREEDY:
        assert res.cost < oracle_cost(sum_rows(counts, _jl_cuts(DISCRETIZERS_JL_GREEDY[case])))


@pytest.mark.parametrize("case", range(len(DISCRETIZERS_JL)))
def test_discretizers_jl_top_down_on_greedy_intervals(monkeypatch, case):
    """The top-down start of large tables (on greedy's intervals, forced here) finds them too.

    With ``_TOP_COARSE`` = 2 the coarse table is greedy's kept partition
    itself; case 5 needs the top-down start ([3|7|5|5] to [3|17]).
    """
    classes, edges = DISCRETIZERS_JL[case]
    monkeypatch.setattr(modl, "_TOP_COARSE", 2)
    assert modl_partition(_jl_counts(classes), exact_max=0).cuts.tolist() == _jl_cuts(edges)
    if case == 4:  # without a top-down start greedy's local optimum stays, unless windows
        monkeypatch.setattr(modl, "_coarse_top_down",
                            lambda C, removed, n: modl._greedy_starts(C, to_end=True))
        # [3|7|5|5] is four intervals: one window, solved exactly, merges three.
        assert modl_partition(_jl_counts(classes), exact_max=0).cuts.tolist() == _jl_cuts(edges)
        monkeypatch.setattr(modl, "_refine_windows", lambda C, starts: starts)
        assert modl_partition(_jl_counts(classes), exact_max=0).cuts.tolist() != _jl_cuts(edges)


@pytest.mark.parametrize("case", sorted(DISCRETIZERS_JL_GREEDY))
def test_discretizers_jl_plain_greedy(case):
    classes, _ = DISCRETIZERS_JL[case]
    cuts = greedy_merge(_jl_counts(classes)).tolist()
    assert cuts == _jl_cuts(DISCRETIZERS_JL_GREEDY[case]) == plain_greedy(_jl_counts(classes))


# ----------------------------------------------------------------------------
# Properties
# ----------------------------------------------------------------------------


@st.composite
def tables(draw, max_v=10):
    J = draw(st.integers(1, 4))
    V = draw(st.integers(1, max_v))
    rows = draw(st.lists(st.lists(st.integers(0, 6), min_size=J, max_size=J), min_size=V,
                         max_size=V))
    counts = np.asarray(rows, dtype=np.int64).reshape(V, J)
    counts[counts.sum(axis=1) == 0, 0] = 1
    return counts


def _check_result(res, counts):
    cuts = res.cuts.tolist()
    assert cuts[0] == 0 and all(a < b for a, b in zip(cuts, cuts[1:])) and cuts[-1] < len(counts)
    assert res.interval_counts.tolist() == sum_rows(counts, cuts)
    assert res.cost == pytest.approx(modl_cost(res.interval_counts), abs=1e-12)
    assert res.cost == pytest.approx(oracle_cost(res.interval_counts), abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(tables())
def test_properties(counts):
    exact = modl_partition(counts)
    greedy = modl_partition(counts, exact_max=0)
    _check_result(exact, counts)
    _check_result(greedy, counts)
    assert exact.exact
    # The optimum is at most any particular partition, greedy's included.
    assert exact.cost <= greedy.cost + 1e-9
    assert exact.cost <= oracle_cost([counts.sum(axis=0)]) + 1e-9
    assert exact.cost <= oracle_cost(counts) + 1e-9
    # The criterion does not see the score direction or the class labels.
    assert modl_partition(counts[::-1]).cost == pytest.approx(exact.cost, abs=1e-9)
    assert modl_partition(counts[:, ::-1]).cost == pytest.approx(exact.cost, abs=1e-9)
    # Splitting the table in two ranges and pre-merging each changes nothing.
    k = len(counts) // 2
    parts = [premerge_range(p)[0] for p in (counts[:k], counts[k:]) if len(p)]
    assert modl_partition(np.concatenate(parts)).cost == pytest.approx(exact.cost, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(tables(max_v=9))
def test_property_brute_force(counts):
    assert modl_partition(counts).cost == pytest.approx(brute_force(counts)[0][0], abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(tables(max_v=40), st.integers(1, 12))
def test_top_down_on_greedy_intervals_never_worse_than_greedy(counts, coarse):
    """Any coarse size: the partition is valid and at most plain greedy's cost (the guarantee)."""
    modl._TOP_COARSE, saved = coarse, modl._TOP_COARSE
    try:
        res = modl_partition(counts, exact_max=0)
    finally:
        modl._TOP_COARSE = saved
    _check_result(res, counts)
    assert res.cost <= oracle_cost(sum_rows(counts, plain_greedy(counts))) + 1e-9
    assert res.cost <= oracle_cost(sum_rows(counts, plain_greedy_path(counts))) + 1e-9


def test_interval_bounds():
    res = modl_partition(np.array([[3, 0], [2, 0], [0, 4], [0, 5]]))
    lo, hi = interval_bounds(res, np.array([0.1, 0.2, 0.7, 0.9]))
    assert lo.tolist() == [0.1, 0.7] and hi.tolist() == [0.2, 0.9]


def test_doctests():
    assert doctest.testmod(modl).failed == 0


def test_greedy_inside_a_range_is_not_safe():
    """docs/modl.md: greedy merging one range alone can merge rows that the optimum separates."""
    whole = np.array([[50, 0], [1, 0], [0, 1], [0, 50]])
    rng_rows = whole[1:3]  # a range holding one negative and one positive row
    local = greedy_merge(rng_rows)
    assert local.tolist() == [0]  # alone, the two rows are not worth a cut
    merged = np.concatenate([whole[:1], np.add.reduceat(rng_rows, local, axis=0), whole[3:]])
    best_whole, best_merged = brute_force(whole)[0][0], brute_force(merged)[0][0]
    assert brute_force(whole)[0][1] == (0, 2)
    assert best_merged > best_whole + 1.0
    # The pure-run rule, applied per range, keeps the optimum.
    parts = [premerge_range(p)[0] for p in (whole[:1], rng_rows, whole[3:])]
    assert modl_partition(np.concatenate(parts)).cost == pytest.approx(best_whole, abs=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_driver_result_does_not_depend_on_the_ranges(seed):
    """modl_from_counts gets the same rows whatever the range cuts, on the greedy path too."""
    from distcal.core.discretize import modl_from_counts

    rng = np.random.default_rng([seed, 13])
    V, J = 300, (2, 3)[seed % 2]
    counts = make_counts(rng, V, J, ("ties", "signal", "noise")[seed % 3])
    # Long pure runs as well, some of them cut by a range boundary below.
    counts[100:130] = 0
    counts[100:130, 0] = 2
    scores = np.sort(rng.random(V))
    whole = modl_from_counts([premerge_range(counts, scores)], exact_max=0)
    bounds = [0, 50, 115, 116, 250, V]
    parts = modl_from_counts([premerge_range(counts[a:b], scores[a:b])
                              for a, b in zip(bounds[:-1], bounds[1:])], exact_max=0)
    for x, y in zip(whole[:3], parts[:3]):
        assert np.array_equal(x, y)
    assert whole[3] == parts[3] and not whole[4]
    assert whole[3] == pytest.approx(oracle_cost(whole[2]), abs=1e-9)


def test_post_optimisation_ends_where_no_single_move_helps():
    """Greedy path on 2,500 mixed rows: no split, merge or re-cut of two neighbours lowers the cost.

    Every such move is priced with the oracle criterion (interval counts from
    numpy prefix sums); the spans are long enough for the module's span cache.
    """
    counts = make_counts(np.random.default_rng(21), 2500, 2, "ties")
    res = modl_partition(counts, exact_max=0)
    assert not res.exact and len(res) >= 3
    P = np.vstack([np.zeros((1, 2), dtype=np.int64), np.cumsum(counts, axis=0)])
    V, cuts = len(counts), res.cuts.tolist()

    def cost(c):
        b = list(c) + [V]
        return oracle_cost([P[y] - P[x] for x, y in zip(b[:-1], b[1:])])

    base = cost(cuts)
    assert base == pytest.approx(res.cost, abs=1e-9)
    b = cuts + [V]
    moves = [sorted(cuts + [t]) for i in range(len(cuts)) for t in range(b[i] + 1, b[i + 1])]
    for i in range(1, len(cuts)):
        without = cuts[:i] + cuts[i + 1:]
        moves.append(without)
        moves += [sorted(without + [t]) for t in range(b[i - 1] + 1, b[i + 1]) if t != cuts[i]]
    assert min(cost(m) for m in moves) >= base - 1e-9


def test_best_cut_from_the_cache_is_the_computed_one():
    counts = make_counts(np.random.default_rng(22), 1200, 3, "ties")
    P = [np.concatenate(([0.0], np.cumsum(counts[:, j]).astype(np.float64))) for j in range(3)]
    lo, hi = np.array([0, 300, 700]), np.array([300, 700, 1000])
    f_old = np.array([1.0, 2.0, 3.0])
    cache: dict = {}
    first = modl._best_cut(P, lo, hi, f_old, cache)
    assert sorted(cache) == [(0, 300), (300, 700), (700, 1000)]
    again = modl._best_cut(P, lo, hi, f_old, cache)
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    # and the cut is the least of f(left) + f(right), by the oracle
    for k in range(3):
        a, z = int(lo[k]), int(hi[k])
        left = [oracle_interval(counts[a:t].sum(axis=0).tolist()) for t in range(a + 1, z)]
        right = [oracle_interval(counts[t:z].sum(axis=0).tolist()) for t in range(a + 1, z)]
        sums = np.add(left, right)
        assert first[1][k] == a + 1 + int(np.argmin(sums))
        assert first[0][k] == pytest.approx(sums.min() - f_old[k], abs=1e-9)


# ----------------------------------------------------------------------------
# Windows of consecutive intervals solved exactly (docs/modl.md, point 5)
# ----------------------------------------------------------------------------


def _brute_window(counts, a: int, b: int, kmax: int) -> list[float]:
    """Least sum of Boullé's per-interval terms over k-partitions of rows a..b-1, k = 1..kmax."""
    rows = [list(map(int, r)) for r in counts[a:b]]
    n = len(rows)
    best = []
    for k in range(1, min(kmax, n) + 1):
        least = math.inf
        for inner in itertools.combinations(range(1, n), k - 1):
            cuts = (0,) + inner
            least = min(least, sum(oracle_interval(r) for r in sum_rows(rows, cuts)))
        best.append(least)
    return best


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), V=st.integers(1, 11), J=st.sampled_from([2, 3]),
       kind=st.sampled_from(["signal", "noise", "ties"]), kmax=st.integers(1, 6))
def test_window_dp_against_brute_force(seed, V, J, kind, kmax):
    """F_k of a window (the numpy DP) is the least over all its k-partitions; S_k attains it."""
    rng = np.random.default_rng(seed)
    C = make_counts(rng, V + 4, J, kind)
    a = int(rng.integers(0, 4))
    b = a + V
    Pi = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(C, axis=0)])
    P = [Pi[:, j].astype(np.float64) for j in range(J)]
    F, S = modl._window_dp(P, a, b, kmax)
    want = _brute_window(C, a, b, kmax)
    assert F.shape[0] == len(want) + 1
    for k, least in enumerate(want, start=1):
        assert F[k] == pytest.approx(least, rel=1e-12, abs=1e-9)
        cuts = [int(x) for x in S[k, :k]]
        assert cuts[0] == 0 and all(x < y for x, y in zip(cuts, cuts[1:])) and cuts[-1] < V
        got = sum(oracle_interval(r) for r in sum_rows(C[a:b].tolist(), cuts))
        assert got == pytest.approx(least, rel=1e-12, abs=1e-9)


def _plain_window_dp(counts, a: int, b: int, kmax: int) -> list[float]:
    """F_k of rows a..b-1, k = 1..kmax, by the textbook recurrence, one end v at a time."""
    J = counts.shape[1]
    n = b - a
    Pi = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(counts[a:b], axis=0)])
    counts_uv = np.maximum(Pi[None, :, :] - Pi[:, None, :], 0)  # [u, v]: rows u..v-1 (v > u)
    t = (gammaln(counts_uv.sum(axis=2) + J) - gammaln(J)
         - gammaln(counts_uv + 1.0).sum(axis=2))
    D = np.full((kmax + 1, n + 1), np.inf)
    D[1, 1:] = t[0, 1:]
    for k in range(2, kmax + 1):
        for v in range(k, n + 1):
            D[k, v] = (D[k - 1, k - 1:v] + t[k - 1:v, v]).min()
    return [float(D[k, n]) for k in range(1, min(kmax, n) + 1)]


@pytest.mark.parametrize("J", [2, 3, 5])
@pytest.mark.parametrize("heavy", [False, True])
def test_windows_dp_wide_spans_against_plain_dp(J, heavy):
    """Runs of overlapping spans of 150-420 rows (several column blocks of the numpy DP, f
    values shared between spans): F_k as the textbook recurrence's, and each S_k attains it."""
    rng = np.random.default_rng(7 * J + heavy)
    V = 900
    centres = np.linspace(0.0, 1.0, J)
    pos = np.sort(rng.random(V))
    p = np.exp(-((pos[:, None] - centres[None, :]) ** 2) * 8.0)
    p /= p.sum(axis=1, keepdims=True)
    n = rng.integers(200, 2000, V) if heavy else rng.integers(1, 6, V)
    C = np.stack([rng.multinomial(k, q) for k, q in zip(n, p)]).astype(np.int64)
    Pi = np.vstack([np.zeros((1, J), dtype=np.int64), np.cumsum(C, axis=0)])
    P = [Pi[:, j].astype(np.float64) for j in range(J)]
    spans = [(0, 150), (40, 300), (120, 420), (300, 560), (310, 480)]
    kmax = 5
    for (a, b), (F, S) in zip(spans, modl._windows_dp(P, spans, kmax)):
        want = _plain_window_dp(C, a, b, kmax)
        assert F[1:].tolist() == pytest.approx(want, rel=1e-12)
        for k in range(1, kmax + 1):
            cuts = [int(x) for x in S[k, :k]]
            assert cuts[0] == 0 and all(x < y for x, y in zip(cuts, cuts[1:])) and cuts[-1] < b - a
            got = sum(oracle_interval(r) for r in sum_rows(C[a:b].tolist(), cuts))
            assert got == pytest.approx(want[k - 1], rel=1e-12)


def _window_optimal(C, starts, w: int, max_rows: int) -> bool:
    """No re-partition of any window of w consecutive intervals (<= max_rows rows) is cheaper."""
    K = len(C)
    starts = [int(x) for x in starts]
    cost = oracle_cost(sum_rows(C, starts))
    I = len(starts)
    w = min(w, I)
    for i in range(I - w + 1):
        a, b = starts[i], (starts[i + w] if i + w < I else K)
        if b - a > max_rows:
            continue
        for k in range(1, min(w + 1, b - a) + 1):
            for inner in itertools.combinations(range(a + 1, b), k - 1):
                cand = starts[:i] + [a, *inner] + starts[i + w:]
                if oracle_cost(sum_rows(C, cand)) < cost - 1e-9:
                    return False
    return True


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), V=st.integers(2, 14), J=st.sampled_from([2, 3]),
       kind=st.sampled_from(["signal", "noise", "ties"]), max_rows=st.sampled_from([5, 1000]))
def test_refine_windows_is_window_optimal_and_never_worse(seed, V, J, kind, max_rows):
    """From any partition: never dearer, and no window (of at most max_rows rows) can improve.

    With max_rows = 5 wider windows are left alone (checked: only windows of
    at most 5 rows are then claimed optimal).
    """
    rng = np.random.default_rng(seed)
    C = make_counts(rng, V, J, kind)
    inner = sorted(rng.choice(np.arange(1, V), int(rng.integers(0, V)), replace=False).tolist())
    start = [0, *inner]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(modl, "_WINDOW_ROWS", max_rows)
        out = modl._refine_windows(C, np.asarray(start)).tolist()
    assert out[0] == 0 and all(x < y for x, y in zip(out, out[1:])) and out[-1] < V
    assert oracle_cost(sum_rows(C, out)) <= oracle_cost(sum_rows(C, start)) + 1e-9
    assert _window_optimal(C, out, modl._WINDOW_INTERVALS, max_rows)


def _heavy_rows(seed: int, V: int = 1000) -> np.ndarray:
    """V distinct scores with ~1,000 rows each, P(y=1 | s) = s^2: the benchmark's 1e4-score data."""
    rng = np.random.default_rng(seed)
    s = np.sort(rng.random(V))
    n = rng.poisson(1000, V) + 1
    pos = rng.binomial(n, s * s)
    return np.column_stack([n - pos, pos]).astype(np.int64)


@pytest.mark.parametrize("seed", [0, 2])
def test_windows_reach_the_exact_optimum_on_heavy_rows(monkeypatch, seed):
    """1,000 heavy rows: the greedy path (forced) reaches the exact DP's cost with the windows.

    Without them (moves only) it stops short on these tables (by 4.0 and
    4.4 in ~420,000): the test fails if the windows do nothing.
    """
    C = _heavy_rows(seed)
    exact = modl_partition(C)
    assert exact.exact
    greedy = modl_partition(C, exact_max=0)
    assert not greedy.exact
    assert greedy.cost == pytest.approx(exact.cost, rel=1e-13)
    monkeypatch.setattr(modl, "_refine_windows", lambda C, starts: starts)
    assert modl_partition(C, exact_max=0).cost > exact.cost + 1.0


@pytest.mark.slow
def test_windows_hit_rate_on_heavy_rows(monkeypatch):
    """Eight such tables: the optimum on 7 with the windows (seed 1 misses by 4.2), on none without.

    The rate docs/modl.md reports; a change that loses a hit or finds
    more fails here and is to be measured and written down.
    """
    tables = [_heavy_rows(seed) for seed in range(8)]
    exact = [modl_partition(C).cost for C in tables]
    hits = [modl_partition(C, exact_max=0).cost <= e + 1e-9 for C, e in zip(tables, exact)]
    assert hits == [True, False, True, True, True, True, True, True]
    monkeypatch.setattr(modl, "_refine_windows", lambda C, starts: starts)
    assert not any(modl_partition(C, exact_max=0).cost <= e + 1e-9
                   for C, e in zip(tables, exact))


def test_starts_after_a_full_path_equal_the_marked_rows():
    """Intervals left after n merges: from the later merges of a full path, as by marking rows."""
    rng = np.random.default_rng(12)
    for K in (1, 2, 3, 50, 1000):
        removed = rng.permutation(np.arange(1, K))  # a path down to one interval
        for n in {0, K // 3, K - 1}:
            alive = np.ones(K, dtype=bool)
            alive[removed[:n]] = False
            want = np.flatnonzero(alive).tolist()
            assert modl._starts_after(K, removed, n).tolist() == want
            assert modl._starts_after(K, removed.tolist(), n).tolist() == want
    # A path that stopped early (plain greedy): the rows are marked.
    assert modl._starts_after(6, [2, 4], 2).tolist() == [0, 1, 3, 5]
