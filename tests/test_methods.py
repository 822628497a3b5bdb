"""Beta calibration and Venn-Abers predictors, on every engine.

Oracles (none of them our code):
* beta: the unpenalised weighted log-loss optimum on (ln s, -ln(1 - s)) by
  scipy's trust-region Newton with exact derivatives, then the refit rule
  of betacal's "abm" (a < 0: refit with a = 0; else b < 0: refit with b = 0);
  the ``betacal`` package as a loose cross-check (its LogisticRegression
  has a tiny L2 penalty and stops at a gradient of 1e-4; it clips at the
  machine epsilon, we at 1e-12).
* Venn-Abers: scikit-learn's IsotonicRegression refitted for every test
  score on the calibration rows plus (s, 0), resp. (s, 1) with weight 1;
  the ``venn_abers`` package (unweighted rows, the same step conventions:
  p0 from the largest calibration score <= s, p1 from the smallest >= s).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression

import distcal
from distcal import DataError, ModelError


def rows(n=3000, seed=0, weights=True, ties=True, a=1.8, b=0.7, c=-0.3):
    """Scores in [0, 1] with labels drawn from a beta map (a, b, c), weights, ties."""
    rng = np.random.default_rng(seed)
    s = rng.beta(2.0, 3.0, n)
    if ties:
        s = np.round(s, 3)
    s[:3] = [0.0, 1.0, 0.5]
    p = 1.0 / (1.0 + np.exp(-(a * np.log(np.clip(s, 1e-12, 1 - 1e-12))
                              - b * np.log(1 - np.clip(s, 1e-12, 1 - 1e-12)) + c)))
    df = pd.DataFrame({"score": s, "label": (rng.random(n) < p).astype(np.int64)})
    if weights:
        df["w"] = rng.choice([0.5, 1.0, 2.0, 3.0], n)
    df["g"] = rng.choice(["x", "y", "z"], n, p=[0.5, 0.3, 0.2])
    return df


# -- beta --------------------------------------------------------------------------

def beta_oracle(s, y, w):
    """The weighted log-loss optimum on (ln s, -ln(1 - s)), then betacal's refit rule."""
    s = np.clip(s, 1e-12, 1 - 1e-12)
    x = np.stack([np.log(s), -np.log(1 - s), np.ones_like(s)], axis=1)

    def fit(cols):
        xx = x[:, cols]

        def f(th):
            z = xx @ th
            return np.sum(w * (y * np.logaddexp(0, -z) + (1 - y) * np.logaddexp(0, z)))

        def g(th):
            p = 1 / (1 + np.exp(-(xx @ th)))
            return xx.T @ (w * (p - y))

        def h(th):
            p = 1 / (1 + np.exp(-(xx @ th)))
            return (xx * (w * p * (1 - p))[:, None]).T @ xx

        r = minimize(f, np.zeros(len(cols)), jac=g, hess=h, method="trust-exact",
                     options={"gtol": 1e-11})
        out = np.zeros(3)
        out[cols] = r.x
        return out

    th = fit([0, 1, 2])
    if th[0] < 0:
        th = fit([1, 2])
    elif th[1] < 0:
        th = fit([0, 2])
    return th


def platt_loss(ab, s, y, w):
    """Platt's objective, as scikit-learn's ``_sigmoid_calibration`` states it: the
    weighted log loss of P = 1 / (1 + exp(a s + b)) against the targets (N+ + 1) / (N+ + 2)
    and 1 / (N- + 2) (N: sums of weights)."""
    n1, n0 = w[y > 0].sum(), w[y <= 0].sum()
    t = np.where(y > 0, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))
    z = ab[0] * s + ab[1]
    return float(np.sum(w * (t * np.logaddexp(0, z) + (1 - t) * np.logaddexp(0, -z))))


def platt_oracle(s, y, w):
    """Platt's (a, b) converged tightly (scipy's trust-exact, exact gradient and Hessian):
    scikit-learn's L-BFGS stops short where the map is nearly flat (a ~ -0.008 off by 5e-4
    of itself, its loss 2e-12 above this optimum)."""
    n1, n0 = w[y > 0].sum(), w[y <= 0].sum()
    t = np.where(y > 0, (n1 + 1) / (n1 + 2), 1 / (n0 + 2))
    x = np.stack([s, np.ones_like(s)], axis=1)

    def g(ab):
        p = 1 / (1 + np.exp(-(x @ ab)))  # 1 - P
        return x.T @ (w * (p - (1 - t)))

    def h(ab):
        p = 1 / (1 + np.exp(-(x @ ab)))
        return (x * (w * p * (1 - p))[:, None]).T @ x

    return minimize(lambda ab: platt_loss(ab, s, y, w), np.zeros(2), jac=g, hess=h,
                    method="trust-exact", options={"gtol": 1e-11}).x


def beta_map(th, s):
    s = np.clip(s, 1e-12, 1 - 1e-12)
    return 1 / (1 + 1 / (np.exp(th[2]) * s ** th[0] / (1 - s) ** th[1]))


PROBE = np.array([0.0, 1e-15, 0.001, 0.2, 0.5, 0.77, 0.999, 1.0, 1.5, -0.5, np.nan])


@pytest.mark.parametrize("abc", [(1.8, 0.7, -0.3), (-0.6, 1.5, 0.2), (1.2, -0.5, 0.1)],
                         ids=["free", "a<0 refit", "b<0 refit"])
def test_beta_equals_the_exact_optimum_with_the_refit_rule(engine, abc):
    df = rows(a=abc[0], b=abc[1], c=abc[2])
    model = distcal.fit(engine(df), method="beta", weight_col="w", **engine.opts)
    want = beta_oracle(df.score.to_numpy(), df.label.to_numpy(), df.w.to_numpy())
    got = np.array([model.params[k] for k in "abc"])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert (got[0] == 0.0) == (want[0] == 0.0) and (got[1] == 0.0) == (want[1] == 0.0)
    np.testing.assert_allclose(model.predict(PROBE), beta_map(want, PROBE), rtol=1e-7,
                               atol=1e-9)
    assert np.isnan(model.predict(PROBE)[-1])
    assert model == distcal.fit(df, method="beta", weight_col="w")  # every engine: 1e-9
    assert model.n_rows == len(df) and model.weight_total == pytest.approx(df.w.sum())


def test_beta_matches_betacal_loosely():
    from betacal import BetaCalibration

    df = rows(5000, weights=False, ties=False)
    model = distcal.fit(df, method="beta")
    ref = BetaCalibration(parameters="abm").fit(df.score.to_numpy(), df.label.to_numpy())
    q = np.linspace(0.01, 0.99, 99)
    np.testing.assert_allclose(model.predict(q), ref.predict(q), atol=2e-3)


def test_beta_by_segment_and_one_vs_rest_equal_the_oracle_per_group(engine, tmp_path):
    df = rows(4000)
    model = distcal.fit(engine(df), method="beta", weight_col="w", by="g", **engine.opts)
    for g in "xyz":
        part = df[df.g == g]
        want = beta_oracle(part.score.to_numpy(), part.label.to_numpy(), part.w.to_numpy())
        np.testing.assert_allclose(model.predict(PROBE[:-1], segments=[g] * 10),
                                   beta_map(want, PROBE[:-1]), rtol=1e-7, atol=1e-9)
    model.save(tmp_path / "m")
    assert distcal.load(tmp_path / "m") == model == distcal.fit(df, method="beta",
                                                                weight_col="w", by="g")
    # One-vs-rest over K = 3 classes (scores of each class in [0, 1]).
    rng = np.random.default_rng(5)
    raw = rng.dirichlet([2, 2, 2], 3000)
    y = np.array([rng.choice(3, p=p) for p in raw])
    mc = pd.DataFrame({f"s{k}": np.round(raw[:, k], 3) for k in range(3)})
    mc["y"] = y
    cols = [f"s{k}" for k in range(3)]
    model = distcal.fit(engine(mc), method="beta", score_cols=cols, label_col="y",
                        **engine.opts)
    q = np.array([[0.2, 0.3, 0.5], [0.9, 0.05, 0.05]])
    per = np.stack([beta_map(beta_oracle(mc[f"s{k}"].to_numpy(), (y == k).astype(float),
                                         np.ones(len(y))), q[:, k]) for k in range(3)], 1)
    np.testing.assert_allclose(model.predict(q), per / per.sum(1, keepdims=True), rtol=1e-7)


def test_many_segments_newton_passes_equal_the_oracles_per_segment(engine, caplog):
    """A Newton pass sums every segment of a range at once (one vectorised batch per set
    of features): 40 segments of 15 to 600 rows, some refitted with a = 0 or b = 0 (other
    features, so other batches), equal the per-segment oracles, beta and sigmoid. Once
    the global key has converged, Spark and Dask read only the running keys' rows."""
    import logging

    from sklearn.calibration import _sigmoid_calibration

    caplog.set_level(logging.INFO, logger="distcal")

    rng = np.random.default_rng(21)
    parts = []
    for g in range(40):
        abc = [(1.8, 0.7, -0.3), (-0.6, 1.5, 0.2), (1.2, -0.5, 0.1)][g % 3]
        part = rows(int(rng.integers(15, 600)), seed=100 + g, a=abc[0], b=abc[1], c=abc[2])
        parts.append(part.assign(g=f"s{g:02d}"))
    df = pd.concat(parts, ignore_index=True)
    opts = engine.opts_for(2 * len(df))  # each row's segment and the global key
    beta = distcal.fit(engine(df), method="beta", weight_col="w", by="g",
                       min_segment_weight=0, **opts)
    platt = distcal.fit(engine(df), method="sigmoid", weight_col="w", by="g",
                        min_segment_weight=0, **opts)
    refits = set()
    for g, part in df.groupby("g"):
        s, y, w = part.score.to_numpy(), part.label.to_numpy(), part.w.to_numpy()
        if 0 < y.sum() < len(y):  # one class only: the global map
            want = beta_oracle(s, y, w)
            np.testing.assert_allclose(beta.segment(g).predict(PROBE[:-1]),
                                       beta_map(want, PROBE[:-1]), rtol=1e-6, atol=1e-8)
            refits.add((want[0] == 0.0, want[1] == 0.0))
        a, b = _sigmoid_calibration(s, y, w)
        got = platt.segment(g).params
        assert got["a"] == pytest.approx(a, rel=1e-4) and got["b"] == pytest.approx(
            b, rel=1e-4, abs=1e-6)
    assert refits == {(False, False), (True, False), (False, True)}
    assert ("later passes read the rows of" in caplog.text) == (engine.name != "local")


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_many_keys_newton_steps_taken_together_are_each_keys_own(data):
    """The driver takes every key's Newton step at once (arrays over the keys): a key's
    parameters are bit for bit those it gets run alone over its own tables (each key's
    rows in the same ranges), for keys that converge, separate their classes, nearly
    separate them or hold one distinct score, sigmoid and beta (refits included), with
    the same warnings; and equal to scipy's optimum where there is one."""
    import warnings

    from sklearn.calibration import _sigmoid_calibration

    from distcal.core.beta import beta_plan
    from distcal.core.distinct import pool_ties
    from distcal.core.keyed import KeyedTable, merge_keyed
    from distcal.core.plans import run_plan, run_plans
    from distcal.core.sigmoid import sigmoid_plan

    seed = data.draw(st.integers(0, 2**32 - 1))
    kinds = data.draw(st.lists(st.sampled_from(["fit", "separated", "nearly", "one score"]),
                               min_size=1, max_size=8))
    rng = np.random.default_rng(seed)
    tables, oracle = {}, {}
    for c, kind in enumerate(kinds):
        n = int(rng.integers(5, 300))
        s = np.round(rng.beta(2.0, 3.0, n), int(rng.integers(1, 4)))
        y = (rng.random(n) < s).astype(float)
        if kind == "separated":
            y = (s > np.median(s)).astype(float)
        elif kind == "nearly":
            y = (s > np.median(s)).astype(float)
            y[np.flatnonzero(s == np.median(s))[:1]] = 1.0 - y[np.flatnonzero(
                s == np.median(s))[:1]]
        elif kind == "one score":
            s[:] = 0.25
        if kind in ("fit", "one score"):
            y[:2] = [0.0, 1.0]  # both classes (beta's fit has a minimum to look for)
        w = rng.choice([0.5, 1.0, 3.0], n)
        t = pool_ties(s, y, w)
        cut = np.sort(rng.integers(0, len(t) + 1, 2))
        tables[c] = [t.slice(a, b) for a, b in zip([0, *cut], [*cut, len(t)])]
        if kind == "fit":
            oracle[c] = (s, y, w)
    ranges = [merge_keyed([KeyedTable.single(tables[c][i], (None, c)) for c in tables
                           if len(tables[c][i])]) for i in range(3)]
    ranges = [r for r in ranges if r.keys]

    def map_parts(fn):
        return [fn(r) for r in ranges]

    for make in (sigmoid_plan, beta_plan):
        with warnings.catch_warnings(record=True) as together_warned:
            warnings.simplefilter("always")
            together = run_plans(lambda key, make=make: make(), map_parts)
        alone = {}
        with warnings.catch_warnings(record=True) as alone_warned:
            warnings.simplefilter("always")
            for c, ts in tables.items():
                alone[(None, c)] = run_plan(make(), lambda fn, ts=ts: [fn(t) for t in ts
                                                                       if len(t)])
        assert together == alone
        assert {str(w.message) for w in together_warned} == \
            {str(w.message) for w in alone_warned}
    for c, (s, y, w) in oracle.items():
        got = run_plan(sigmoid_plan(), lambda fn, ts=tables[c]: [fn(t) for t in ts if len(t)])
        np.testing.assert_allclose(got[:2], platt_oracle(s, y, w), rtol=1e-6, atol=1e-7)
        # and no worse than scikit-learn's (which can stop short: see platt_oracle)
        sk = platt_loss(_sigmoid_calibration(s, y, w), s, y, w)
        assert platt_loss(got, s, y, w) <= sk * (1 + 1e-13)


def test_a_key_of_several_chunks_sums_the_same_alone_or_among_others():
    """A range's per-row terms are computed a chunk of rows at a time, each key's rows
    summed in blocks counted from its own first row: a key of three chunks and more,
    after a smaller key in its range, gets Platt's (a, b) and beta's (a, b, c) bit for
    bit as alone (blocks aligned on the range would group its additions otherwise), and
    (a, b) equal the optimum. Every key of the range is summed, the last one too (a
    range whose last multiple of the chunk size falls past its last block's start)."""
    from distcal.core import plans
    from distcal.core.beta import beta_plan
    from distcal.core.distinct import pool_ties
    from distcal.core.keyed import KeyedTable, merge_keyed
    from distcal.core.plans import run_plan, run_plans
    from distcal.core.sigmoid import sigmoid_plan

    rng = np.random.default_rng(8)
    tables, rows = {}, {}
    # (the last chunk starts past the last key's first row: its own block)
    for c, n in enumerate([777, 3 * plans._CHUNK_ROWS + 123, plans._CHUNK_ROWS - 1000, 200]):
        s = rng.beta(2.0, 3.0, n)
        y = (rng.random(n) < s).astype(float)
        w = rng.uniform(0.1, 3.0, n)
        tables[c], rows[c] = pool_ties(s, y, w), (s, y, w)
    together_range = merge_keyed([KeyedTable.single(t, (None, c)) for c, t in tables.items()])
    assert together_range.starts[1] % plans._CHUNK_ROWS  # the large key starts mid-chunk
    for make in (sigmoid_plan, beta_plan):
        together = run_plans(lambda key, make=make: make(), lambda fn: [fn(together_range)])
        alone = {(None, c): run_plan(make(), lambda fn, t=t: [fn(t)])
                 for c, t in tables.items()}
        assert together == alone
    got = run_plan(sigmoid_plan(), lambda fn: [fn(tables[1])])
    np.testing.assert_allclose(got[:2], platt_oracle(*rows[1]), rtol=1e-6, atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 3 * 2**15 + 7), min_size=1, max_size=5), st.integers(0, 2**32 - 1))
@example(sizes=[65535], seed=830)  # sum w s = 1.14 of terms summing to 1.3e5 in magnitude
def test_keyed_sums_of_any_key_sizes_equal_each_keys_own_sums(sizes, seed):
    """Sums per key of a range (weight, positives, w s, rows, the largest |s|) for keys of
    any sizes around the chunk size: each equals math.fsum (max) of its own rows' terms
    within (n - 1) 2^-53 of the sum of their magnitudes (the error bound of n float
    additions in any order, whatever the cancellation), and its sums alone, bit for
    bit."""
    import math

    from distcal.core.distinct import pool_ties
    from distcal.core.keyed import KeyedTable, merge_keyed
    from distcal.core.sigmoid import _Totals

    rng = np.random.default_rng(seed)
    tables = {}
    for c, n in enumerate(sizes):
        s = rng.normal(0.0, 3.0, n)
        tables[c] = pool_ties(s, (rng.random(n) < 0.5) * 1.0, rng.uniform(0.1, 2.0, n))
    part = merge_keyed([KeyedTable.single(t, (None, c)) for c, t in tables.items()])
    batch = _Totals.pack([_Totals()] * len(sizes))
    got = batch.run(np.arange(len(sizes)), part)
    for k, key in enumerate(part.keys):
        t = tables[key[1]]
        alone = _Totals.pack([_Totals()]).run(np.zeros(1, np.intp), KeyedTable.single(t))
        assert np.array_equal(got[k], alone[0])
        ws = t.weight * t.score
        want = [math.fsum(t.weight), math.fsum(t.positives), math.fsum(ws), len(t), 0.0,
                float(np.max(np.abs(t.score)))]
        magnitude = np.array([want[0], want[1], math.fsum(np.abs(ws)), len(t), 0.0, want[5]])
        bound = (len(t) - 1) * 2.0**-53 * magnitude
        assert np.all(np.abs(got[k] - want) <= bound), (got[k], want)


def _log_loss(th, s, y, w):
    """The beta map's weighted log loss at (a, b, c), brute force from the logits (steep
    maps: probabilities of exactly 0 or 1)."""
    s = np.clip(s, 1e-12, 1 - 1e-12)
    z = th[0] * np.log(s) - th[1] * np.log(1 - s) + th[2]
    return float(np.sum(w * np.where(y == 1, np.logaddexp(0, -z), np.logaddexp(0, z))))


def test_beta_on_nearly_separated_scores_stops_after_the_same_passes(tmp_path):
    """Both labels at score 0.2, only positives above: the loss falls towards a limit
    above 0 as a and c grow without bound. The fit warns and stops where the loss's
    decrease crosses 2^-40 of it, after the same passes whatever the order of the rows
    and the batches (it ran on until rounding stopped the descent: a = 37.8 or 36.9 by
    the order). Rows' probabilities equal their limits (1/3 at 0.2) to 1e-9. The steps
    that run off are doubled (a = 31 to 48 in the last), so the rounding of a step
    in L's flat direction moves a by ~3e-4 of it; a pass apart would be ~35%."""
    df = pd.DataFrame({"score": [0.2, 0.5, 0.2, 0.9, 0.2], "label": [1, 1, 0, 1, 0]})
    fits = []
    for seed in range(6):
        for opts in ({}, {"memory_rows": 2, "batch_rows": 2}):
            with pytest.warns(RuntimeWarning, match="nearly separate the classes"):
                fits.append(distcal.fit(df.sample(frac=1, random_state=seed), method="beta",
                                        **opts))
    for m in fits:
        np.testing.assert_allclose(m.predict([0.2, 0.5, 0.9]), [1 / 3, 1.0, 1.0], rtol=1e-9)
        assert m.params["b"] == 0.0
        for k in "ac":  # the same passes: the paths' rounding apart, not a pass apart
            assert m.params[k] == pytest.approx(fits[0].params[k], rel=2e-3)


def test_beta_on_nearly_separated_scores_agrees_across_engines_as_documented(engine):
    """docs/methods.md's seven-row example: the rows' probabilities are their limits on
    every engine; the parameters that run off agree to 3e-3 relative (local a = 53.04,
    b = 7.11; Dask 53.06, 7.09), the far tail to 2e-2 relative."""
    df = pd.DataFrame({"score": [.1, .2, .3, .5, .5, .8, .9], "label": [0, 0, 0, 0, 1, 1, 1]})
    with pytest.warns(RuntimeWarning, match="nearly separate the classes"):
        local = distcal.fit(df, method="beta")
    with pytest.warns(RuntimeWarning, match="nearly separate the classes"):
        other = distcal.fit(engine(df), method="beta")
    assert local.params["a"] == pytest.approx(53.04, abs=0.01)
    for k in "abc":
        assert other.params[k] == pytest.approx(local.params[k], rel=5e-3), k
    np.testing.assert_allclose(other.predict([.1, .2, .3, .5, .8, .9]),
                               local.predict([.1, .2, .3, .5, .8, .9]), rtol=2e-2, atol=1e-5)
    np.testing.assert_allclose(other.predict([.3, .5, .8]), [0.0, 0.5, 1.0], atol=1e-9)


@pytest.mark.parametrize("pattern", ["threshold", "middle"])
def test_beta_stops_once_separated_scores_fit_their_labels(engine, pattern):
    """Scores that separate the classes have no finite optimum: the fit warns and stops
    once the loss is below 2^-40 of its start, long before 100 passes. Negatives below
    positives: the fit (a < 0, so refitted with a = 0, separated again) puts every
    fitted probability on its label (brute force). Positives between negatives (beta's
    two features bend, so they separate these too): b < 0, and the refit with b = 0
    has a finite optimum, the oracle's. The same on every engine, and for such a
    segment among others with ``by=``."""
    from distcal.core.beta import beta_plan
    from distcal.core.distinct import pool_ties
    from distcal.core.plans import run_plan

    rng = np.random.default_rng(3)
    s = np.sort(rng.uniform(0.05, 0.95, 40))
    y = (s > 0.5).astype(float) if pattern == "threshold" else ((s > 0.3) & (s < 0.7)) * 1.0
    w = rng.choice([0.5, 1.0, 2.0], 40)
    df = pd.DataFrame({"score": s, "label": y, "w": w, "g": "sep"})
    passes = []

    def map_parts(fn):
        passes.append(fn)
        return [fn(pool_ties(s, y, w))]

    with pytest.warns(RuntimeWarning, match="separate the classes"):
        th = np.array(run_plan(beta_plan(), map_parts))
    assert len(passes) < 40  # 1 of totals, Newton passes (doubled once they run off), the refit
    if pattern == "threshold":
        assert th[0] == 0.0  # refitted from (a, b, c) = (0, 1, 0)
        assert 0 <= _log_loss(th, s, y, w) <= _log_loss((0.0, 1.0, 0.0), s, y, w) * 2.0 ** -40
    else:
        assert th[1] == 0.0
        with np.errstate(all="ignore"):  # (the oracle's first fit runs off too)
            want = beta_oracle(s, y, w)
        np.testing.assert_allclose(th, want, rtol=1e-6, atol=1e-7)
    with pytest.warns(RuntimeWarning, match="separate the classes"):
        model = distcal.fit(engine(df), method="beta", weight_col="w", **engine.opts)
    np.testing.assert_allclose([model.params[k] for k in "abc"], th, rtol=1e-9)
    if pattern == "threshold":
        np.testing.assert_allclose(model.predict(s), y, atol=1e-9)
    # The same rows as one segment among others.
    other = rows(2000, weights=True).assign(g="other")
    both = pd.concat([df, other], ignore_index=True)
    with pytest.warns(RuntimeWarning, match="separate the classes"):
        seg = distcal.fit(engine(both), method="beta", weight_col="w", by="g",
                          min_segment_weight=0, **engine.opts)
    assert seg.segment("sep").params == pytest.approx(model.params, rel=1e-9)
    want = beta_oracle(other.score.to_numpy(), other.label.to_numpy(), other.w.to_numpy())
    np.testing.assert_allclose(seg.segment("other").predict(PROBE[:-1]),
                               beta_map(want, PROBE[:-1]), rtol=1e-6, atol=1e-8)


def test_beta_clips_scores_outside_the_unit_interval_with_a_warning_refuses_one_class(
        engine):
    df = rows(500)
    df.loc[:6, "score"] = [1.5, 2.0, -0.5, 1.5, 3.0, 1.0000001, -1e-9]
    with pytest.warns(UserWarning, match=r"column 'score' \(score\): 7 rows are outside"):
        model = distcal.fit(engine(df), method="beta", weight_col="w", **engine.opts)
    want = beta_oracle(df.score.to_numpy(), df.label.to_numpy(), df.w.to_numpy())
    np.testing.assert_allclose([model.params[k] for k in "abc"], want, rtol=1e-6, atol=1e-7)
    df = rows(500)
    df["label"] = 0
    with pytest.raises(DataError, match="every label is 0"):  # no minimum
        distcal.fit(engine(df), method="beta", **engine.opts)
    # a segment of one class falls back to the global map
    df = rows(900)
    df.loc[df.g == "z", "label"] = 1
    model = distcal.fit(engine(df), method="beta", by="g", **engine.opts)
    seg = model.segments.set_index("g")
    assert seg.loc["z", "fallback"] and not seg.loc["x", "fallback"]
    assert model.segment("z") == model.global_model


# -- Venn-Abers ------------------------------------------------------------------

def ivap_oracle(s, y, w, tests):
    """p0, p1 by refitting scikit-learn's isotonic regression for every test score."""
    out = np.zeros((2, len(tests)))
    for i, t in enumerate(tests):
        for label in (0, 1):
            ir = IsotonicRegression(out_of_bounds="clip")
            ir.fit(np.append(s, t), np.append(y, label), sample_weight=np.append(w, 1.0))
            out[label, i] = ir.predict([t])[0]
    return out


def probe_scores(s):
    """Calibration scores themselves, points between them, outside the range."""
    u = np.unique(s)
    mid = (u[:-1] + u[1:]) / 2
    return np.concatenate([u[::7], mid[::11], [u[0] - 1.0, u[-1] + 1.0, -np.inf, np.inf]])


def test_venn_abers_equals_brute_force_isotonic_per_test_score(engine, tmp_path):
    df = rows(1500, a=1.0, b=1.0, c=0.0)
    df["score"] = df.score * 6 - 3  # any real scores
    model = distcal.fit(engine(df), method="venn_abers", weight_col="w", **engine.opts)
    tests = probe_scores(df.score.to_numpy())
    want = ivap_oracle(df.score.to_numpy(), df.label.to_numpy(), df.w.to_numpy(),
                       tests[np.isfinite(tests)])
    p0, p1 = model.predict_interval(tests)
    fin = np.isfinite(tests)
    np.testing.assert_allclose(p0[fin], want[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(p1[fin], want[1], rtol=1e-9, atol=1e-12)
    assert p0[tests == -np.inf] == 0.0 and p1[tests == np.inf] == 1.0
    np.testing.assert_allclose(model.predict(tests), p1 / (1 - p0 + p1), rtol=1e-15)
    assert np.isnan(model.predict([np.nan])[0])
    assert model == distcal.fit(df, method="venn_abers", weight_col="w")  # every engine
    model.save(tmp_path / "m")
    assert distcal.load(tmp_path / "m") == model


def test_venn_abers_by_segment_equals_the_oracle_per_group(engine, tmp_path):
    df = rows(1200, weights=False)
    model = distcal.fit(engine(df), method="venn_abers", by="g", **engine.opts)
    for g in "xyz":
        part = df[df.g == g]
        tests = probe_scores(part.score.to_numpy())[:-2]
        want = ivap_oracle(part.score.to_numpy(), part.label.to_numpy(),
                           np.ones(len(part)), tests)
        p0, p1 = model.segment(g).predict_interval(tests)
        np.testing.assert_allclose(np.stack([p0, p1]), want, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(model.predict(tests, segments=[g] * len(tests)),
                                   want[1] / (1 - want[0] + want[1]), rtol=1e-9)
    model.save(tmp_path / "m")
    assert distcal.load(tmp_path / "m") == model == distcal.fit(df, method="venn_abers",
                                                                by="g")


def test_venn_abers_of_many_segments_equals_the_oracle_per_group(engine):
    # Past 20,000 rows every key runs numba's kernels, all keys of a range in one call.
    df = rows(24_000, weights=False)
    df["g"] = np.random.default_rng(3).integers(0, 300, len(df))
    model = distcal.fit(engine(df), method="venn_abers", by="g",
                        **engine.opts_for(2 * len(df)))
    for g in (0, 7, 299):
        part = df[df.g == g]
        tests = probe_scores(part.score.to_numpy())[:-2]
        want = ivap_oracle(part.score.to_numpy(), part.label.to_numpy(),
                           np.ones(len(part)), tests)
        np.testing.assert_allclose(np.stack(model.segment(g).predict_interval(tests)), want,
                                   rtol=1e-9, atol=1e-12)
    tests = probe_scores(df.score.to_numpy())[:-2]
    want = ivap_oracle(df.score.to_numpy(), df.label.to_numpy(), np.ones(len(df)), tests[::5])
    np.testing.assert_allclose(np.stack(model.global_model.predict_interval(tests[::5])), want,
                               rtol=1e-9, atol=1e-12)


def test_venn_abers_equals_the_venn_abers_package():
    from venn_abers import calc_p0p1, calc_probs

    df = rows(3000, weights=False)
    model = distcal.fit(df, method="venn_abers")
    cal = np.stack([1 - df.score, df.score], axis=1)
    p0, p1, c = calc_p0p1(cal, df.label.to_numpy())
    tests = probe_scores(df.score.to_numpy())[:-2]
    prob, interval = calc_probs(p0, p1, c, np.stack([1 - tests, tests], axis=1))
    got0, got1 = model.predict_interval(tests)
    np.testing.assert_allclose(got0, interval[:, 0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got1, interval[:, 1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.predict(tests), prob[:, 1], rtol=1e-9)


def test_venn_abers_weights_are_repeated_rows():
    """Integer weights (0 included) are repeated rows, binary and one-vs-rest: the added
    test point weighs 1 in both, so (p0, p1) are the same numbers."""
    rng = np.random.default_rng(1)
    n = 60
    p = rng.dirichlet([1, 1, 1], n)
    y = rng.integers(0, 3, n)
    w = rng.integers(0, 5, n)
    rep = np.repeat(np.arange(n), w)
    probes = np.vstack([rng.dirichlet([1, 1, 1], 50), p])  # the calibration scores too
    for scores, labels, tests in [(p[:, 1], (y == 1).astype(int), probes[:, 1]),
                                  (list(p), y, probes)]:
        weighted = distcal.fit(pd.DataFrame({"score": scores, "label": labels,
                                             "w": w.astype(float)}),
                               method="venn_abers", weight_col="w")
        repeated = distcal.fit(pd.DataFrame({"score": [scores[i] for i in rep],
                                             "label": labels[rep]}), method="venn_abers")
        np.testing.assert_array_equal(weighted.predict(tests), repeated.predict(tests))
    one = weighted.class_model(1)
    np.testing.assert_array_equal(one.predict_interval(tests[:, 1]),
                                  repeated.class_model(1).predict_interval(tests[:, 1]))


def test_venn_abers_with_any_weights_is_one_model_whatever_the_partitioning(tmp_path):
    # Weights such as uniform draws: a block's sums added in another order differ in
    # their last bits; the model (its thresholds) must not, and must load again.
    df = rows(4000, weights=False)
    df["w"] = np.random.default_rng(5).uniform(0.0, 3.0, len(df))
    model = distcal.fit(df, method="venn_abers", weight_col="w")
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "in.parquet",
                   row_group_size=250)
    ranged = distcal.fit(str(tmp_path / "in.parquet"), method="venn_abers", weight_col="w",
                         memory_rows=300, batch_rows=250)
    assert ranged == model
    model.save(tmp_path / "m")
    assert distcal.load(tmp_path / "m") == model
    p0, p1 = model.predict_interval(np.sort(probe_scores(df.score.to_numpy()))[1:-1])
    assert np.all(np.diff(p0) >= 0) and np.all(np.diff(p1) >= 0) and np.all(p0 <= p1)


@pytest.mark.parametrize("method,needs", [
    ("venn_abers", "Venn-Abers predictors take 0/1 labels"),
    ("modl", "MODL calibration needs 0/1 labels")])
def test_labels_that_are_not_0_or_1_are_invalid_rows_for_methods_of_0_1_labels(
        engine, method, needs):
    df = rows(400, weights=False)
    df["label"] = df.label.astype(float)
    df.loc[:4, "label"] = 0.5
    df.loc[5, "label"] = 1.5  # outside [0, 1]: that problem, counted once
    with pytest.raises(DataError, match=rf"column 'label': 1 row is outside \[0, 1\]; column "
                                        rf"'label': 5 rows are neither 0 nor 1 \({needs}\)"):
        distcal.fit(engine(df), method=method, **engine.opts)
    # Invalid rows, so on_invalid="drop" leaves them out: the fit of the other rows.
    model = distcal.fit(engine(df), method=method, on_invalid="drop", **engine.opts)
    assert model.dropped_rows == 6
    clean = distcal.fit(df.iloc[6:], method=method)
    q = np.linspace(-0.1, 1.1, 241)
    np.testing.assert_array_equal(model.predict(q), clean.predict(q))
    if method == "venn_abers":
        np.testing.assert_array_equal(model.predict_interval(q), clean.predict_interval(q))


def test_venn_abers_damaged_steps_are_a_model_error(tmp_path):
    model = distcal.fit(rows(300), method="venn_abers")
    model.save(tmp_path / "m")
    table = pq.read_table(tmp_path / "m" / "steps.parquet")
    prob = table.column("prob").to_numpy().copy()
    prob[0] = 1.5
    import hashlib
    import json

    pq.write_table(table.set_column(2, "prob", pa.array(prob)), tmp_path / "m" / "steps.parquet")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    meta["tables"]["steps"]["sha256"] = hashlib.sha256(
        (tmp_path / "m" / "steps.parquet").read_bytes()).hexdigest()
    body = {k: v for k, v in meta.items() if k != "checksum"}
    meta["checksum"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="step values"):
        distcal.load(tmp_path / "m")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 1), st.sampled_from([0.5, 1, 3])),
                min_size=1, max_size=40))
def test_venn_abers_interval_is_ordered_and_monotone(data):
    df = pd.DataFrame(data, columns=["score", "label", "w"]).astype(float)
    model = distcal.fit(df, method="venn_abers", weight_col="w")
    q = np.linspace(-1, 13, 57)
    p0, p1 = model.predict_interval(q)
    assert np.all(p0 <= p1) and np.all(np.diff(p0) >= 0) and np.all(np.diff(p1) >= 0)
    assert np.all((p0 >= 0) & (p1 <= 1))
    want = ivap_oracle(df.score.to_numpy(), df.label.to_numpy(), df.w.to_numpy(), q[::4])
    np.testing.assert_allclose(np.stack([p0[::4], p1[::4]]), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("method", ["beta", "venn_abers"])
def test_transform_equals_predict_on_every_engine(engine, method):
    df = rows(1500)
    model = distcal.fit(df, method=method, weight_col="w")
    segmented = distcal.fit(df, method=method, weight_col="w", by="g")
    new = pd.DataFrame({"score": np.concatenate([PROBE, probe_scores(df.score.to_numpy())]),
                        "g": "x"})
    new.loc[::3, "g"] = "z"
    new.loc[::5, "g"] = "unseen"
    for m, want in ((model, model.predict(new.score)),
                    (segmented, segmented.predict(new.score, segments=new.g))):
        out = m.transform(engine(new), score_col="score", output_col="p")
        got = out if isinstance(out, pd.DataFrame) else (
            out.toPandas() if engine.name == "spark" else out.compute())
        got = got.sort_values("score", kind="stable")
        order = np.argsort(new.score.to_numpy(), kind="stable")
        # the same rows (Spark and Dask may reorder): compare as sorted by score and key
        a = pd.DataFrame({"score": new.score, "g": new.g, "p": want}).sort_values(
            ["score", "g"], kind="stable").reset_index(drop=True)
        b = got[["score", "g", "p"]].sort_values(["score", "g"], kind="stable").reset_index(
            drop=True)
        assert len(order) == len(b)
        np.testing.assert_allclose(b.p.to_numpy(), a.p.to_numpy(), rtol=1e-12, atol=1e-15)


# -- the scikit-learn estimator and the pyspark.ml stage ---------------------------

def test_cross_venn_abers_of_a_nan_score_is_nan():
    """NaN in gives NaN out, as every method's predict (not the 1/2 of two geometric
    means that are both 0)."""
    from sklearn.base import BaseEstimator, ClassifierMixin

    from distcal.sklearn import CalibratedClassifier

    class Scores(ClassifierMixin, BaseEstimator):  # the first feature is the score
        def fit(self, X, y):
            self.classes_ = np.unique(y)
            return self

        def decision_function(self, X):
            return np.asarray(X, dtype=np.float64)[:, 0]

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 1))
    y = (X[:, 0] + rng.normal(size=300) > 0).astype(int)
    cal = CalibratedClassifier(Scores(), method="venn_abers", cv=3).fit(X, y)
    got = cal.predict_proba(np.array([[np.nan], [0.4]]))
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()
    np.testing.assert_array_equal(got[1], cal.predict_proba(np.array([[0.4]]))[0])


@pytest.mark.parametrize("k", [2, 3])
def test_cross_venn_abers_equals_per_fold_brute_force(k):
    from sklearn.base import clone
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    from distcal.sklearn import CalibratedClassifier

    X, y = make_classification(600, n_features=6, n_informative=4, n_classes=k,
                               random_state=k)
    X_new = X[:12] + 0.3
    base = LogisticRegression(max_iter=500)
    cal = CalibratedClassifier(base, method="venn_abers", cv=3).fit(X, y)
    p0s, p1s = [], []
    for train, test in StratifiedKFold(3).split(X, y):
        est = clone(base).fit(X[train], y[train])
        s, s_new = est.decision_function(X[test]), est.decision_function(X_new)
        if k == 2:
            s, s_new = s[:, None], s_new[:, None]
        p0, p1 = np.zeros((12, k)), np.zeros((12, k))
        for c in ([1] if k == 2 else range(k)):
            col = -1 if k == 2 else c
            o = ivap_oracle(s[:, col], (y[test] == c).astype(float), np.ones(len(test)),
                            s_new[:, col])
            p0[:, c], p1[:, c] = o
        if k == 2:
            p0[:, 0], p1[:, 0] = 1 - p1[:, 1], 1 - p0[:, 1]
        p0s.append(p0)
        p1s.append(p1)
    p0s, p1s = np.stack(p0s), np.stack(p1s)
    g1 = np.exp(np.log(p1s).mean(0))
    g0 = np.exp(np.log(1 - p0s).mean(0))
    p = g1 / (g0 + g1)
    if k == 2:
        p[:, 0] = 1 - p[:, 1]
    else:
        p = p / p.sum(1, keepdims=True)
    np.testing.assert_allclose(cal.predict_proba(X_new), p, rtol=1e-9, atol=1e-12)
    lo, hi = cal.predict_interval(X_new)
    np.testing.assert_allclose(lo, p0s.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(hi, p1s.mean(0), rtol=1e-9, atol=1e-12)
    assert np.all(lo <= hi)


def test_sklearn_beta_calibrates_predict_proba_against_the_oracle():
    from sklearn.datasets import make_classification
    from sklearn.naive_bayes import GaussianNB

    from distcal.sklearn import CalibratedClassifier

    X, y = make_classification(2000, n_features=5, random_state=1)
    clf = GaussianNB().fit(X[:1000], y[:1000])
    cal = CalibratedClassifier(clf, method="beta").fit(X[1000:], y[1000:])
    s = clf.predict_proba(X[1000:])[:, 1]
    th = beta_oracle(s, y[1000:].astype(float), np.ones(1000))
    want = beta_map(th, clf.predict_proba(X[:50])[:, 1])
    np.testing.assert_allclose(cal.predict_proba(X[:50])[:, 1], want, rtol=1e-7, atol=1e-9)


def test_pyspark_ml_calibrator_takes_beta_and_venn_abers(spark, tmp_path):
    from distcal.spark.ml import Calibrator, CalibratorModel

    df = rows(1000)
    sdf = spark.createDataFrame(df)
    for method in ("beta", "venn_abers"):
        fitted = Calibrator(method=method, weightCol="w", outputCol="p").fit(sdf)
        fitted.write().overwrite().save(str(tmp_path / method))
        back = CalibratorModel.load(str(tmp_path / method))
        got = back.transform(sdf).select("score", "p").toPandas().sort_values("score")
        want = distcal.fit(df, method=method, weight_col="w").predict(got.score)
        np.testing.assert_allclose(got.p, want, rtol=1e-12)


@pytest.mark.parametrize("method", ["beta", "venn_abers"])
def test_command_line_fits_and_applies(tmp_path, capsys, method):
    import json

    from distcal.cli.main import main as cli_main

    df = rows(800)
    df.to_parquet(tmp_path / "in.parquet")
    assert cli_main(["fit", "--input", str(tmp_path / "in.parquet"), "--output",
                     str(tmp_path / "model"), "--method", method, "--weight-col", "w"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["method"] == method
    interval = ["--interval-cols", "p0,p1"] if method == "venn_abers" else []
    assert cli_main(["apply", "--model", str(tmp_path / "model"), "--input",
                     str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out.parquet"),
                     "--output-col", "p", *interval]) == 0
    out = pd.read_parquet(tmp_path / "out.parquet")
    model = distcal.fit(df, method=method, weight_col="w")
    np.testing.assert_allclose(out.p, model.predict(out.score), rtol=1e-12)
    if method == "beta":  # no interval: refused, nothing written
        assert cli_main(["apply", "--model", str(tmp_path / "model"), "--input",
                         str(tmp_path / "in.parquet"), "--output", str(tmp_path / "o2.parquet"),
                         "--interval-cols", "p0,p1"]) == 2
        assert "interval_cols" in capsys.readouterr().err
        assert not (tmp_path / "o2.parquet").exists()
        return
    p0, p1 = model.predict_interval(out.score)
    np.testing.assert_array_equal(out.p0, p0)
    np.testing.assert_array_equal(out.p1, p1)
    assert cli_main(["evaluate", "--input", str(tmp_path / "out.parquet"), "--output",
                     str(tmp_path / "rep"), "--prob-col", "p", "--weight-col", "w",
                     "--interval-cols", "p0,p1"]) == 0
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    want = distcal.evaluate(out, prob_col="p", weight_col="w", interval_cols=("p0", "p1"))
    assert doc["interval_widths"]["mean"] == pytest.approx(want.interval_widths["mean"],
                                                           rel=1e-12)
    assert (tmp_path / "rep" / "interval_widths.png").stat().st_size > 1000
    assert 'id="fig-interval_widths"' in (tmp_path / "rep" / "report.html").read_text()


def test_transform_adds_the_venn_abers_interval_on_every_engine(engine):
    df = rows(800)
    model = distcal.fit(df, method="venn_abers", weight_col="w")
    new = pd.DataFrame({"score": probe_scores(df.score.to_numpy())})
    out = model.transform(engine(new), output_col="p", interval_cols=("p0", "p1"))
    got = out if isinstance(out, pd.DataFrame) else (
        out.toPandas() if engine.name == "spark" else out.compute())
    got = got.sort_values("score").reset_index(drop=True)
    p0, p1 = model.predict_interval(got.score)
    np.testing.assert_array_equal(got.p0, p0)
    np.testing.assert_array_equal(got.p1, p1)
    np.testing.assert_allclose(got.p, model.predict(got.score), rtol=1e-12)
    with pytest.raises(ValueError, match="interval_cols"):
        distcal.fit(df, method="beta").transform(new, interval_cols=("p0", "p1"))
    # By segment: each row's interval by its segment's map (the global one's for a key
    # not fitted or null).
    by_g = distcal.fit(df, method="venn_abers", weight_col="w", by="g")
    keyed = new.assign(g=np.resize(np.array(["x", "y", "unseen", None], dtype=object),
                                   len(new)))
    out = engine.collect(by_g.transform(engine.frame(keyed), output_col="p",
                                        interval_cols=("p0", "p1")))
    p0, p1 = by_g.predict_interval(out.score.to_numpy(), segments=out.g)
    np.testing.assert_array_equal(out.p0, p0)
    np.testing.assert_array_equal(out.p1, p1)
    np.testing.assert_array_equal(out.p, by_g.predict(out.score.to_numpy(), segments=out.g))


def test_venn_abers_interval_by_segment(tmp_path):
    from distcal.apply import apply_to_parquet
    from distcal.cli.main import main as cli_main

    df = rows(900, weights=False)
    model = distcal.fit(df, method="venn_abers", by="g")
    q = np.array([0.1, 0.3, 0.5, 0.7])
    keys = ["x", "y", "unseen", None]
    p0, p1 = model.predict_interval(q, segments=keys)
    for i, k in enumerate(keys):
        m = model.segment(k) if k in ("x", "y") else model.global_model
        want = m.predict_interval(q[i:i + 1])
        assert (p0[i], p1[i]) == (want[0][0], want[1][0])
    # Written by apply, from Python and from the command line.
    df.to_parquet(tmp_path / "in.parquet")
    model.save(tmp_path / "m")
    apply_to_parquet(model, tmp_path / "in.parquet", tmp_path / "a.parquet",
                     interval_cols=("p0", "p1"))
    assert cli_main(["apply", "--model", str(tmp_path / "m"), "--input",
                     str(tmp_path / "in.parquet"), "--output", str(tmp_path / "b.parquet"),
                     "--interval-cols", "p0,p1"]) == 0
    for name in ("a", "b"):
        out = pd.read_parquet(tmp_path / f"{name}.parquet")
        p0, p1 = model.predict_interval(out.score.to_numpy(), segments=out.g)
        np.testing.assert_array_equal(out.p0, p0)
        np.testing.assert_array_equal(out.p1, p1)
    with pytest.raises(TypeError, match="segments"):
        distcal.fit(df, method="venn_abers").predict_interval(q, segments=keys)


def test_venn_abers_with_infinite_scores_on_every_engine(engine):
    df = rows(600, weights=False)
    df.loc[:9, "score"] = [-np.inf] * 5 + [np.inf] * 5
    model = distcal.fit(engine(df), method="venn_abers", by="g", **engine.opts)
    assert model == distcal.fit(df, method="venn_abers", by="g")
    # by hand: -inf rows pool with the lowest scores; p0(-inf) uses them, p1(+inf) too
    p0, p1 = model.global_model.predict_interval([-np.inf, np.inf])
    want = ivap_oracle(np.where(np.isinf(df.score), np.sign(df.score) * 1e6, df.score),
                       df.label.to_numpy(), np.ones(len(df)), [-1e6, 1e6])
    np.testing.assert_allclose([p0[0], p0[1], p1[0], p1[1]],
                               [want[0, 0], want[0, 1], want[1, 0], want[1, 1]], rtol=1e-12)
    new = pd.DataFrame({"score": [-np.inf, -1.0, 0.3, 2.0, np.inf],
                        "g": ["x", "y", "z", "x", "unseen"]})
    out = model.transform(engine(new), output_col="p")
    got = out if isinstance(out, pd.DataFrame) else (
        out.toPandas() if engine.name == "spark" else out.compute())
    got = got.sort_values("score").reset_index(drop=True)
    np.testing.assert_allclose(got.p, model.predict(got.score, segments=got.g), rtol=1e-15)


# -- evaluating a Venn-Abers output: the widths of its intervals ---------------------

def va_output(n_cal=1500, n_test=3000, seed=3):
    """A Venn-Abers model's output on new rows: p, p0, p1, the labels and weights."""
    model = distcal.fit(rows(n_cal, seed=seed), method="venn_abers", weight_col="w")
    return model.transform(rows(n_test, seed=seed + 1, ties=False), output_col="p",
                           interval_cols=("p0", "p1"))


def width_quantile(d, w, q):
    """The oracle: numpy's weighted quantile of the raw widths (the smallest d whose
    cumulative weight reaches q of the total)."""
    return np.quantile(d, q, weights=w, method="inverted_cdf")


# The histogram's quantiles: within one bin of 100 per decade.
WIDTH_RTOL = 10 ** (1 / 100) - 1


def test_evaluate_reports_the_interval_widths_on_every_engine(engine):
    out = va_output()
    # Intervals that are not: a DataError naming the column, the problem and the count
    flipped = out.index[out.p1 < 0.9][:5]
    out.loc[flipped, "p0"] = out.loc[flipped, "p1"] + 0.05
    out.loc[out.index[out.p1 < 0.9][5:8], "p1"] = 1.5
    cols = ("p0", "p1")
    with pytest.raises(DataError, match=r"column 'p1': 3 rows are outside \[0, 1\]; column "
                                        r"'p0': 5 rows are above column 'p1' \(an interval "
                                        r"needs p0 <= p1\)"):
        distcal.evaluate(engine(out), prob_col="p", weight_col="w", interval_cols=cols,
                         **engine.opts)
    rep = distcal.evaluate(engine(out), prob_col="p", weight_col="w", interval_cols=cols,
                           on_invalid="drop", **engine.opts)
    kept = out[(out.p0 <= out.p1) & (out.p1 <= 1.0)]
    assert len(kept) == len(out) - 8 and rep.dropped_rows == 8
    d, w = (kept.p1 - kept.p0).to_numpy(), kept.w.to_numpy()
    iw = rep.interval_widths
    assert iw["columns"] == ["p0", "p1"] and iw["rows"] == len(kept)
    assert iw["weight"] == pytest.approx(w.sum(), rel=1e-12)
    assert iw["mean"] == pytest.approx(np.average(d, weights=w), rel=1e-9)
    assert (iw["min"], iw["max"]) == (d.min(), d.max())
    for key, q in (("median", 0.5), ("p90", 0.9)):
        assert iw[key] == pytest.approx(width_quantile(d, w, q), rel=WIDTH_RTOL)
    edges, weights = np.array(iw["histogram"]["edges"]), np.array(iw["histogram"]["weight"])
    assert edges[0] <= d.min() and edges[-1] >= d.max() and np.all(np.diff(edges) > 0)
    assert weights.sum() == pytest.approx(w.sum(), rel=1e-12)
    # every engine gives the numbers of the in-memory evaluation, whose other
    # metrics are those without interval_cols
    local = distcal.evaluate(kept, prob_col="p", weight_col="w", interval_cols=cols)
    for key in ("weight", "mean", "median", "p90", "min", "max"):
        assert iw[key] == pytest.approx(local.interval_widths[key], rel=1e-9)
    np.testing.assert_allclose(weights, local.interval_widths["histogram"]["weight"],
                               rtol=1e-9)
    assert rep.brier == pytest.approx(local.brier, rel=1e-9)
    if engine.name == "local":
        plain = distcal.evaluate(kept, prob_col="p", weight_col="w")
        assert plain.interval_widths is None
        assert (local.brier, local.auc, local.ece) == (plain.brier, plain.auc, plain.ece)


def test_interval_width_quantiles_hold_the_histogram_bound():
    rng = np.random.default_rng(11)
    n = 20_000
    width = np.minimum(np.exp(rng.normal(-5.0, 2.0, n)), 1.0)
    width[:500], width[500:700] = 0.0, 1e-8  # zero widths and widths below 1e-6
    p0 = rng.random(n) * (1.0 - width)
    df = pd.DataFrame({"p": p0 + width / 2, "p0": p0, "p1": p0 + width,
                       "label": rng.integers(0, 2, n), "w": rng.choice([0.5, 1.0, 2.0], n)})
    d, w = (df.p1 - df.p0).to_numpy(), df.w.to_numpy()
    iw = distcal.evaluate(df, prob_col="p", weight_col="w",
                          interval_cols=("p0", "p1")).interval_widths
    for key, q in (("median", 0.5), ("p90", 0.9)):
        want = width_quantile(d, w, q)
        assert abs(iw[key] - want) <= WIDTH_RTOL * want + 1e-6
    assert iw["histogram"]["edges"][:2] == [0.0, 1e-6]
    assert iw["histogram"]["weight"][0] == pytest.approx(w[d < 1e-6].sum(), rel=1e-12)


def test_the_report_shows_the_interval_widths(tmp_path):
    import json

    from distcal.report import write_report

    out = va_output(600, 800)
    rep = distcal.evaluate(out, prob_col="p", weight_col="w", interval_cols=("p0", "p1"))
    write_report([rep], tmp_path / "rep")
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert doc["interval_widths"]["median"] == rep.interval_widths["median"]
    assert "interval_widths.png" in doc["figures"]
    rows_ = {r["key"]: r["values"]["p"] for r in doc["table"]}
    assert rows_["interval_width_p90"] == rep.interval_widths["p90"]
    page = (tmp_path / "rep" / "report.html").read_text()
    assert 'id="fig-interval_widths"' in page and "interval width median" in page
    assert json.dumps(rep.to_dict(), allow_nan=False)
    with pytest.raises(ValueError, match="interval_cols"):
        distcal.evaluate(out, prob_col="p", interval_cols=("p0",))
    with pytest.raises(DataError, match="'p' is given as prob_col and as interval_cols"):
        distcal.evaluate(out, prob_col="p", interval_cols=("p0", "p"))


# -- fits from summaries (distcal.summarize): the same model as on the rows -----------

@pytest.mark.parametrize("method", ["beta", "venn_abers"])
def test_fit_from_summaries_equals_the_fit_on_rows(tmp_path, method):
    df = rows(1500)
    half = len(df) // 2
    paths = []
    for i, part in enumerate((df.iloc[:half], df.iloc[half:])):  # two days' summaries
        distcal.summarize(part, weight_col="w", by="g").save(tmp_path / f"s{i}")
        paths.append(str(tmp_path / f"s{i}"))
    want = distcal.fit(df, method=method, weight_col="w", by="g")
    assert distcal.fit(paths, method=method) == want
    assert distcal.fit(distcal.summarize(df, weight_col="w", by="g"), method=method) == want
    plain = distcal.fit(df, method=method, weight_col="w")
    assert plain.method == method
    assert distcal.fit(distcal.summarize(df, weight_col="w"), method=method) == plain
    merged = distcal.summarize(df.iloc[:half], weight_col="w") + distcal.summarize(
        df.iloc[half:], weight_col="w")
    assert distcal.fit(merged, method=method) == plain
