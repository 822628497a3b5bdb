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


# The files that take minutes (each spark-submit or cluster start is a JVM), longest
# first. ``make test`` runs ``-n 2 --dist loadfile --no-loadscope-reorder``: xdist
# hands out whole files in collection order, so starting the long ones first keeps
# one worker from running a long file alone at the end (xdist's own order, by
# number of tests, put the two-test Airflow file last).
LONG_FILES = ["test_spark_jobs.py", "test_airflow.py", "test_spark_standalone.py",
              "test_spark_cluster.py", "test_readme.py", "test_bounded_memory.py",
              "test_spark.py", "test_spark_multiclass.py", "test_scale_spark.py",
              "test_hardening_badinput.py", "test_dask_jobs.py", "test_hardening_kill.py",
              "test_loopback.py", "test_spark_segments.py", "test_spark_vectors.py"]


def pytest_collection_modifyitems(config, items):
    """Mark what needs Spark, a Dask cluster or minutes, so ``make test-fast`` can leave it out.

    Also put the long files first (see LONG_FILES).
    """
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable
    for item in items:
        name = item.path.name
        # A parametrised case that runs the Spark or Dask job (e.g. test_cli[spark-job-csv])
        # starts that engine too.
        params = getattr(getattr(item, "callspec", None), "id", "")
        if ("spark" in getattr(item, "fixturenames", ()) or name.startswith("test_spark")
                or "spark" in params or name == "test_loopback.py"):
            item.add_marker(pytest.mark.spark)
        if name.startswith("test_dask") or "dask" in params:
            item.add_marker(pytest.mark.dask)
        if name in ("test_bounded_memory.py", "test_hardening_kill.py") or item.name.startswith(
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


@pytest.fixture(scope="session")
def client():
    """A real Dask ``distributed`` cluster: two worker processes of one thread each.

    One per test process, shared by the test_dask*.py files (tests that kill
    workers start clusters of their own).
    """
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


def _tmp_warehouse():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="distcal-warehouse-"))
