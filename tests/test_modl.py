"""MODL discretisation (distcal.core.modl) against independent oracles.

The oracles below recompute the criterion from its definition with
math.lgamma (never with the module's functions): brute force over all
2^(V-1) partitions, a plain O(V^3) dynamic programme, plain O(V^2) greedy
merging, and a plain grouping of scores at row-count quantiles.
"""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distcal.core import modl
from distcal.core.discretize import modl_from_counts
from distcal.core.modl import (
    granularise,
    greedy_merge,
    group_range,
    interval_bounds,
    join_groups,
    modl_cost,
    modl_partition,
    plan_groups,
    premerge_range,
    range_summary,
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


def canonical_f(row: list[int]) -> float:
    """f of one interval as the module documents its floating-point form.

    lgamma(n+J) - lgamma(J) - sum_j lgamma(n_j+1), the class terms summed in
    ascending order of the counts: f is then a function of the multiset of
    counts, so mathematically equal gains (mirrored pairs, swapped classes)
    compare equal here and in the module, and "leftmost among equal gains"
    means the same pair in both.
    """
    n, J = sum(row), len(row)
    return math.lgamma(n + J) - math.lgamma(J) - sum(math.lgamma(x + 1) for x in sorted(row))


def plain_greedy(counts, to_end: bool = False) -> list[int]:
    """Greedy bottom-up merging from single rows, every gain recomputed at each step (O(V^2)).

    Gain of a pair: f(a+b) - (f(a) + f(b)); the least, leftmost on ties.
    Stops when the merge does not lower the cost, or with ``to_end`` goes on
    to one interval and returns the cheapest partition met.
    """
    rows = [list(map(int, r)) for r in counts]
    N = sum(map(sum, rows))
    ivals = [(i, r) for i, r in enumerate(rows)]
    best_cost, best = oracle_cost(rows), [s for s, _ in ivals]
    while len(ivals) > 1:
        I = len(ivals)
        gains = [canonical_f([x + y for x, y in zip(a, b)]) - (canonical_f(a) + canonical_f(b))
                 for (_, a), (_, b) in zip(ivals[:-1], ivals[1:])]
        i = min(range(I - 1), key=lambda k: (gains[k], k))
        if not to_end and gains[i] + math.log((I - 1) / (N + I - 1)) >= 0.0:
            break
        (s, a), (_, b) = ivals[i], ivals[i + 1]
        ivals[i:i + 2] = [(s, [x + y for x, y in zip(a, b)])]
        cost = oracle_cost([r for _, r in ivals])
        if cost < best_cost:
            best_cost, best = cost, [s for s, _ in ivals]
    return best if to_end else [s for s, _ in ivals]


def plain_groups(counts, G: int) -> list[int]:
    """First rows of Khiops-style groups: pure runs merged, then a run starting s rows in
    goes to group floor(s G / N); written from the contract, with Python ints."""
    runs = pure_runs(counts)
    sizes = [int(x) for x in np.asarray(counts).sum(axis=1)]
    N, out, last = sum(sizes), [], None
    for r in runs:
        g = sum(sizes[:r]) * G // N
        if g != last:
            out.append(r)
            last = g
    return out

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




@pytest.mark.parametrize("V,J,kind,seed", [(V, J, kind, seed) for seed in range(2) for J in (2, 3)
                                           for kind in ("signal", "noise", "ties")
                                           for V in (40, 160)])
def test_greedy_is_never_worse_than_the_cheapest_point_of_the_plain_path(V, J, kind, seed):
    counts = make_counts(np.random.default_rng([V, J, seed, 2]), V, J, kind)
    res = modl_partition(counts, exact_max=0)
    assert res.cost <= oracle_cost(sum_rows(counts, plain_greedy(counts, to_end=True))) + 1e-9


def test_greedy_from_pure_runs_equals_plain_greedy():
    """All rows pure: greedy from the pure runs gives plain greedy's partition from single rows."""
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
        exact_cost = plain_dp(counts)
        greedy = modl_partition(counts, exact_max=0)
        assert greedy.cost >= exact_cost - 1e-9
        hits += greedy.cost <= exact_cost + 1e-9
        total += 1
    assert hits / total >= 0.9, hits / total


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


@pytest.mark.parametrize("case", sorted(DISCRETIZERS_JL_GREEDY))
def test_discretizers_jl_plain_greedy(case):
    classes, _ = DISCRETIZERS_JL[case]
    cuts = greedy_merge(_jl_counts(classes)).tolist()
    assert cuts == _jl_cuts(DISCRETIZERS_JL_GREEDY[case]) == plain_greedy(_jl_counts(classes))


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


@settings(max_examples=60, deadline=None)
@given(tables(max_v=40))
def test_greedy_path_never_worse_than_plain_greedy(counts):
    """The guarantee beyond exact_max: at most plain greedy's cost (from single rows)."""
    res = modl_partition(counts, exact_max=0)
    _check_result(res, counts)
    assert res.cost <= oracle_cost(sum_rows(counts, plain_greedy(counts))) + 1e-9


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




# ----------------------------------------------------------------------------
# Granularisation (max_groups)
# ----------------------------------------------------------------------------


def runs_table(rng: np.random.Generator, V: int, J: int) -> np.ndarray:
    """Mixed rows and pure runs of several lengths, some of them heavy."""
    counts = make_counts(rng, V, J, ("ties", "signal")[int(rng.integers(2))])
    for _ in range(int(rng.integers(0, 5))):
        a = int(rng.integers(0, V))
        b = min(V, a + int(rng.integers(1, 40)))
        counts[a:b] = 0
        counts[a:b, int(rng.integers(J))] = rng.integers(1, 30, b - a)
    return counts


@pytest.mark.parametrize("seed", range(30))
def test_groups_against_the_contract(seed):
    rng = np.random.default_rng([seed, 31])
    V, J = int(rng.integers(1, 400)), int(rng.choice([2, 3, 5]))
    counts = runs_table(rng, V, J)
    G = int(rng.integers(1, 60))
    runs = pure_runs(counts)
    got = granularise(counts, G)
    if len(runs) <= G:
        assert got is None
        return
    starts = got.tolist()
    assert starts == plain_groups(counts, G)
    assert len(starts) <= G and starts[0] == 0 and starts == sorted(set(starts))
    assert set(starts) <= set(runs)  # never inside a pure run, so never inside a distinct score
    # About equal: every group holds fewer than N/G + m rows, m the heaviest run.
    N = int(counts.sum())
    m = max(int(counts[a:b].sum()) for a, b in zip(runs, runs[1:] + [V]))
    sizes = [int(counts[a:b].sum()) for a, b in zip(starts, starts[1:] + [V])]
    assert max(sizes) < N / G + m


@pytest.mark.parametrize("seed", range(30))
def test_groups_from_range_totals_equal_the_whole_table(seed):
    """Summaries per range, the plan on them, grouping per range, joined: the whole table's."""
    rng = np.random.default_rng([seed, 37])
    V, J = int(rng.integers(2, 400)), int(rng.choice([2, 3]))
    counts = runs_table(rng, V, J)
    scores = np.sort(rng.choice(10 * V, V, replace=False)).astype(np.float64)
    G = int(rng.integers(1, 40))
    bounds = np.unique(np.concatenate(([0, V], rng.integers(1, V, int(rng.integers(0, 8))))))
    ranges = [(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    plan = plan_groups([range_summary(counts[a:b]) for a, b in ranges], G)
    whole = granularise(counts, G)
    if whole is None:
        assert plan is None
        return
    joined, lo, hi = join_groups([group_range(counts[a:b], spec, scores[a:b])
                                  for (a, b), spec in zip(ranges, plan)])
    ends = np.append(whole[1:], V) - 1
    assert joined.tolist() == np.add.reduceat(counts, whole, axis=0).tolist()
    assert lo.tolist() == scores[whole].tolist() and hi.tolist() == scores[ends].tolist()


@pytest.mark.parametrize("seed", range(12))
def test_partition_of_a_grouped_table_is_the_optimum_of_the_groups(seed):
    """Grouping, then the guarantees on the grouped table: brute force over the groups."""
    rng = np.random.default_rng([seed, 41])
    counts = make_counts(rng, 200, int(rng.choice([2, 3])), "ties")
    G = int(rng.integers(2, 10))  # fewer than the 200 mostly mixed rows
    res = modl_partition(counts, max_groups=G)
    starts = plain_groups(counts, G)
    assert res.groups == len(starts) and res.exact
    best_cost, best_cuts = brute_force(np.asarray(sum_rows(counts, starts)))[0]
    assert res.cost == pytest.approx(best_cost, abs=1e-9)
    assert set(res.cuts.tolist()) <= set(starts)
    assert modl_partition(counts).groups is None


def test_grouped_driver_table_equals_the_local_one():
    """modl_from_counts on joined per-range groups: the partition modl_partition finds alone."""
    rng = np.random.default_rng(43)
    counts = make_counts(rng, 3000, 2, "ties")
    counts[1000:1100] = [0, 3]  # a pure run across a range boundary
    scores = np.arange(3000, dtype=np.float64)
    G = 100
    ranges = [(0, 700), (700, 1050), (1050, 1051), (1051, 2200), (2200, 3000)]
    plan = plan_groups([range_summary(counts[a:b]) for a, b in ranges], G)
    table = join_groups([group_range(counts[a:b], s, scores[a:b])
                         for (a, b), s in zip(ranges, plan)])
    lo, hi, ic, cost, exact, groups = modl_from_counts([table], max_groups=G,
                                                       groups=table[0].shape[0])
    local = modl_partition(counts, max_groups=G)
    assert groups == local.groups == len(plain_groups(counts, G))
    assert lo.tolist() == local.cuts.astype(float).tolist()
    assert ic.tolist() == local.interval_counts.tolist() and cost == local.cost
    assert cost <= oracle_cost(sum_rows(np.asarray(sum_rows(counts, plain_groups(counts, G))),
                                        greedy_merge(np.asarray(sum_rows(
                                            counts, plain_groups(counts, G)))))) + 1e-9


def test_many_keys_bring_a_bounded_table_to_the_driver_per_job():
    """MODL of many keys (run_plans with a budget, as an engine's ``result_bytes``): the
    second pass runs in waves of keys whose tables add up to at most the budget (a key
    alone may hold more), and every key's model is the one its own run_plan finds."""
    from distcal.core.discretize import modl_plan
    from distcal.core.distinct import pool_ties
    from distcal.core.keyed import KeyedTable, merge_keyed
    from distcal.core.plans import run_plan, run_plans

    rng = np.random.default_rng(7)
    tables = {}
    for c, n in enumerate([40, 300, 90, 2000, 60, 60, 500]):
        s = np.round(rng.random(n), 2 if c == 3 else 3)
        t = pool_ties(s, (rng.random(n) < s).astype(float))
        cut = [0, len(t) // 3, 2 * len(t) // 3, len(t)]
        tables[c] = [t.slice(a, b) for a, b in zip(cut[:-1], cut[1:])]
    ranges = [merge_keyed([KeyedTable.single(tables[c][i], (None, c)) for c in tables])
              for i in range(3)]
    G, budget = 150, 40 * 150
    jobs = []

    def map_parts(fn):  # each job: (keys, bytes of the tables it brings back)
        out = [fn(r) for r in ranges]
        if fn.where is None:  # the first pass: a few numbers per key
            jobs.append((len(tables), 0))
            return out
        grouped = sum(len(r[0]) for results, _, _ in out for r in results.values())
        merged = sum(len(item[0]) for _, batched, _ in out for _, items in batched
                     for item in items)
        jobs.append((len(fn.where), 40 * grouped + 32 * merged))
        return out

    got = run_plans(lambda key: modl_plan(max_groups=G), map_parts, budget=budget)
    alone = {(None, c): run_plan(modl_plan(max_groups=G), lambda fn, ts=ts: [fn(t) for t in ts])
             for c, ts in tables.items()}
    assert got.keys() == alone.keys()
    for key, (blocks, cost, exact, groups) in got.items():
        want = alone[key]
        for name in ("score_min", "score_max", "weight", "positives"):
            np.testing.assert_array_equal(getattr(blocks, name), getattr(want[0], name))
        assert (cost, exact, groups) == want[1:]
    assert any(g[3] for g in got.values())  # a key grouped: its table alone is G rows
    waves = jobs[1:]  # after the first pass (every key's summaries)
    assert len(waves) >= 3
    assert all(size <= budget or keys == 1 for keys, size in waves), waves
    assert sum(keys for keys, _ in waves) == len(tables)
    jobs.clear()
    assert run_plans(lambda key: modl_plan(max_groups=G), map_parts).keys() == got.keys()
    assert len(jobs) == 2  # no budget: one job for every key's second pass
