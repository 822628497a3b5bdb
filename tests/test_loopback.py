"""What distcal's own sessions listen on: loopback only, no web UI, no dashboard.

``distcal fit --engine spark`` (an embedded Spark session) and the Dask job
(a LocalCluster started for the run) are run as users run them, and every
listening socket of their process trees is collected while they run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import make_scores

import distcal

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
pytestmark = [pytest.mark.spark, pytest.mark.dask]


def listening_while_running(cmd: list[str], cwd: Path) -> tuple[int, str, set[tuple[str, int]]]:
    """Run ``cmd``: exit code, stderr, every (address, port) its processes listened on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    with open(cwd / "out.txt", "wb") as out, open(cwd / "err.txt", "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        seen: set[tuple[str, int]] = set()
        try:
            root = psutil.Process(proc.pid)
            while proc.poll() is None:
                try:
                    tree = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    break
                for p in tree:
                    try:
                        seen |= {(c.laddr.ip, c.laddr.port) for c in p.net_connections("inet")
                                 if c.status == psutil.CONN_LISTEN}
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
    return proc.returncode, (cwd / "err.txt").read_text(), seen


@pytest.mark.parametrize("runner", ["spark", "dask"])
def test_listens_on_loopback_only(runner, tmp_path):
    df = make_scores(50_000, seed=3, ties=False, weights=True)
    df.to_parquet(tmp_path / "s.parquet")
    cmd = ([sys.executable, "-m", "distcal", "fit", "--engine", "spark"] if runner == "spark"
           else [sys.executable, str(ROOT / "jobs" / "dask_calibrate.py"), "fit"])
    code, err, seen = listening_while_running(
        [*cmd, "--input", "s.parquet", "--output", "m", "--weight-col", "w"], tmp_path)
    assert code == 0, err[-3000:]
    # the run works on a fresh machine (no PYSPARK_PYTHON: the embedded session's
    # workers run the command's own Python) and gives the local engine's model
    assert distcal.load(tmp_path / "m") == distcal.fit(df, weight_col="w")
    # Spark's driver RPC and block manager, or the scheduler, nannies and workers
    assert len(seen) >= 2, seen
    assert {ip for ip, _ in seen} <= LOOPBACK, seen
    ports = {port for _, port in seen}
    assert not ports & {4040, 4041, 8787}, seen  # no Spark UI, no Dask dashboard
