"""jobs/dask_calibrate.py against a real `dask scheduler` and two `dask worker` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import make_scores

import distcal

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """dask scheduler + 2 dask workers on 127.0.0.1, random ports; stopped afterwards."""
    tmp = tmp_path_factory.mktemp("daskcluster")
    sched_file = tmp / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file",
                               str(sched_file)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env)]
    deadline = time.time() + 60
    while not sched_file.exists() and time.time() < deadline:
        time.sleep(0.2)
    address = json.loads(sched_file.read_text())["address"]
    for _ in range(2):
        procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--nthreads",
                                       "1", "--no-dashboard", "--host", "127.0.0.1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env=env))
    from distributed import Client

    with Client(address, timeout="60s") as c:
        c.wait_for_workers(2, timeout=60)
    yield address
    for p in procs[::-1]:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def job(*args):
    return subprocess.run([sys.executable, str(ROOT / "jobs" / "dask_calibrate.py"),
                           *map(str, args)], capture_output=True, text=True, timeout=600)


def test_job_against_running_cluster(cluster, tmp_path):
    df = make_scores(40_000, seed=31, weights=True)
    df["id"] = np.arange(len(df))
    src = tmp_path / "scores"
    src.mkdir()
    for i, part in enumerate(np.array_split(df, 4)):  # a directory of files
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), src / f"p{i}.parquet")

    # A Venn-Abers model: its interval written by apply, the widths reported by evaluate
    r = job("fit", "--input", src, "--output", tmp_path / "model", "--weight-col", "w",
            "--scheduler", cluster, "--method", "venn_abers")
    assert r.returncode == 0, r.stderr[-3000:]
    model = distcal.load(tmp_path / "model")
    assert model == distcal.fit(df, weight_col="w", method="venn_abers")

    r = job("apply", "--model", tmp_path / "model", "--input", src, "--output",
            tmp_path / "out.parquet", "--scheduler", cluster, "--interval-cols", "p0,p1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["rows"] == len(df)
    out = pq.read_table(tmp_path / "out.parquet").to_pandas().sort_values("id")
    np.testing.assert_allclose(out["calibrated"].to_numpy(), model.predict(out["score"]),
                               rtol=1e-12)
    np.testing.assert_array_equal(out["p1"].to_numpy(), model.predict_interval(out["score"])[1])

    r = job("evaluate", "--input", tmp_path / "out.parquet", "--output", tmp_path / "rep",
            "--prob-col", "calibrated", "--scheduler", cluster, "--interval-cols", "p0,p1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "rep" / "report.html").exists()
    widths = json.loads((tmp_path / "rep" / "report.json").read_text())["interval_widths"]
    want = distcal.evaluate(out, prob_col="calibrated", interval_cols=("p0", "p1"))
    assert widths["p90"] == pytest.approx(want.interval_widths["p90"], rel=1e-9)

    r = job("threshold", "--input", src, "--cost-fn", "3", "--scheduler", cluster)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["threshold"] == distcal.optimal_threshold(df, cost_fn=3).threshold

    # A multiclass model of a vector column: apply writes list<double> (Dask would infer
    # text for the object columns), with its multiclass report
    rng = np.random.default_rng(33)
    probs = rng.dirichlet(np.ones(3), 3000)
    labels = np.array([rng.choice(3, p=p) for p in probs])
    pq.write_table(pa.table({"v": list(probs), "label": labels}), tmp_path / "classes.parquet")
    r = job("fit", "--input", tmp_path / "classes.parquet", "--output", tmp_path / "mc",
            "--score-col", "v", "--scheduler", cluster)
    assert r.returncode == 0, r.stderr[-3000:]
    r = job("apply", "--model", tmp_path / "mc", "--input", tmp_path / "classes.parquet",
            "--output", tmp_path / "mc.parquet", "--score-col", "v", "--report",
            tmp_path / "mc_rep", "--scheduler", cluster)
    assert r.returncode == 0, r.stderr[-3000:]
    out = pq.read_table(tmp_path / "mc.parquet")
    assert out.schema.field("calibrated").type == pa.list_(pa.float64())
    assert out.schema.field("v").type == pa.list_(pa.float64())
    np.testing.assert_allclose(np.stack(out.column("calibrated").to_pylist()),
                               distcal.load(tmp_path / "mc").predict(
                                   np.stack(out.column("v").to_pylist())), rtol=1e-12)
    assert json.loads((tmp_path / "mc_rep" / "report.json").read_text())["kind"] == "multiclass"

    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"score": [0.1, None], "label": [0, 1]}), bad)
    r = job("fit", "--input", bad, "--output", tmp_path / "bad_model", "--scheduler", cluster)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "dask_calibrate: error: column 'score': 1 row is null or NaN "
        "(pass --on-invalid drop to drop such rows)"]
    assert not (tmp_path / "bad_model").exists()
    r = job("fit", "--input", src, "--output", tmp_path / "model", "--scheduler", cluster)
    assert r.returncode == 2 and "--overwrite" in r.stderr


def test_job_with_its_own_local_cluster(tmp_path):
    df = make_scores(10_000, seed=32)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "s.parquet")
    r = job("fit", "--input", tmp_path / "s.parquet", "--output", tmp_path / "m",
            "--method", "beta")
    assert r.returncode == 0, r.stderr[-3000:]
    assert distcal.load(tmp_path / "m") == distcal.fit(df, method="beta")


def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    """notebooks/calibrate_with_dask.ipynb, stored without outputs, executed here."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "notebooks" / "calibrate_with_dask.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    monkeypatch.setenv("DISTCAL_NOTEBOOK_ROWS", "100000")  # restored after the test
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                   for o in outputs)
    assert "ThresholdResult(threshold=" in text and "max difference to scipy" in text
