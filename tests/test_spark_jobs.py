"""jobs/spark_calibrate.py run by the real spark-submit, on Parquet files and tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_scores

import distcal

ROOT = Path(__file__).resolve().parents[1]
SUBMIT = Path(sys.executable).parent / "spark-submit"


def _env() -> dict:
    """spark-submit as a user of this virtual environment runs it (venv activated)."""
    import os

    import pyspark

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SPARK_HOME": os.path.dirname(pyspark.__file__)}
    # The workers' Python comes from --conf spark.pyspark.python, as the README says.
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    return env


def conf(tmp: Path) -> list[str]:
    """A Hive catalog in a temporary warehouse with an embedded Derby metastore."""
    return ["--master", "local[2]", "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
            "--conf", "spark.sql.catalogImplementation=hive",
            "--conf", f"spark.sql.warehouse.dir={tmp / 'warehouse'}",
            "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={tmp / 'derby'}",
            "--conf", "spark.hadoop.javax.jdo.option.ConnectionURL="
                      f"jdbc:derby:;databaseName={tmp / 'metastore_db'};create=true"]


def submit(tmp: Path, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(SUBMIT), *conf(tmp), str(ROOT / "jobs" / "spark_calibrate.py"),
                           *map(str, args)], capture_output=True, text=True, timeout=600,
                          cwd=tmp, env=_env())


def reason(r: subprocess.CompletedProcess) -> str:
    """The job's one-line reason, on spark-submit's stderr among Spark's own log lines.

    (spark-submit merges the Python driver's stderr into its stdout; the job
    writes its failure line to spark-submit's own stderr instead.)
    """
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("spark_calibrate:")]
    assert len(lines) == 1, r.stdout[-2000:] + r.stderr[-3000:]
    assert "spark_calibrate:" not in r.stdout, r.stdout[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sparkjob")
    df = make_scores(50_000, seed=21, weights=True)
    df["id"] = np.arange(len(df))
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp / "scores.parquet")
    return tmp, df


def test_parquet_fit_apply_evaluate(work):
    # A weighted Venn-Abers model (test_spark_standalone fits one on a cluster, the Airflow
    # DAG an isotonic one from summaries, test_tables beta from a table): the
    # interval written by apply, its widths reported by evaluate.
    tmp, df = work
    r = submit(tmp, "fit", "--input", tmp / "scores.parquet", "--output", tmp / "model",
               "--weight-col", "w", "--method", "venn_abers")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["n_rows"] == int((df.w > 0).sum())
    model = distcal.load(tmp / "model")
    assert model == distcal.fit(df, weight_col="w", method="venn_abers")

    # The output replaces a previous Parquet output (--overwrite), as a daily run does.
    df.head(10).assign(p2=0.5).to_parquet(tmp / "calibrated.parquet", index=False)
    r = submit(tmp, "apply", "--model", tmp / "model", "--input", tmp / "scores.parquet",
               "--output", tmp / "calibrated.parquet", "--interval-cols", "p0,p1",
               "--overwrite")
    assert r.returncode == 0, r.stderr[-3000:]
    assert not [p for p in tmp.iterdir() if p.name.startswith(".calibrated")]
    out = pq.read_table(tmp / "calibrated.parquet").to_pandas().sort_values("id")
    assert list(out.columns) == ["score", "label", "w", "id", "calibrated", "p0", "p1"]
    np.testing.assert_allclose(out["calibrated"].to_numpy(), model.predict(out["score"]),
                               rtol=1e-12)
    p0, p1 = model.predict_interval(out["score"])
    np.testing.assert_array_equal(out["p0"].to_numpy(), p0)
    np.testing.assert_array_equal(out["p1"].to_numpy(), p1)

    r = submit(tmp, "evaluate", "--input", tmp / "calibrated.parquet", "--output",
               tmp / "report", "--prob-col", "calibrated", "--weight-col", "w",
               "--interval-cols", "p0,p1")
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((tmp / "report" / "report.json").read_text())
    local = distcal.evaluate(out, prob_col="calibrated", weight_col="w",
                             interval_cols=("p0", "p1"))
    assert rep["brier"] == pytest.approx(local.brier, rel=1e-9)
    for key in ("mean", "median", "p90", "max"):
        assert rep["interval_widths"][key] == pytest.approx(local.interval_widths[key],
                                                            rel=1e-9)
    assert (tmp / "report" / "reliability.png").stat().st_size > 1000
    assert (tmp / "report" / "interval_widths.png").stat().st_size > 1000

    # The threshold job, and an output refused without --overwrite and kept as it
    # was, are run by test_airflow (the Spark DAG's threshold task) and test_tables.


def test_bad_input_fails_with_one_line_and_writes_nothing(work):
    tmp, _ = work
    bad = tmp / "bad.parquet"
    pq.write_table(pa.table({"score": [0.1, None, 0.4], "label": [0, 1, 2]}), bad)
    r = submit(tmp, "fit", "--input", bad, "--output", tmp / "bad_model")
    assert r.returncode == 2
    assert reason(r).startswith("spark_calibrate: error: column 'score'")
    assert not (tmp / "bad_model").exists()


def test_tables(work):
    """Tables of the session's catalog (Hive, Derby metastore): apply creates one from
    Parquet, fit reads it, apply replaces it (--overwrite) and refuses to without."""
    tmp, df = work
    distcal.fit(df, weight_col="w").save(tmp / "model0")
    r = submit(tmp, "apply", "--model", tmp / "model0", "--input", tmp / "scores.parquet",
               "--output-table", "scores")
    assert r.returncode == 0, r.stderr[-3000:]
    r = submit(tmp, "fit", "--input-table", "scores", "--output", tmp / "tmodel",
               "--weight-col", "w", "--method", "beta")
    assert r.returncode == 0, r.stderr[-3000:]
    model = distcal.load(tmp / "tmodel")
    assert model == distcal.fit(df, weight_col="w", method="beta")
    r = submit(tmp, "apply", "--model", tmp / "tmodel", "--input", tmp / "scores.parquet",
               "--output-table", "scores", "--overwrite")
    assert r.returncode == 0, r.stderr[-3000:]
    r = submit(tmp, "apply", "--model", tmp / "model0", "--input", tmp / "scores.parquet",
               "--output-table", "scores")
    assert r.returncode == 2 and "exists" in reason(r)
    # The managed table's files, read with pyarrow (a Spark session more would only
    # add a JVM start): the replacement's rows, no table or directory left aside.
    warehouse = tmp / "warehouse"
    assert sorted(p.name for p in warehouse.iterdir()) == ["scores"]
    t = pq.read_table(warehouse / "scores").to_pandas().sort_values("id")
    assert list(t.columns) == ["score", "label", "w", "id", "calibrated"] and len(t) == len(df)
    np.testing.assert_allclose(t["calibrated"].to_numpy(), model.predict(t["score"].to_numpy()),
                               rtol=1e-12)
