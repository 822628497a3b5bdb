"""Optimal thresholds against brute force and the paper's worked example."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distcal


def brute_force(s, y, w, cost_fp=1.0, cost_fn=1.0, z=None):
    """Try every candidate threshold (each distinct score and +inf), O(n^2)."""
    best_t, best_c = math.inf, None
    for t in sorted(set(s.tolist()) | {math.inf}, reverse=True):
        pos = s >= t
        if z is not None:
            c = float(np.sum(w[pos] * z[pos]))
        else:
            c = float(cost_fp * np.sum(w[pos] * (1 - y[pos])) + cost_fn * np.sum(w[~pos] * y[~pos]))
        if best_c is None or c < best_c - 1e-12:
            best_t, best_c = t, c
    return best_t, best_c


def achieved(s, y, w, t, cost_fp, cost_fn):
    pos = s >= t
    return float(cost_fp * np.sum(w[pos] * (1 - y[pos])) + cost_fn * np.sum(w[~pos] * y[~pos]))


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.integers(0, 10_000), st.sampled_from([(1, 1), (1, 5), (3, 1),
                                                                    (0.5, 0.25)]))
def test_matches_brute_force(n, seed, costs):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 6, n).astype(float) / 5  # many ties
    y = (rng.random(n) < s).astype(float)
    w = rng.choice([0.0, 0.5, 1.0, 2.0], n)
    if w.sum() == 0:
        w[0] = 1.0
    df = pd.DataFrame({"score": s, "label": y, "w": w})
    res = distcal.optimal_threshold(df, weight_col="w", cost_fp=costs[0], cost_fn=costs[1])
    t, c = brute_force(s[w > 0], y[w > 0], w[w > 0], *costs)
    assert res.cost == pytest.approx(c, abs=1e-9)
    assert achieved(s, y, w, res.threshold, *costs) == pytest.approx(c, abs=1e-9)
    assert res.threshold == t  # the largest threshold of minimal cost
    pos = s >= res.threshold
    assert res.n_positive_predicted == pytest.approx(w[pos].sum())
    assert res.tp + res.fp == pytest.approx(w[pos].sum())
    assert res.fn == pytest.approx(np.sum(w[~pos] * y[~pos]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(-9, 9), st.sampled_from([0.0, 1.0, 2.5])),
                min_size=1, max_size=30))
def test_per_row_loss_brute_force(rows):
    s = np.array([r[0] for r in rows], dtype=float)
    z = np.array([r[1] for r in rows], dtype=float)
    w = np.array([r[2] for r in rows])
    if w.sum() == 0:
        w[0] = 1.0
    df = pd.DataFrame({"score": s, "z": z, "w": w})
    res = distcal.optimal_threshold(df, loss_col="z", weight_col="w")
    t, c = brute_force(s[w > 0], None, w[w > 0], z=z[w > 0])
    assert res.cost == pytest.approx(c, abs=1e-9)
    assert res.threshold == t


def _exact_best(s, cost, candidates):
    """The largest of the thresholds of least cost, costs in exact decimal arithmetic."""
    costs = {t: cost(s >= t) for t in candidates}
    return max(t for t, c in costs.items() if c == min(costs.values()))


def test_costs_equal_as_written_tie_on_every_engine(engine):
    """Costs 0.1 and 0.3 (z of 0.1 ... 0.7): thresholds whose costs are equal as written
    (3 x 0.1 and 0.3) differ in float by rounding, which depends on the order of the
    sums, hence on the engine and its ranges. They tie: the largest is returned, as
    exact decimal arithmetic (fractions) says, on every engine."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    parts = []
    for g in range(150):
        n = int(rng.integers(3, 12))
        parts.append(pd.DataFrame({"g": g, "score": np.arange(n, dtype=float),
                                   "label": rng.integers(0, 2, n),
                                   "z": rng.choice([-0.3, -0.2, -0.1, 0.1, 0.2, 0.3, 0.7], n)}))
    df = pd.concat(parts, ignore_index=True)
    by_class = distcal.optimal_threshold(engine(df), cost_fp=0.1, cost_fn=0.3, by="g",
                                         **engine.opts).segments.set_index("g")
    by_loss = distcal.optimal_threshold(engine(df), loss_col="z", by="g",
                                        **engine.opts).segments.set_index("g")
    tenth, three_tenths = Fraction("0.1"), Fraction("0.3")
    for g, part in df.groupby("g"):
        s, y = part.score.to_numpy(), part.label.to_numpy()
        z = [Fraction(str(v)) for v in part.z]
        candidates = [*s.tolist(), math.inf]
        want = _exact_best(s, lambda pos, y=y: tenth * int(np.sum(pos & (y == 0)))
                           + three_tenths * int(np.sum(~pos & (y == 1))), candidates)
        assert by_class.threshold[g] == want, g
        assert by_loss.threshold[g] == _exact_best(
            s, lambda pos, z=z: sum((v for v, p in zip(z, pos) if p), Fraction(0)),
            candidates), g


def test_losses_that_cancel_at_one_score_tie_in_any_row_order(engine):
    """Per-row losses that cancel exactly at one score (0.1 + 0.2 - 0.1 - 0.2) pool to 0
    or to a rounding error of either sign, by the order they are added. The tie scale
    of that score is the sum of its rows' |w z|, not |sum w z|, so the rounding never
    picks the threshold: every engine, in every row order, returns the largest threshold
    of least cost in exact decimal arithmetic (fractions), as the tracker does. Before,
    the threshold flipped between that score and "predict nothing" with the order."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    cancelling = [0.1, 0.2, -0.1, -0.2, 0.3, -0.3, 0.7, -0.7]
    parts = []
    for g in range(120):
        k = 2 * int(rng.integers(2, 5))
        z = rng.permutation(cancelling[:k])  # sums to 0 exactly, in any order in float
        above = [[], [0.1], [-0.1], [0.2, -0.2]][int(rng.integers(0, 4))]
        below = rng.choice([0.1, 0.3, 0.7, -0.9], int(rng.integers(1, 4))).tolist()
        parts.append(pd.DataFrame({
            "g": g, "score": [0.9] * k + [0.95] * len(above) + [0.2 + 0.1 * i
                                                                for i in range(len(below))],
            "z": [*z.tolist(), *above, *below],
            "w": rng.choice([1.0, 0.5, 2.0], 1).tolist() * (k + len(above) + len(below))}))
    df = pd.concat(parts, ignore_index=True)
    wants = {}
    for g, part in df.groupby("g"):
        s = part.score.to_numpy()
        zw = [Fraction(str(v)) * Fraction(w) for v, w in zip(part.z, part.w)]
        wants[g] = _exact_best(s, lambda pos, zw=zw: sum((v for v, p in zip(zw, pos) if p),
                                                         Fraction(0)), [*s.tolist(), math.inf])
    assert {math.inf, 0.95} < set(wants.values())  # and thresholds below 0.9
    for order in (np.arange(len(df)), np.arange(len(df))[::-1], rng.permutation(len(df))):
        rows = df.iloc[order].reset_index(drop=True)
        got = distcal.optimal_threshold(engine(rows), loss_col="z", weight_col="w", by="g",
                                        **engine.opts).segments.set_index("g").threshold
        assert {g: got[g] for g in wants} == wants
        for g in (0, 1, 2):  # without by=: one group's rows, and the tracker
            one = rows[rows.g == g]
            res = distcal.optimal_threshold(engine(one), loss_col="z", weight_col="w",
                                            **engine.opts)
            tracker = distcal.ThresholdTracker()
            tracker.update_many(one.score, weights=one.w, losses=one.z)
            assert res.threshold == tracker.threshold == wants[g], (g, order[:5])


def _separated_groups(rng, n_groups, loss):
    """Segments whose thresholds' exact costs tie exactly or differ by more than 2^-30 of
    the mass of the longer suffix (the sum of |each row's terms| over its rows), with
    weights, costs or losses spanning up to 1e12: ((rows, costs), exact answer) each."""
    from fractions import Fraction as F

    out = []
    while len(out) < n_groups:
        n = int(rng.integers(2, 9))
        s = rng.integers(0, 5, n).astype(float)
        y = rng.integers(0, 2, n).astype(float)
        big = float(rng.choice([1e12, 1e6, 2.0 ** 40]))
        w = rng.choice([big, 10.0, 1.0, 3.0, 0.5], n)
        costs = [(1.0, 1.0), (1.0, 3.0), (1e8, 1.0), (1.0, 1e8), (0.5, 2.0 ** 30)][
            int(rng.integers(0, 5))]
        z = rng.choice([big, -big, 10.0, -10.0, 1.0, -1.0, 0.5, -3.0], n)
        if loss:
            terms = [[F(wi) * F(zi)] for wi, zi in zip(w, z)]
        else:
            terms = [[F(costs[0]) * F(wi) * F(1 - yi), -F(costs[1]) * F(wi) * F(yi)]
                     for wi, yi in zip(w, y)]
        candidates = sorted({*s.tolist(), math.inf})
        cost = {t: sum((sum(r) for r, si in zip(terms, s) if si >= t), F(0))
                for t in candidates}
        mass = {t: sum((abs(v) for r, si in zip(terms, s) if si >= t for v in r), F(0))
                for t in candidates}
        if all(cost[a] == cost[b] or abs(cost[a] - cost[b]) > mass[a] / 2 ** 30
               for i, a in enumerate(candidates) for b in candidates[i + 1:]):
            low = min(cost.values())
            out.append(((s, y, w, z, costs), max(t for t in candidates if cost[t] == low)))
    return out


@pytest.mark.parametrize("loss", [False, True], ids=["class costs", "per-row loss"])
def test_threshold_exact_when_weights_and_costs_span_1e12(engine, loss):
    """A cost difference is a tie only when it is below 2^-36 of the mass of the rows
    the two compared suffixes hold, not of the whole table: with weights, losses or
    class costs spanning 1e12, every engine and the tracker (in any order of
    updates) return the exact optimum (the largest of equal ones), exact arithmetic
    (fractions) the oracle. Weights 1e12 and 10 (scores 0 and 1) gave t = inf at a
    cost of 10 where t = 1 costs 0, and a large loss below the candidates moved the
    answer with the ranges."""
    rng = np.random.default_rng(4 + loss)
    groups = _separated_groups(rng, 120, loss)
    frames = []
    for g, ((s, y, w, z, costs), _) in enumerate(groups):
        frames.append(pd.DataFrame({"g": g, "score": s, "label": y, "w": w, "z": z,
                                    "c_fp": costs[0], "c_fn": costs[1]}))
    df = pd.concat(frames, ignore_index=True)
    if loss:
        got = distcal.optimal_threshold(engine(df), loss_col="z", weight_col="w", by="g",
                                        **engine.opts).segments.set_index("g").threshold
    else:  # one call per pair of costs
        got = pd.concat([
            distcal.optimal_threshold(engine(part), weight_col="w", cost_fp=c_fp,
                                      cost_fn=c_fn, by="g", **engine.opts
                                      ).segments.set_index("g").threshold
            for (c_fp, c_fn), part in df.groupby(["c_fp", "c_fn"])])
    for g, ((s, y, w, z, costs), want) in enumerate(groups):
        assert got[g] == want, (g, s, y, w, z, costs)
        if engine.name != "local":
            continue
        for order in (np.arange(len(s)), np.arange(len(s))[::-1], rng.permutation(len(s))):
            tracker = distcal.ThresholdTracker(*costs)
            for i in order:
                if loss:
                    tracker.update(s[i], weight=w[i], loss=z[i])
                else:
                    tracker.update(s[i], y[i], w[i])
            assert tracker.threshold == want, (g, order)


def test_tracker_ties_costs_equal_as_written_in_any_order_of_updates():
    """The tracker's sums are added in the order rows arrive: thresholds of costs equal
    as written tie there too, whatever that order (exact decimal arithmetic)."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(3, 12))
        s, y = np.arange(n, dtype=float), rng.integers(0, 2, n)
        want = _exact_best(s, lambda pos, y=y: Fraction("0.1") * int(np.sum(pos & (y == 0)))
                           + Fraction("0.3") * int(np.sum(~pos & (y == 1))),
                           [*s.tolist(), math.inf])
        for order in (np.arange(n)[::-1], np.arange(n), rng.permutation(n)):
            tracker = distcal.ThresholdTracker(cost_fp=0.1, cost_fn=0.3)
            for i in order:
                tracker.update(s[i], y[i])
            assert tracker.threshold == want


def test_paper_example():
    pairs = [(1, 1), (8, -2), (5, 3), (4, -4), (6, 5), (3, -6), (7, 7), (2, -8)]
    df = pd.DataFrame(pairs, columns=["score", "z"])
    res = distcal.optimal_threshold(df, loss_col="z")
    assert res.threshold == 2 and res.cost == -5
    assert math.isnan(res.tp)  # no labels with a per-row loss


def test_nothing_positive_gives_inf():
    df = pd.DataFrame({"score": [0.1, 0.5, 0.9], "label": [0, 0, 0]})
    res = distcal.optimal_threshold(df)
    assert res.threshold == math.inf and res.cost == 0 and res.n_positive_predicted == 0


def test_everything_positive():
    df = pd.DataFrame({"score": [0.1, 0.5, 0.9], "label": [1, 1, 1]})
    res = distcal.optimal_threshold(df)
    assert res.threshold == 0.1 and res.cost == 0 and res.tp == 3


@pytest.mark.parametrize("cost_fp,cost_fn", [(1, 1), (1, 4), (4, 1), (2, 3)])
def test_cross_check_with_isotonic(cost_fp, cost_fn):
    """Thresholding the isotonic fit at c_fp / (c_fp + c_fn) reaches the optimal cost."""
    rng = np.random.default_rng(cost_fp * 10 + cost_fn)
    n = 5000
    s = np.round(rng.random(n), 3)
    y = (rng.random(n) < s**2).astype(float)
    w = rng.uniform(0.5, 2, n)
    df = pd.DataFrame({"score": s, "label": y, "w": w})
    res = distcal.optimal_threshold(df, weight_col="w", cost_fp=cost_fp, cost_fn=cost_fn)
    model = distcal.fit(df, weight_col="w", interpolation="step")
    pos = model.predict(s) >= cost_fp / (cost_fp + cost_fn)
    iso_cost = cost_fp * np.sum(w[pos] * (1 - y[pos])) + cost_fn * np.sum(w[~pos] * y[~pos])
    assert res.cost == pytest.approx(iso_cost, rel=1e-12)


PAPER = [(1, 1), (8, -2), (5, 3), (4, -4), (6, 5), (3, -6), (7, 7), (2, -8)]


def test_tracker_paper_example_after_every_update():
    tracker = distcal.ThresholdTracker()
    for k, (s, z) in enumerate(PAPER, start=1):
        tracker.update(s, loss=z)
        seen = np.array(PAPER[:k], dtype=float)
        t, c = brute_force(seen[:, 0], None, np.ones(k), z=seen[:, 1])
        assert tracker.threshold == t and tracker.cost == pytest.approx(c)
    assert tracker.threshold == 2 and tracker.cost == -5
    seg = tracker.summary()
    assert seg.z == sum(z for _, z in PAPER) and seg.best == -5 and seg.threshold == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-6, 6), st.sampled_from([0.0, 1.0, 0.5]),
                          st.sampled_from([0.0, 0.5, 1.0, 3.0])), min_size=1, max_size=35),
       st.sampled_from([(1.0, 1.0), (1.0, 3.0), (2.0, 0.5)]))
def test_tracker_matches_brute_force_after_every_update(rows, costs):
    tracker = distcal.ThresholdTracker(*costs)
    for k, (s, y, w) in enumerate(rows, start=1):
        tracker.update(s / 3.0, y, w)
        arr = np.array(rows[:k], dtype=float)
        live = arr[:, 2] > 0
        if not live.any():
            assert tracker.threshold == math.inf and tracker.cost == 0
            continue
        t, c = brute_force(arr[live, 0] / 3.0, arr[live, 1], arr[live, 2], *costs)
        assert tracker.cost == pytest.approx(c, abs=1e-9)
        assert tracker.threshold == t
    df = pd.DataFrame(rows, columns=["score", "label", "w"]).assign(score=lambda d: d.score / 3)
    if (df.w > 0).any():
        batch = distcal.optimal_threshold(df, weight_col="w", cost_fp=costs[0], cost_fn=costs[1])
        res = tracker.result()
        for f in ("threshold", "cost", "n_positive_predicted", "tp", "fp", "tn", "fn"):
            assert getattr(res, f) == pytest.approx(getattr(batch, f), abs=1e-9), f


def test_tracker_result_of_rows_with_losses_has_no_confusion_as_loss_col():
    """optimal_threshold(loss_col=...) reports tp, fp, tn, fn as NaN (there are no labels):
    so does the tracker's result once a row came with its own loss, by update or
    update_many; threshold, cost and the positive predictions are the same."""
    df = pd.DataFrame({"score": [0.2, 1.0, 0.5], "z": [0.5, -1.0, -0.2]})
    batch = distcal.optimal_threshold(df, loss_col="z")
    one, many = distcal.ThresholdTracker(), distcal.ThresholdTracker()
    for s, z in zip(df.score, df.z):
        one.update(s, loss=z)
    many.update_many(df.score, losses=df.z)
    for t in (one, many):
        res = t.result()
        for f in ("threshold", "cost", "n_positive_predicted", "n_rows"):
            assert getattr(res, f) == pytest.approx(getattr(batch, f), abs=1e-12), f
        assert all(math.isnan(getattr(res, f)) for f in ("tp", "fp", "tn", "fn"))
    labelled = distcal.ThresholdTracker()
    labelled.update(0.3, 1.0)
    assert labelled.result().tp == 1.0


def test_update_many_equals_updates():
    rng = np.random.default_rng(3)
    s = np.round(rng.normal(size=3000), 2)
    y = (rng.random(3000) < 0.4).astype(float)
    w = rng.uniform(0, 2, 3000)
    a, b = distcal.ThresholdTracker(1, 2), distcal.ThresholdTracker(1, 2)
    a.update_many(s, y, w)
    for i in range(3000):
        b.update(s[i], y[i], w[i])
    assert a.threshold == b.threshold and a.cost == pytest.approx(b.cost, rel=1e-12)
    assert a.n_distinct == b.n_distinct == len(np.unique(s))
    batch = distcal.optimal_threshold(pd.DataFrame({"score": s, "label": y, "w": w}),
                                      weight_col="w", cost_fp=1, cost_fn=2)
    assert a.threshold == batch.threshold and a.cost == pytest.approx(batch.cost, rel=1e-12)
    c = distcal.ThresholdTracker()
    c.update_many([1, 8, 5, 4, 6, 3, 7, 2], losses=[1, -2, 3, -4, 5, -6, 7, -8])
    assert (c.threshold, c.cost) == (2, -5)


def test_tracker_signed_zero_and_infinities():
    t = distcal.ThresholdTracker()
    t.update(-0.0, 1)
    t.update(0.0, 1)
    t.update(-np.inf, 0)
    t.update(np.inf, 1)
    assert t.n_distinct == 3 and t.threshold == 0.0 and t.cost == 0


def test_tracker_bad_rows():
    t = distcal.ThresholdTracker()
    with pytest.raises(distcal.DataError, match="NaN"):
        t.update(float("nan"), 1)
    with pytest.raises(distcal.DataError, match="label"):
        t.update(0.5, 2)
    with pytest.raises(distcal.DataError, match="weight"):
        t.update(0.5, 1, -1.0)
    with pytest.raises(distcal.DataError, match="loss"):
        t.update(0.5, loss=float("inf"))
    with pytest.raises(ValueError):
        t.update(0.5)
    with pytest.raises(distcal.DataError, match=r"argument 'labels': 1 row is outside .*"
                       r"\(leave such rows out\)$"):
        t.update_many([0.1, 0.2], [0, 3])
    with pytest.raises(distcal.DataError, match="argument 'losses': 1 row is infinite"):
        t.update_many([0.1, 0.2], losses=[0.5, math.inf])
    assert t.n_rows == 0 and t.threshold == math.inf


@pytest.mark.parametrize("increasing", [True, "auto"])
def test_fit_and_threshold_in_one_pass(increasing):
    rng = np.random.default_rng(17)
    s = np.round(rng.random(5000), 3)
    df = pd.DataFrame({"score": s, "label": (rng.random(5000) < s).astype(int),
                       "w": rng.uniform(0.5, 2, 5000)})
    model, res = distcal.fit_and_threshold(df, weight_col="w", cost_fp=1, cost_fn=3,
                                           increasing=increasing)
    assert model == distcal.fit(df, weight_col="w", increasing=increasing)
    alone = distcal.optimal_threshold(df, weight_col="w", cost_fp=1, cost_fn=3)
    assert res.threshold == alone.threshold and res.cost == pytest.approx(alone.cost)
    sig, res2 = distcal.fit_and_threshold(df, method="sigmoid", weight_col="w", cost_fn=3)
    assert sig == distcal.fit(df, method="sigmoid", weight_col="w") and res2 == res


def test_fit_and_threshold_keeps_the_infinite_scores_the_fit_drops(engine):
    """Sigmoid, histogram and beta drop rows of score +-inf (on_invalid="drop"); the
    threshold keeps them, as optimal_threshold does: brute force over the four rows costs
    1 at t = 0.4 (the negative at +inf is predicted positive), not the three rows' 0."""
    df = pd.DataFrame({"score": [0.1, 0.4, 0.6, np.inf, np.nan],
                       "label": [0, 1, 1, 0, 1]})
    alone = distcal.optimal_threshold(engine(df), on_invalid="drop")
    assert (alone.threshold, alone.cost, alone.fp, alone.n_rows, alone.dropped_rows) == \
        (0.4, 1.0, 1.0, 4, 1)
    for method, kw in [("isotonic", {}), ("sigmoid", {}), ("histogram", {"n_bins": 2}),
                       ("beta", {})]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # (beta: separated classes)
            model, best = distcal.fit_and_threshold(engine(df), method=method,
                                                    on_invalid="drop", **kw)
            assert model == distcal.fit(df, method=method, on_invalid="drop", **kw), method
        assert best == alone, method
