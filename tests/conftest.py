"""Shared fixtures: random calibration data and small helpers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def make_scores(n: int, seed: int = 0, ties: bool = True, weights: bool = False,
                negative: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.beta(2.0, 3.0, n)
    y = (rng.random(n) < s**1.5).astype(np.int64)
    if ties:
        s = np.round(s, 2)
    if negative:
        s = (s - 0.5) * 8.0  # logits-like scores of both signs
    df = pd.DataFrame({"score": s, "label": y})
    if weights:
        w = rng.uniform(0.0, 3.0, n)
        w[rng.random(n) < 0.05] = 0.0  # some zero weights take no part
        df["w"] = w
    return df


@pytest.fixture
def scores_df() -> pd.DataFrame:
    return make_scores(5000, seed=1)


@pytest.fixture
def query() -> np.ndarray:
    return np.linspace(-0.2, 1.2, 2001)


def pytest_collection_modifyitems(config, items):
    """Mark what needs Spark, a Dask cluster or minutes, so ``make test-fast`` can leave it out."""
    for item in items:
        name = item.path.name
        if "spark" in getattr(item, "fixturenames", ()) or name.startswith("test_spark"):
            item.add_marker(pytest.mark.spark)
        if name.startswith("test_dask"):
            item.add_marker(pytest.mark.dask)
        if name == "test_bounded_memory.py" or item.name.startswith(
                "test_sklearn_estimator_checks"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def spark():
    """A real local Spark session (local[2]); executors run this interpreter.

    Prepared as the README tells users to: PySpark starts its Python
    workers with ``PYSPARK_PYTHON``, so it names this interpreter while the
    session starts (restored after). No skip: without Java or pyspark this
    fails, as CI must.
    """
    import os
    import sys

    from pyspark.sql import SparkSession

    saved = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable

    session = (SparkSession.builder.master("local[2]").appName("distcal-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.sql.warehouse.dir", str(_tmp_warehouse()))
               .getOrCreate())
    if saved is None:
        del os.environ["PYSPARK_PYTHON"]
    else:
        os.environ["PYSPARK_PYTHON"] = saved
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _tmp_warehouse():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="distcal-warehouse-"))
