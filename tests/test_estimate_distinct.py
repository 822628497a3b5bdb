"""core.distinct.estimate_distinct: the equal-frequency estimate, and a sample of nulls only."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from distcal.core.distinct import estimate_distinct


@given(st.integers(2, 10**6), st.integers(1, 10**5))
def test_solves_the_equal_frequency_equation(m, true_d):
    # the expected number of distinct values in m draws from true_d equally frequent ones
    d = int(round(true_d * -np.expm1(-m / true_d)))
    if not 0 < d < m:
        return
    est = estimate_distinct(10**15, m, d)
    assert est * -np.expm1(-m / est) == pytest.approx(d, rel=1e-6)


def test_edges():
    assert estimate_distinct(1000, 100, 100) == 1000.0  # no tie seen
    assert estimate_distinct(1000, 0, 0) == 0.0
    # every sampled score null: no distinct value seen (it divided by zero)
    assert estimate_distinct(10**15, 50_000, 0) == 0.0
