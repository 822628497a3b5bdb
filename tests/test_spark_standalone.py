"""A real Spark standalone cluster whose executors have numpy, pandas, pyarrow, scipy, no distcal.

A master and two workers run as separate processes, started by the
``spark-class`` launcher inside pyspark, on 127.0.0.1 with random ports.
The executors' Python is a virtual environment holding only numpy, pandas,
pyarrow and scipy (and their own dependencies): links to this
environment's copies, so it costs no install. Then, as a user would:

1. ``spark-submit ... jobs/spark_calibrate.py fit`` without distcal on the
   executors: exit 2 and one line naming the missing module and the fix
   (``EngineSetupError``, carrying the worker's ModuleNotFoundError);
2. the same with ``--py-files distcal.zip`` (``make zip``): fit, then
   apply, equal to the local engine to 1e-9. The fit is Venn-Abers past
   ``COMPILE_ROWS``, whose range pass numba would compile: the executors
   (no numba) run its Python loop.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_scores

import distcal
from distcal.packaging import build_zip

ROOT = Path(__file__).resolve().parents[1]
SUBMIT = Path(sys.executable).parent / "spark-submit"
# What the executors may import: the four packages and what they import themselves.
EXECUTOR_PACKAGES = ("numpy", "numpy.libs", "pandas", "pyarrow", "scipy", "scipy.libs",
                     "dateutil", "pytz", "tzdata", "six.py")


def executor_python(root: Path) -> Path:
    """A venv with only numpy, pandas, pyarrow and scipy: links into this environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(root)],
                   check=True)
    python = root / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    source = Path(np.__file__).resolve().parents[1]
    for name in EXECUTOR_PACKAGES:
        if (source / name).exists():
            (site / name).symlink_to(source / name)
    return python


def spark_env() -> dict[str, str]:
    """The environment of the cluster's processes: nothing of this test's Python path."""
    import pyspark

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    # The master's and workers' JVMs get the JVM options that conftest hands every
    # short-lived spark-submit (class archive, quick JIT): like them, they run minutes.
    env["SPARK_DAEMON_JAVA_OPTS"] = os.environ.get("SPARK_SUBMIT_OPTS", "")
    return env


def wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace")) if log.exists() else None
        if found:
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not in {log}:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """spark://127.0.0.1:PORT of a master and two 1-core workers; stopped after the module."""
    import pyspark

    tmp = tmp_path_factory.mktemp("standalone")
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = spark_env()
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = tmp / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT,
                                 env=env, cwd=tmp, start_new_session=True)
        procs.append(p)
        return p, log

    try:
        master, log = start("master", "org.apache.spark.deploy.master.Master",
                            "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        port = wait_for(log, r"Starting Spark master at spark://127\.0\.0\.1:(\d+)", master)
        url = f"spark://127.0.0.1:{port}"
        workers = [start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host",
                         "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "1",
                         "--memory", "700m", "--work-dir", str(tmp / f"work{i}"), url)
                   for i in range(2)]
        for w, wlog in workers:
            wait_for(wlog, r"(Successfully registered with master)", w)
        yield url, tmp
    finally:
        for p in reversed(procs):  # whole process groups: spark-class execs java
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def submit(url: str, tmp: Path, python: Path, py_files: list[Path], *args: object
           ) -> subprocess.CompletedProcess:
    """spark-submit the job: spark-submit's own options first ("--conf" pairs), then the job's."""
    extra: list[str] = []
    while args and args[0] == "--conf":
        extra += ["--conf", str(args[1])]
        args = args[2:]
    # The driver runs this environment's Python with this checkout of distcal
    # (PYTHONPATH reaches the driver only: executors get the cluster's env).
    env = {**spark_env(), "PYTHONPATH": str(ROOT)}
    cmd = [str(SUBMIT), "--master", url, "--conf", f"spark.pyspark.python={python}",
           "--conf", f"spark.pyspark.driver.python={sys.executable}",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=600m",
           "--conf", "spark.sql.shuffle.partitions=4", "--conf", "spark.task.maxFailures=1",
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           # the executors' JVMs too (see spark_env); it changes nothing they compute
           "--conf", f"spark.executor.extraJavaOptions={os.environ.get('SPARK_SUBMIT_OPTS', '')}",
           *extra, *(["--py-files", ",".join(map(str, py_files))] if py_files else []),
           str(ROOT / "jobs" / "spark_calibrate.py"), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp, env=env)


def test_standalone_cluster_without_and_with_the_zip(cluster):
    url, tmp = cluster
    python = executor_python(tmp / "executor-venv")
    check = subprocess.run([str(python), "-c", "import distcal"], capture_output=True,
                           text=True, cwd=tmp, env=spark_env())
    assert "No module named 'distcal'" in check.stderr  # the executors really lack it
    from distcal.core.venn_abers import COMPILE_ROWS

    df = make_scores(COMPILE_ROWS + 5_000, seed=21, weights=True)
    src = tmp / "scores.parquet"
    df.to_parquet(src)

    # 1. no distcal on the executors: one line that says what and how
    r = submit(url, tmp, python, [], "--conf", "spark.cores.max=1",  # one executor will do
               "fit", "--input", src, "--output", tmp / "m0", "--weight-col", "w")
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    # on spark-submit's own stderr, amid Spark's log (not merged into its stdout)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("spark_calibrate:")]
    assert len(lines) == 1 and "spark_calibrate:" not in r.stdout, r.stdout[-3000:]
    line = lines[0]
    assert line.startswith("spark_calibrate: error: the Spark executors' Python cannot "
                           "import 'distcal' (ModuleNotFoundError: No module named 'distcal')")
    assert "--py-files" in line and "dist/distcal.zip" in line
    assert not (tmp / "m0").exists()

    # 2. distcal shipped as a zip: fit and apply equal the local engine; a Venn-Abers
    # fit large enough for the compiled range pass, which executors without numba run
    # as its Python loop
    zipped = build_zip(tmp / "dist" / "distcal.zip")
    r = submit(url, tmp, python, [zipped], "fit", "--input", src, "--output", tmp / "m",
               "--weight-col", "w", "--method", "venn_abers")
    assert r.returncode == 0, r.stderr[-3000:]
    local = distcal.fit(df, weight_col="w", method="venn_abers")
    assert json.loads(r.stdout.strip().splitlines()[-1])["n_rows"] == local.n_rows
    assert distcal.load(tmp / "m") == local
    r = submit(url, tmp, python, [zipped], "apply", "--model", tmp / "m", "--input", src,
               "--output", tmp / "out")
    assert r.returncode == 0, r.stderr[-3000:]
    out = pd.read_parquet(tmp / "out").sort_values(["score", "w"])
    expected = local.transform(df).sort_values(["score", "w"])
    np.testing.assert_allclose(out.calibrated.to_numpy(), expected.calibrated.to_numpy(),
                               rtol=1e-9, atol=1e-12)
