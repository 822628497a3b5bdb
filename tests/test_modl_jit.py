"""The compiled MODL kernel (numba) against the Python reference path.

Not bit for bit (numba's lgamma is the C library's): the costs of the
partitions found agree within 1e-9 relative, on signal, noise and ties with
2, 3 and 5 classes, on tables large enough for the greedy path. Each side's
cost is checked against the oracle criterion of tests/test_modl.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_modl import make_counts, oracle_cost

from distcal.core.modl import modl_partition


def test_numba_is_installed():
    """numba is a dependency: the kernel below must really be compiled, never skipped."""
    import numba

    assert numba.__version__


@pytest.mark.parametrize("J", [2, 3, 5])
@pytest.mark.parametrize("kind", ["signal", "noise", "ties"])
def test_kernel_cost_equals_the_python_path(J, kind):
    counts = make_counts(np.random.default_rng([J, len(kind)]), 6000, J, kind)
    python = modl_partition(counts, exact_max=0, compiled=False)
    kernel = modl_partition(counts, exact_max=0, compiled=True)
    assert kernel.cost == pytest.approx(python.cost, rel=1e-9)
    for res in (python, kernel):
        assert res.cost == pytest.approx(oracle_cost(res.interval_counts), rel=1e-12)


def test_kernel_on_large_counts_beyond_the_lgamma_table():
    """Heavy rows: spans of more than 2^16 rows, where lgamma is computed, not read."""
    rng = np.random.default_rng(5)
    p = np.linspace(0.05, 0.95, 3000)
    n = rng.integers(50, 200, 3000)
    ones = rng.binomial(n, p)
    counts = np.column_stack([n - ones, ones])
    python = modl_partition(counts, exact_max=0, compiled=False)
    kernel = modl_partition(counts, exact_max=0, compiled=True)
    assert kernel.cost == pytest.approx(python.cost, rel=1e-9)
