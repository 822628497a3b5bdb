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


# -- JVM start-up --------------------------------------------------------------------
# The suite starts some fifty Spark JVMs (spark-submit jobs, Airflow tasks, README
# blocks, fresh sessions), each spending ~15 s of CPU loading the same classes. A
# class-data-sharing archive of those classes (JDK 17's dynamic CDS) halves that; it
# is made once per virtual environment and handed to every spark-submit through
# SPARK_SUBMIT_OPTS. It changes nothing a job computes or prints (the JVM ignores an
# archive that does not match, silently with these -Xlog options), so tests still run
# the jobs as users do.
#
# Most of those JVMs run a job on a few thousand rows and exit within a minute, and
# HotSpot's optimising compiler (C2) spends more CPU compiling than such a run
# saves: a spark-submit fit of 2,000 rows took 34-38 s of CPU with the archive and
# 20 s with the quick compiler alone (-XX:TieredStopAtLevel=1), on two cores shared
# by both test workers. Like the archive, it changes no result. The long-lived session
# of the `spark` fixture runs many small jobs too: with C2, its JVM spent a third of
# its CPU compiling (test_export.py and test_methods.py on Spark: 240 CPU-s, 145 with
# C1 only). Children that push millions of rows through one JVM keep C2
# (full_jit_env).
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def full_jit_env() -> dict[str, str]:
    """This process's environment for a JVM that runs large data (keeps C2)."""
    import os

    env = dict(os.environ)
    if "SPARK_SUBMIT_OPTS" in env:
        env["SPARK_SUBMIT_OPTS"] = env["SPARK_SUBMIT_OPTS"].replace(QUICK_JIT, "").strip()
    return env


CDS_SCRIPT = """
import os, sys, tempfile
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
d = tempfile.mkdtemp()
df = spark.range(0, 1000, numPartitions=2).select(F.rand(1).alias("score"), F.lit(1).alias("y"))
df.write.parquet(d + "/p")
back = spark.read.parquet(d + "/p").repartitionByRange(2, "score")
back.mapInArrow(lambda it: it, back.schema).groupBy("y").agg(F.sum("score")).collect()
back.toPandas()
spark.stop()
"""


def _class_archive(root) -> str | None:
    """SPARK_SUBMIT_OPTS that use this environment's class archive (made if missing)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pyspark

    archive = Path(sys.prefix) / f"spark-{pyspark.__version__}-classes.jsa"
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"
    if not archive.exists():
        tmp = archive.with_suffix(f".{os.getpid()}.tmp")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={tmp} {quiet}"}
        spark_submit = Path(sys.executable).parent / "spark-submit"
        script = Path(root) / "cds_warmup.py"
        script.write_text(CDS_SCRIPT)
        r = subprocess.run([str(spark_submit), "--master", "local[2]", str(script)], env=env,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not tmp.exists():
            return None  # no archive: every JVM just starts as it would anyway
        tmp.rename(archive)
    return f"-XX:SharedArchiveFile={archive} {quiet}"


def pytest_configure(config):
    """In the controlling process (before xdist's workers start, which inherit it)."""
    import os
    import tempfile

    if hasattr(config, "workerinput") or "SPARK_SUBMIT_OPTS" in os.environ:
        return
    if "not spark" in (config.getoption("markexpr") or ""):
        return  # make test-fast starts no JVM
    opts = _class_archive(tempfile.mkdtemp(prefix="distcal-cds-"))
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts or ''} {QUICK_JIT}".strip()


# The files that take minutes (each spark-submit or cluster start is a JVM), longest
# first. ``make test`` runs ``-n 2 --dist loadfile --no-loadscope-reorder``: xdist
# hands out whole files in collection order, so starting the long ones first keeps
# one worker from running a long file alone at the end (xdist's own order, by
# number of tests, put the two-test Airflow file last).
LONG_FILES = ["test_spark_jobs.py", "test_airflow.py", "test_spark_standalone.py",
              "test_spark_cluster.py", "test_readme.py", "test_bounded_memory.py",
              "test_spark.py", "test_engines.py", "test_multiclass.py", "test_scale_spark.py",
              "test_methods.py", "test_hardening_badinput.py", "test_dask_jobs.py",
              "test_hardening_kill.py", "test_loopback.py", "test_segments.py", "test_vectors.py",
              "test_spark_executor_memory.py", "test_spark_hot_scores.py"]

SUBPROCESS_FILES = {"test_cli.py", "test_history_cli.py", "test_readme.py", "test_structure.py",
                    "test_docs_and_conf.py", "test_packaging.py"}

# Oracle sweeps: `make test` runs every case; the development loop keeps the cases that
# still reach every method and code path (the rest are marked slow).
SWEEP_CASES_IN_TEST_FAST = {
    "test_cross_fitting_matches_sklearn": lambda p: p["cv"] == 3 and p["ensemble"],
    "test_frozen_matches_sklearn": lambda p: not p["strings"] and p["name"] != "digits",
    "test_exact_against_brute_force": lambda p: p["seed"] < 2,
    "test_pure_runs_are_never_needed_brute_force": lambda p: p["seed"] < 2,
    "test_greedy_against_plain_greedy": lambda p: p["seed"] < 2,
    "test_isotonic_segments_equal_sklearn_per_group": lambda p: p["n_segments"] < 2000,
    "test_evaluate_by_segments_equal_sklearn_per_group": lambda p: p["n_segments"] < 2000,
    # spilled ranges: the 3-decimal case (all cases of one range)
    "test_sampled_roc_is_exact_points_hull_and_ends": lambda p: not p["opts"] or p["decimals"] == 3,
    "test_sampled_roc_with_float_weights_ends_exactly_at_one": lambda p: p["seed"] == 0,
    # PostgreSQL plans a CASE of 3,000 branches in seconds; DuckDB's cases stay
    "test_sql_many_blocks": lambda p: p["engine"] != "postgres",
}


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
        keep = SWEEP_CASES_IN_TEST_FAST.get(getattr(item, "originalname", ""))
        if keep is not None and not keep(item.callspec.params):
            item.add_marker(pytest.mark.slow)
        # A new Python process costs seconds of imports: the command line, jobs, README
        # blocks and the structure checks stay out of the development loop.
        if name in SUBPROCESS_FILES or any(w in item.name for w in ("cli", "command_line")):
            item.add_marker(pytest.mark.subprocess)


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


# Several score ranges on every engine: the distributed passes are what is tested.
# Spark's three (a first, a middle and a last range) cost a fifth less per job than five.
ENGINE_RANGES = {"local": {"memory_rows": 300, "batch_rows": 250}, "spark": {"n_ranges": 3},
                 "dask": {"n_ranges": 5}}


class Engine:
    """One engine's view of the same rows, for tests written once for every engine.

    ``engine(df)`` is the input of a fit, evaluation or summary: a Spark or a
    Dask frame of ``df`` (three partitions), or locally a Parquet file of
    small row groups (the local engine streams it). ``engine.opts`` makes
    every engine cut the rows into several score ranges. ``engine.frame``
    is the input of a transform (locally the pandas frame itself) and
    ``engine.collect`` its output as pandas. ``engine.work(fn)`` runs ``fn``
    and counts what it started: Spark jobs, Dask tasks (0 locally).
    """

    def __init__(self, name, tmp_path, request):
        self.name, self.tmp, self.opts, self._files = name, tmp_path, ENGINE_RANGES[name], 0
        if name == "spark":
            self.spark = request.getfixturevalue("spark")
        if name == "dask":
            request.getfixturevalue("client")

    def __repr__(self):
        return self.name

    def opts_for(self, pairs):
        """``opts`` for an input of about ``pairs`` (key, score) pairs (rows x keys per
        row): locally a budget of half of them, so that the store spills and reads back
        about eight ranges (``memory_rows=300`` would make hundreds of a large input, a
        few milliseconds of files each per pass)."""
        if self.name != "local":
            return self.opts
        return {**self.opts, "memory_rows": max(self.opts["memory_rows"], pairs // 2)}

    def frame(self, df, npartitions=None, skewed=False, schema=None):
        """``npartitions``: Dask's (default 3); Spark repartitions (round robin) when given.
        ``skewed``: Dask partitions of 5, 0, n/2 - 5 and n/2 rows. ``schema``: Spark's.
        Columns of vectors (numpy arrays or lists) become Spark arrays and Dask
        ``list<double>`` columns (Dask would make strings of Python objects)."""
        vectors = [c for c in df.columns if df[c].dtype == object
                   and isinstance(df[c].dropna().iloc[0] if df[c].notna().any() else None,
                                  (list, np.ndarray))]
        if self.name == "spark":
            df = df.assign(**{c: [None if v is None else [float(x) for x in v]
                                  for v in df[c]] for c in vectors})
            sdf = self.spark.createDataFrame(df, schema)
            return sdf if npartitions is None else sdf.repartition(npartitions)
        if self.name == "dask":
            import dask.dataframe as dd
            import pyarrow as pa
            from dask import delayed

            df = df.assign(**{c: pd.Series([None if v is None else list(map(float, v))
                                            for v in df[c]], index=df.index,
                                           dtype=pd.ArrowDtype(pa.list_(pa.float64())))
                              for c in vectors})
            if not skewed:
                return dd.from_pandas(df, npartitions=npartitions or 3, sort=False)
            cuts = [0, 5, 5, len(df) // 2, len(df)]
            return dd.from_delayed([delayed(lambda d: d)(df.iloc[a:b])
                                    for a, b in zip(cuts[:-1], cuts[1:])], meta=df.iloc[:0])
        return df

    def __call__(self, df, npartitions=None, skewed=False, schema=None):
        if self.name != "local":
            return self.frame(df, npartitions, skewed, schema)
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._files += 1
        path = self.tmp / f"in{self._files}.parquet"
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=250)
        return str(path)

    def read_parquet(self, path):
        """A Parquet file or directory as this engine's input."""
        if self.name == "spark":
            return self.spark.read.parquet(str(path))
        if self.name == "dask":
            import dask.dataframe as dd

            return dd.read_parquet(str(path))
        return str(path)

    def collect(self, out):
        if self.name == "spark":
            return out.toPandas()
        if self.name == "dask":
            return out.compute()
        return out

    def work(self, fn):
        """(fn(), the Spark jobs or Dask tasks it ran; 0 locally)."""
        import uuid

        if self.name == "spark":
            sc = self.spark.sparkContext
            group = f"work-{uuid.uuid4().hex}"
            sc.setJobGroup(group, group)
            try:
                result = fn()
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
            return result, len(sc.statusTracker().getJobIdsForGroup(group))
        if self.name == "dask":
            from distributed import get_task_stream

            with get_task_stream() as ts:
                result = fn()
            return result, len(ts.data)
        return fn(), 0


@pytest.fixture(params=["local", "dask", "spark"])
def engine(request, tmp_path):
    """Every behaviour on every engine (:class:`Engine`)."""
    return Engine(request.param, tmp_path, request)
