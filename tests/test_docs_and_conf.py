"""The conf/ files keep working."""

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


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("conf")
    df = make_scores(5000, seed=3)
    df["calibrated"] = distcal.fit(df).predict(df.score)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), d / "t.parquet")
    return d


@pytest.mark.parametrize("name,method", [
    ("fit_isotonic", "isotonic"), ("fit_sigmoid", "sigmoid"), ("fit_histogram", "histogram"),
    ("spark_job", "isotonic"),  # the same options as spark_calibrate.py takes
])
def test_fit_configs(name, method, table):
    r = subprocess.run([sys.executable, "-m", "distcal", "fit", "--config",
                        str(ROOT / "conf" / f"{name}.yaml"), "--input", str(table / "t.parquet"),
                        "--output", str(table / name)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert distcal.load(table / name).method == method


@pytest.mark.dask
def test_dask_job_config(table):
    r = subprocess.run([sys.executable, str(ROOT / "jobs" / "dask_calibrate.py"), "fit",
                        "--config", str(ROOT / "conf" / "dask_job.yaml"), "--input",
                        str(table / "t.parquet"), "--output", str(table / "dask_conf")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert distcal.load(table / "dask_conf").params["increasing"] == "auto"


def test_evaluate_and_threshold_configs(table):
    r = subprocess.run([sys.executable, "-m", "distcal", "evaluate", "--config",
                        str(ROOT / "conf" / "evaluate.yaml"), "--input", str(table / "t.parquet"),
                        "--output", str(table / "rep")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert set(json.loads((table / "rep" / "report.json").read_text())["reports"]) == {
        "score", "calibrated"}
    r = subprocess.run([sys.executable, "-m", "distcal", "threshold", "--config",
                        str(ROOT / "conf" / "threshold.yaml"), "--input",
                        str(table / "t.parquet")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert 0 < res["threshold"] <= 1 and np.isfinite(res["cost"])
