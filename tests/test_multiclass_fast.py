"""The fast local multiclass paths against independent oracles.

* Keyed pooling of one-vs-rest rows (``pool_keyed``, two keys: 0/1 labels,
  unit weights) against a brute-force table built with Python dicts, and the one-vs-rest models on
  heavily tied scores against scikit-learn's IsotonicRegression per class.
* Temperature scaling from any start (the subsample start, the stopping
  rule on the estimated error left) against scipy's root of the gradient;
  many keys' sums in one pass over the rows against scipy, key by key; many
  keys' searches at once against each key's alone.
* Reading score vectors: the concatenating fast path against the Arrow
  path, and the NaN / infinity row checks against a brute-force scan.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.special import logsumexp, softmax
from sklearn.isotonic import IsotonicRegression

from distcal import fit as fit_multiclass
from distcal.core.distinct import pool_ties
from distcal.core.keyed import pool_keyed
from distcal.core.rows import Problems, RowPart, read_scores
from distcal.core.temperature import (
    BETA_MAX,
    BETA_MIN,
    TemperatureSearch,
    _starts,
    _TemperatureSums,
    center_logits,
    fit_temperature,
    temperature_sums,
)
from distcal.errors import DataError

VALUES = [-np.inf, -2.5, -1.0, -0.0, 0.0, 1e-300, 0.5, 3.0, np.inf]


def _brute_table(scores, positive):
    """{score: [rows, positives]} with Python floats (-0.0 == 0.0 as a dict key)."""
    table = defaultdict(lambda: [0, 0])
    pos = set(int(i) for i in positive)
    for i, s in enumerate(scores):
        table[float(s)][0] += 1
        table[float(s)][1] += i in pos
    return sorted(table.items())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(VALUES),
                          st.floats(-4, 4, allow_nan=False, width=16)),
                min_size=1, max_size=60),
       st.data())
def test_keyed_pooling_of_one_vs_rest_rows_is_the_distinct_table(scores, data):
    s = np.array(scores, dtype=np.float64)
    positive = np.array(sorted(data.draw(st.sets(st.integers(0, len(s) - 1)))), dtype=np.intp)
    y = np.zeros(len(s))
    y[positive] = 1.0
    # class 1's rows (key 1) and class 0's (key 0: labels flipped), as one-vs-rest makes them
    keyed = pool_keyed(np.repeat([0, 1], len(s)), [(None, 0), (None, 1)], np.tile(s, 2),
                       np.concatenate([1.0 - y, y]), None)
    got = keyed.key_table(keyed.keys.index((None, 1)))
    want = _brute_table(scores, positive)
    assert got.score.tolist() == [v for v, _ in want]
    assert not np.signbit(got.score[got.score == 0]).any()  # -0.0 reported as 0.0
    assert got.count.tolist() == [c for _, (c, _) in want]
    assert got.positives.tolist() == [float(p) for _, (_, p) in want]
    assert got.weight.tolist() == [float(c) for _, (c, _) in want]
    assert got.label_sum.tolist() == got.positives.tolist() and got.binary
    # and the general pooling builds the same table, bit for bit
    ref = pool_ties(s, y, path="argsort")
    for f in ("score", "weight", "positives", "count", "label_sum"):
        a, b = getattr(got, f), getattr(ref, f)
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_one_vs_rest_on_tied_scores_matches_isotonic_regression():
    # Unit weights take the value-sort pooling: scores rounded to one decimal
    # (many ties), -0.0 among them; scikit-learn's IsotonicRegression per class
    # is the oracle (its own tie pooling), then the rows are normalised.
    rng = np.random.default_rng(3)
    n, k = 4000, 4
    S = np.round(rng.normal(size=(n, k)), 1)
    S[::7, 0] = -0.0
    y = np.argmax(2 * S + rng.gumbel(size=(n, k)), axis=1)  # y ~ softmax(2 S)
    df = pd.DataFrame(S, columns=[f"s{j}" for j in range(k)]).assign(label=y)
    model = fit_multiclass(df, method="isotonic", score_cols=[f"s{j}" for j in range(k)])
    q = np.round(rng.normal(size=(500, k)), 1)
    raw = np.column_stack([
        IsotonicRegression(out_of_bounds="clip").fit(S[:, j], (y == j).astype(float))
        .predict(q[:, j]) for j in range(k)])
    want = raw / raw.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict(q), want, rtol=0, atol=1e-12)
    assert model.class_model(2).n_rows == n and model.class_model(2).weight_total == n


# -- temperature ----------------------------------------------------------------

def _grad(beta, z, y, w):
    p = softmax(beta * z, axis=1)
    return float(np.sum(w * ((p * z).sum(axis=1) - z[np.arange(len(y)), y])))


def _problem(seed, n=2000, k=4):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2.0, (n, k))
    y = np.argmax(0.5 * z + rng.gumbel(size=(n, k)), axis=1)  # y ~ softmax(0.5 z)
    return z, y, rng.uniform(0.2, 2.0, n)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 3), st.floats(-9.9, 9.9))
def test_temperature_from_any_start_is_the_root(seed, log_start):
    z, y, w = _problem(seed)
    zc = center_logits(z)
    beta, info = fit_temperature(lambda b: [temperature_sums(zc, y, w, b, centered=True)],
                                 start=math.exp(log_start))
    ref = brentq(lambda b: _grad(b, z, y, w), 1e-3, 1e3, xtol=1e-16, rtol=1e-15)
    assert beta == pytest.approx(ref, rel=1e-12)
    assert info["passes"] <= 40


def test_temperature_from_the_subsample_start_takes_few_passes():
    # 70,000 rows, the search started from the minimiser on a strided subsample
    # (every 4th row): from there Newton is in its quadratic regime and stops
    # after about three passes over all rows.
    z, y, w = _problem(11, n=70_000, k=3)
    ref = brentq(lambda b: _grad(b, z, y, w), 0.05, 20.0, xtol=1e-16, rtol=1e-15)
    zc = center_logits(z)
    zs, ys, ws = np.ascontiguousarray(zc[::4]), y[::4], w[::4]
    start, _ = fit_temperature(lambda b: [temperature_sums(zs, ys, ws, b, centered=True)])
    assert start != 1.0 and abs(start / ref - 1) < 0.1
    passes = []

    def parts(b):
        passes.append(b)
        return [temperature_sums(zc[i:i + 9000], y[i:i + 9000], w[i:i + 9000], b,
                                 centered=True) for i in range(0, len(y), 9000)]

    beta, info = fit_temperature(parts, start=start)
    assert beta == pytest.approx(ref, rel=1e-12)
    assert info["passes"] == len(passes) <= 4
    # The local fit (from its own subsample's minimiser) gives the same beta.
    df = pd.DataFrame({"z": list(z), "y": y, "w": w})
    model = fit_multiclass(df, method="temperature", score_col="z", label_col="y",
                           weight_col="w")
    assert model.beta == pytest.approx(ref, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(2, 5), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_many_keys_temperature_sums_in_one_pass_are_each_keys_own(n, k, n_keys, seed):
    # One pass over a part's rows for every key (segment) at its own beta: each key's
    # [loss, grad, hess] against scipy over that key's rows only; rows of no key (-1)
    # and keys not asked count nowhere, and the other keys do not change a key's sums.
    rng = np.random.default_rng(seed)
    z, y, w = rng.normal(0, 3, (n, k)), rng.integers(0, k, n), rng.uniform(0.1, 3, n)
    codes = rng.integers(-1, n_keys, n)
    betas = rng.uniform(0.2, 4.0, n_keys)
    which = np.where(rng.random(n_keys) < 0.8, rng.permutation(n_keys), -1)
    rows = RowPart(z, y.astype(np.float64), w)
    sums = _TemperatureSums.pack([_TemperatureSums(b, "logits") for b in betas])
    got = sums.run_rows(which, codes, rows)
    for key in range(n_keys):
        mine = codes == key
        if which[key] < 0 or not mine.any():
            assert not got[key].any()
            continue
        beta, zk, yk, wk = betas[which[key]], z[mine], y[mine], w[mine]
        p = softmax(beta * zk, axis=1)
        ez = (p * zk).sum(axis=1)
        want = [np.sum(wk * (logsumexp(beta * zk, axis=1) - beta * zk[np.arange(len(yk)), yk])),
                np.sum(wk * (ez - zk[np.arange(len(yk)), yk])),
                np.sum(wk * ((p * zk * zk).sum(axis=1) - ez ** 2))]
        np.testing.assert_allclose(got[key], want, rtol=1e-9, atol=1e-9 * np.sum(wk))
        alone = np.where(np.arange(n_keys) == key, which, -1)
        np.testing.assert_array_equal(sums.run_rows(alone, codes, rows)[key], got[key])


def test_temperature_started_at_its_optimum_stops_after_one_pass():
    # A start at the optimum to rounding (a segment whose sample is all its rows): L'
    # there rounds to about +-1e-17 and Newton's step to 0. That is the answer, not a
    # point outside the bracket [start, ...] to bisect from (up to 48 passes before).
    for seed in range(160, 200):
        z, y, w = _problem(seed, n=int(np.random.default_rng(seed).integers(5, 300)), k=3)

        def sums(b, z=z, y=y, w=w):
            return [temperature_sums(z, y, w, b)]

        beta, _ = fit_temperature(sums)
        again, info = fit_temperature(sums, start=beta)
        assert again == pytest.approx(beta, rel=1e-13)
        assert info["passes"] == 1
        assert again == pytest.approx(_gradient_oracle(z, y, w), rel=1e-12)


@pytest.mark.parametrize("start", [1.0, 5.0, 1e3, 1e4])
def test_temperature_separable_reaches_the_bound_from_any_start(start):
    # Separable rows: the loss falls for ever; the minimiser in the bounds is
    # e^10. A trusted first step must not let Newton crawl (steps of constant size).
    z = np.array([[2.0, 0.0, 0.5], [0.0, 2.0, 0.5], [0.5, 0.0, 2.0]] * 5)
    y = np.array([0, 1, 2] * 5)
    zc = center_logits(z)
    beta, info = fit_temperature(lambda b: [temperature_sums(zc, y, None, b, centered=True)],
                                 start=start)
    assert beta == pytest.approx(BETA_MAX, rel=1e-12)
    assert info["passes"] <= 20


def _gradient_oracle(z, y, w):
    """The minimiser of L within [e^-10, e^10] from scipy: a bound where L' keeps its sign,
    else the root of L' (brentq)."""
    if _grad(BETA_MIN, z, y, w) >= 0:
        return BETA_MIN
    if _grad(BETA_MAX, z, y, w) <= 0:
        return BETA_MAX
    return brentq(lambda b: _grad(b, z, y, w), BETA_MIN, BETA_MAX, xtol=1e-16, rtol=1e-15)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_many_keys_temperature_searched_together_are_each_keys_own(data):
    """One search for many keys (arrays over the keys): each key's beta, passes and
    steps are bit for bit those of the key searched alone, from any start (a bound, far
    off, NaN), with a cap on the steps or not, for keys with an optimum inside the
    bounds, separable ones (the upper bound), inverted ones (the lower bound) and
    saturated ones (probabilities 0/1: L flat in floating point); and the optimum is
    scipy's. The starts from the keys' samples are each key's own alike."""
    seed = data.draw(st.integers(0, 2**32 - 1))
    kinds = data.draw(st.lists(st.sampled_from(["fit", "separable", "inverted", "saturated"]),
                               min_size=1, max_size=8))
    max_iter = data.draw(st.sampled_from([2, 200]))
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))  # (the keys of one fit share their classes)
    problems, starts, samples = [], [], []
    for kind in kinds:
        n = int(rng.integers(30, 200))
        z = rng.normal(0, 2.0, (n, k))
        y = {"fit": np.argmax(0.5 * z + rng.gumbel(size=(n, k)), axis=1),
             "separable": np.argmax(z, axis=1), "inverted": np.argmin(z, axis=1),
             "saturated": np.argmax(z, axis=1)}[kind]
        if kind == "saturated":
            z *= 1e6
        w = rng.uniform(0.2, 2.0, n)
        problems.append((z, y, w))
        starts.append(data.draw(st.sampled_from([1.0, BETA_MIN, BETA_MAX, np.nan, np.inf]) |
                                st.floats(1e-6, 1e6)))
        cut = np.sort(rng.integers(0, n + 1, 2))
        samples.append([(False, z[a:b:2], y[a:b:2].astype(float), w[a:b:2])
                        for a, b in zip([0, *cut], [*cut, n])])

    def sums(i, beta):
        z, y, w = problems[i]
        return temperature_sums(z, y, w, beta)

    search = TemperatureSearch(np.array(starts), max_iter)
    while (at := search.asked()).shape[0]:
        search.send(np.array([sums(i, search.point[i]) for i in at]))
    together = _starts(samples, "logits")
    for i, kind in enumerate(kinds):
        beta, info = fit_temperature(lambda b, i=i: [sums(i, b)], max_iter, start=starts[i])
        assert (search.beta[i], search.passes[i], search.iterations[i]) == \
            (beta, info["passes"], info["iterations"])
        assert together[i] == _starts([samples[i]], "logits")[0]
        if max_iter == 200 and kind == "separable":
            # L(b) = sum w log(1 + sum_{j != y} e^{b (z_j - z_y)}), z_j < z_y: decreasing,
            # so the upper bound, even where L' rounds to 0 below it (scipy's brentq
            # then stops short of the bound: seed 41 gives 22004.8).
            assert beta == BETA_MAX
        elif max_iter == 200 and kind != "saturated":
            assert beta == pytest.approx(_gradient_oracle(*problems[i]), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.booleans(), st.integers(0, 2**32 - 1))
def test_center_logits_subtracts_the_row_maximum(n, k, fortran, seed):
    z = np.random.default_rng(seed).normal(0, 50, (n, k))
    z = np.asfortranarray(z) if fortran else z
    got = center_logits(z)
    want = np.array([[v - max(row) for v in row] for row in z.tolist()])
    assert got.flags.c_contiguous and np.array_equal(got, want)


# -- reading vectors -----------------------------------------------------------

@pytest.mark.parametrize("cells", [
    [np.array([0.1, 0.9]), [0.5, 0.5], np.array([0.3, 0.7])],        # arrays and lists
    [np.array([0.1, 0.9]), np.array([0.5]), np.array([0.3, 0.7])],   # ragged
    [np.array([0.1, 0.9]), None, np.array([0.3, 0.7])],              # null
    [np.array([0.1, 0.9]), "ab", np.array([0.3, 0.7])],              # text of length 2
    [np.array([1, 0]), np.array([0, 1]), np.array([1, 1])],          # integers
])
def test_vector_fast_path_agrees_with_arrow(cells):
    df = pd.DataFrame({"v": pd.Series(cells, dtype=object), "label": [0, 1, 1]})
    try:
        table = pa.table({"v": pa.array(cells, from_pandas=True), "label": [0, 1, 1]})
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        with pytest.raises(DataError, match="column 'v'"):
            fit_multiclass(df, score_col="v")
        return
    outcomes = []
    for data in (df, table):
        try:
            m = fit_multiclass(data, method="isotonic", score_col="v", on_invalid="drop")
            outcomes.append((m.n_rows, m.dropped_rows, m.predict([[0.2, 0.8]]).tolist()))
        except DataError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]


def test_vector_row_checks_find_every_nan_and_infinity():
    rng = np.random.default_rng(4)
    m = rng.normal(size=(400, 5))
    cells = rng.integers(0, 400, 30), rng.integers(0, 5, 30)
    m[cells] = rng.choice([np.nan, np.inf, -np.inf], 30)
    m[7] = [1e308, 1e308, 0.0, 0.0, 0.0]  # overflows in a row sum, yet finite
    m[9] = [np.inf, -np.inf, 0.0, 0.0, 1.0]
    df = pd.DataFrame({"v": list(m)})
    problems = Problems(400)
    read_scores(df, "v", None, problems, finite=True)
    counts = {p: c for _, p, c in problems.items}
    assert counts["contain NaN or null"] == sum(any(math.isnan(v) for v in r) for r in m.tolist())
    assert counts["contain infinite values (this method needs finite scores)"] == \
        sum(any(math.isinf(v) for v in r) for r in m.tolist())
    assert not problems.bad[7] and problems.bad[9]


def test_score_column_checks_find_every_nan_infinity_and_text():
    rng = np.random.default_rng(6)
    m = rng.normal(size=(300, 4))
    cells = rng.integers(0, 300, 25), rng.integers(0, 4, 25)
    m[cells] = rng.choice([np.nan, np.inf, -np.inf], 25)
    m[5] = [1e308, 1e308, 0.0, 0.0]  # overflows in a row sum, yet finite
    m[11, 3] = 0.0  # (text below)
    df = pd.DataFrame(m, columns=list("abcd"))
    df["d"] = df["d"].astype(object)
    df.loc[11, "d"] = "n/a"
    problems = Problems(300)
    got = read_scores(df, None, list("abcd"), problems, finite=True)
    counts = {(c, p): k for c, p, k in problems.items}
    for j, c in enumerate("abcd"):
        col = m[:, j].tolist()
        assert counts[(c, "are null or NaN")] == sum(math.isnan(v) for v in col)
        assert counts[(c, "are infinite (this method needs finite scores)")] == \
            sum(math.isinf(v) for v in col)
    assert counts[("d", "are text, not numbers")] == 1 and np.isnan(got[11, 3])
    assert not problems.bad[5]
    np.testing.assert_array_equal(np.delete(got, 11, axis=0), np.delete(m, 11, axis=0))
