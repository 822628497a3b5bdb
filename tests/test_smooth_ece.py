"""Smooth ECE: equal to relplot's smECE, and mergeable over ranges."""

from __future__ import annotations

import numpy as np
import pytest
import relplot  # noqa: E402  (dev extra: installed by make; never skipped)

from distcal.core import smooth_ece as sm
from distcal.core.distinct import merge_tables, pool_ties


def _data(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    f = rng.uniform(size=n)
    if kind == "overconfident":
        y = (rng.random(n) < 0.5 + 0.5 * (f - 0.5)).astype(float)
    elif kind == "calibrated":  # smECE < 0.01: the search needs grids finer than 1001
        y = (rng.random(n) < f).astype(float)
    elif kind == "ties":
        f = np.round(f, 2)
        y = (rng.random(n) < f ** 2).astype(float)
    elif kind == "beta":
        f = rng.beta(0.5, 3.0, n)
        y = (rng.random(n) < np.sqrt(f)).astype(float)
    elif kind == "extremes":  # mass at exactly 0 and 1 (the grid's end points)
        f = rng.choice([0.0, 0.25, 1.0], n)
        y = (rng.random(n) < 0.3).astype(float)
    elif kind == "constant":
        f = np.full(n, 0.37)
        y = (rng.random(n) < 0.5).astype(float)
    elif kind == "perfect":  # labels equal to the predictions: smECE ~ 0, sigma at eps
        f = rng.integers(0, 2, n).astype(float)
        y = f.copy()
    else:
        raise AssertionError(kind)
    return f, y


CASES = [("overconfident", 3000, 0), ("calibrated", 200_000, 1), ("ties", 5000, 2),
         ("beta", 20_000, 3), ("extremes", 4000, 4), ("constant", 500, 5), ("perfect", 300, 6),
         ("overconfident", 50, 7)]


@pytest.mark.parametrize("kind,n,seed", CASES)
def test_equals_relplot(kind: str, n: int, seed: int) -> None:
    """Same sigma* (a multiple of 2^-10) and the same value up to summation order.

    relplot's own tolerance is its bisection bracket (2^-10 in sigma); our grid
    sums are relplot's sums added per distinct probability instead of per row,
    so the value agrees to ~1e-15 and sigma* is identical.
    """
    f, y = _data(kind, n, seed)
    want, want_sigma = relplot.smECE(f, y, return_width=True)
    got = sm.smooth_ece(pool_ties(f, y))
    assert got["smece_sigma"] == want_sigma
    assert got["smece"] == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("sigma", [1.0, 0.3, 0.05, 0.01, 0.004])
def test_fixed_bandwidth_equals_relplot(sigma: float) -> None:
    f, y = _data("beta", 10_000, 11)
    grid = sm.combine_grid_partials([sm.grid_partials(pool_ties(f, y), (sm.grid_size(sigma),))])
    got = sm.smooth_ece_sigma(grid[sm.grid_size(sigma)], sigma)
    assert got == pytest.approx(relplot.smECE_sigma(f, y, sigma), rel=1e-10, abs=1e-14)


def test_integer_weights_are_repeated_rows() -> None:
    """A weight w stands for w repeated rows (relplot has no weights), but for relplot's
    density epsilon of 1e-4 a row, taken in units of the mean weight (2.5 here): ~1e-7."""
    rng = np.random.default_rng(8)
    f = np.round(rng.uniform(size=400), 3)
    y = (rng.random(400) < f).astype(float)
    reps = rng.integers(1, 5, 400)
    weighted = sm.smooth_ece(pool_ties(f, y, reps.astype(float)))
    want, want_sigma = relplot.smECE(np.repeat(f, reps), np.repeat(y, reps), return_width=True)
    assert weighted["smece_sigma"] == want_sigma
    assert weighted["smece"] == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("w", [1e-140, 1e-9, 1e-6, 0.002, 7.0, 1e6])
def test_weights_of_one_value_are_unit_weights(w: float) -> None:
    """Multiplying every weight by one factor changes nothing: relplot's number. A fixed
    epsilon outweighed small weights (0.120 instead of 0.144 at w = 1e-6, 0.001 at 1e-9)."""
    rng = np.random.default_rng(14)
    f = rng.uniform(size=500)
    y = (rng.random(500) < f ** 2).astype(float)
    want, want_sigma = relplot.smECE(f, y, return_width=True)
    got = sm.smooth_ece(pool_ties(f, y, np.full(500, w)))
    assert got["smece_sigma"] == want_sigma
    assert got["smece"] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("kind,n,seed", [("calibrated", 100_000, 9), ("ties", 5000, 10)])
def test_mergeable_over_ranges(kind: str, n: int, seed: int) -> None:
    """Splitting the distinct table into ordered ranges changes nothing; nor do
    partition tables merged in another order."""
    f, y = _data(kind, n, seed)
    whole = sm.smooth_ece(pool_ties(f, y))
    t = pool_ties(f, y)
    cuts = [0, 1, len(t) // 3, len(t) // 3 + 1, len(t) - 2, len(t)]
    ranges = [t.slice(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    calls = []

    def map_ranges(fn):
        calls.append(1)
        return [fn(r) for r in ranges]

    split = sm.smooth_ece(map_ranges)
    assert split["smece_sigma"] == whole["smece_sigma"]
    assert split["smece"] == pytest.approx(whole["smece"], rel=1e-12, abs=1e-15)
    # one map per grid size the search needed
    assert len(calls) <= len(sm.SEARCH_GRID_SIZES)
    halves = merge_tables([pool_ties(f[n // 2:], y[n // 2:]), pool_ties(f[:n // 2], y[:n // 2])])
    assert sm.smooth_ece(halves)["smece"] == pytest.approx(whole["smece"], rel=1e-12)


def test_search_grid_sizes() -> None:
    assert sm.SEARCH_GRID_SIZES[0] == sm.DEFAULT_GRID == 1001
    assert all(sm.grid_size(k / 1024) in sm.SEARCH_GRID_SIZES for k in range(2, 1025))


def test_smooth_curve_of_calibrated_data_follows_diagonal() -> None:
    f, y = _data("calibrated", 200_000, 12)
    res = sm.smooth_ece(pool_ties(f, y))
    curve = sm.smooth_curve(res["grid"], res["smece_sigma"])
    inner = (curve["t"] > 0.1) & (curve["t"] < 0.9)
    assert np.max(np.abs(curve["mu"][inner] - curve["t"][inner])) < 0.03
    # uniform predictions: density about 1 away from the edges
    assert np.allclose(curve["density"][inner], 1.0, atol=0.1)


def test_the_report_figure_draws_the_report_s_own_smooth_curve() -> None:
    """The figures read the metrics back from a report (metrics_from_report): the smoothed
    curve is the report's. Recomputed from the ROC's table (one row per probability, not
    the rows), weighted rows had another mean weight, so another curve (by up to 0.021)."""
    import pandas as pd

    import distcal
    from distcal.core import calibration_metrics as cm

    rng = np.random.default_rng(1)
    n = 100_000
    p = rng.choice(np.array([0.001, 0.002, 0.5, 0.999]), n, p=[0.6, 0.3, 0.0999, 0.0001])
    df = pd.DataFrame({"prob": p, "label": (rng.random(n) < np.clip(p * 1.05, 0, 1)),
                       "w": rng.uniform(0.5, 1.5, n)})
    rep = distcal.evaluate(df.astype({"label": int}), weight_col="w")
    drawn = cm.metrics_from_report(rep)["smooth_curve"]
    for part in ("t", "mu", "density"):
        np.testing.assert_array_equal(drawn[part], rep.smooth_curve[part])
