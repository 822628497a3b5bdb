"""The example DAGs of jobs/airflow/, run by Airflow itself on small Parquet data.

Airflow lives in its own virtual environment (``make airflow-venv``:
.venv/airflow); this test, run by the project's pytest, drives it through
that venv's Python in subprocesses: ``airflow db migrate`` on a SQLite
database in a temporary AIRFLOW_HOME, then ``dag.test()`` for each logical
date in turn (one Airflow process per DAG), which runs every task of the DAG
run for real: spark-submit
with master local[2] (connection spark_default) for distcal_daily_spark,
``python jobs/dask_calibrate.py --scheduler`` on a local Dask cluster for
distcal_daily_dask. The DAGs are configured as a user would: Airflow
Variables (environment AIRFLOW_VAR_*), a connection (AIRFLOW_CONN_*),
spark-submit on PATH; Spark's Python comes from the DAG's
spark.pyspark.python, never from PYSPARK_PYTHON.

Four runs of the Dask DAG over three logical dates: the first day publishes
its candidate (no current model), re-running it changes nothing (the
candidate equals the current model: published again), a day whose training
data has inverted labels keeps the current model while the monitor alerts on
the previous day's holdout, and the next day's candidate, better on the
holdout, is vetoed by the monitor. The Spark DAG shares that logic
(jobs/airflow/distcal_loop.py) and each of its tasks is a spark-submit that
starts a JVM, so it runs once, on the day that runs every Spark task and
alerts: the inverted day, with the first day's model published as that DAG
would have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import distcal

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW_PY = ROOT / ".venv" / "airflow" / "bin" / "python"
DAGS = ROOT / "jobs" / "airflow"

DAY0, DAY1, DAY2, DAY3 = "2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"
N = 2000
MIGRATE_TIMEOUT = 300
RUN_TIMEOUT = 900  # one DAG run: six spark-submits on two shared cores

# Runs one DAG for logical dates one after the other in the Airflow venv (one process:
# Airflow's imports and its in-process task API start once); after each run, prints one
# RESULT line and copies the data directory to <data>.after<i> (what that run left).
DRIVER = r"""
import json, shutil, sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow.dag_processing.dagbag import BundleDagBag
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

folder, dag_id, data, *days = sys.argv[1:]
bag = BundleDagBag(dag_folder=folder, bundle_path=Path(folder))
if bag.import_errors:
    raise SystemExit(f"import errors: {bag.import_errors}")
dag = bag.get_dag(dag_id)
assert all(t.retries == 2 for t in dag.tasks), "the example DAGs retry each task twice"
for t in dag.tasks:  # retry sooner than the DAG's 5 minutes here
    t.retry_delay = timedelta(seconds=1)

def name(state):
    return str(getattr(state, "value", state))

for i, day in enumerate(days):
    run = dag.test(logical_date=datetime.fromisoformat(day).replace(tzinfo=timezone.utc))
    with create_session() as session:
        tis = {ti.task_id: name(ti.state) for ti in run.get_task_instances(session=session)}
        xcoms = {}
        for x in session.query(XComModel).filter(XComModel.dag_id == dag_id,
                                                 XComModel.run_id == run.run_id,
                                                 XComModel.key == "return_value"):
            xcoms[x.task_id] = XComModel.deserialize_value(x)
    shutil.copytree(data, f"{data}.after{i}")
    print("RESULT " + json.dumps({"day": day, "state": name(run.state), "tasks": tis,
                                  "xcom": xcoms}, default=str), flush=True)
"""


def _airflow_or_fail() -> Path:
    if not AIRFLOW_PY.exists():
        pytest.fail(f"no Airflow virtual environment at {AIRFLOW_PY.parent.parent}: "
                    "run `make airflow-venv` first", pytrace=False)
    return AIRFLOW_PY


# -- data ----------------------------------------------------------------------------
def _scores(seed: int, inverted: bool = False) -> pd.DataFrame:
    """Scores squashed towards 0 (true probability score ** 0.5), labels drawn from it."""
    rng = np.random.default_rng(seed)
    s = np.round(rng.beta(2.0, 3.0, N), 3)
    p = np.sqrt(s)
    y = (rng.random(N) < (1.0 - p if inverted else p)).astype(np.int64)
    return pd.DataFrame({"id": np.arange(N), "score": s, "label": y})


def _write(df: pd.DataFrame, path: Path) -> None:
    path.mkdir(parents=True)
    df.to_parquet(path / "part-0.parquet", index=False)


def make_data(base: Path) -> dict[str, pd.DataFrame]:
    """Four days of scores and three holdouts; DAY1's labels are inverted (a bad training
    day, which stays in the summaries' window)."""
    data = {
        f"scores/dt={DAY0}": _scores(1),
        f"holdout/dt={DAY0}": _scores(2),
        f"scores/dt={DAY1}": _scores(3, inverted=True),
        f"holdout/dt={DAY1}": _scores(4),
        f"scores/dt={DAY2}": _scores(5),
        f"holdout/dt={DAY2}": _scores(6),
        f"scores/dt={DAY3}": _scores(7),
    }
    for rel, df in data.items():
        _write(df, base / rel)
    return data


def read_table(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path).sort_values("id").reset_index(drop=True)


def snapshot(base: Path, day: str) -> dict:
    """A run's outputs, to compare a re-run with."""
    return {
        "current": json.loads((base / "models" / "CURRENT.json").read_text()),
        "blocks": pd.read_parquet(base / "models" / "candidates" / day / "blocks.parquet"),
        "calibrated": read_table(base / "calibrated" / f"dt={day}"),
        "threshold": json.loads((base / "thresholds" / f"dt={day}.json").read_text()),
    }


# -- Airflow -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Path:
    """A temporary AIRFLOW_HOME with a migrated SQLite metadata database."""
    _airflow_or_fail()
    home = tmp_path_factory.mktemp("airflow_home")
    r = subprocess.run([str(AIRFLOW_PY), "-m", "airflow", "db", "migrate"],
                       env=airflow_env(home), capture_output=True, text=True,
                       timeout=MIGRATE_TIMEOUT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return home


def airflow_env(home: Path, **variables: str) -> dict[str, str]:
    import pyspark

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "PYSPARK_", "SPARK_")) or k == "SPARK_SUBMIT_OPTS"}
    # The cluster's Spark defaults, as Java system properties (Spark reads spark.* ones as
    # spark-defaults.conf): a SPARK_CONF_DIR goes in front of Spark's classpath, which
    # the class archive (conftest.py) must match, so each spark-submit would load every
    # class itself (a DAG task took 20 s instead of 12).
    env["SPARK_SUBMIT_OPTS"] = " ".join([
        env.get("SPARK_SUBMIT_OPTS", ""), "-Dspark.ui.enabled=false",
        "-Dspark.sql.shuffle.partitions=4",
        "-Dspark.driver.bindAddress=127.0.0.1",  # local[2]: stay on loopback
        "-Dspark.driver.host=127.0.0.1"]).strip()
    spark_bin = Path(pyspark.__file__).parent / "bin"  # spark-submit, as the provider wants
    env.update({
        "PATH": f"{spark_bin}{os.pathsep}{env.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        # Airflow Variable: the Python that has distcal (the jobs' directory is
        # left to its default, the jobs/ beside the DAG folder)
        "AIRFLOW_VAR_DISTCAL_PYTHON": sys.executable,
    })
    env.update({f"AIRFLOW_VAR_{k.upper()}": v for k, v in variables.items()})
    return env


def run_dag(home: Path, dag_id: str, base: Path, days: list[str], **variables: str
            ) -> list[dict]:
    """dag.test() for each logical date in order, in one Airflow process: each run's state,
    task states and XComs (and ``base`` as each run left it: ``<base>.after<i>``)."""
    r = subprocess.run([str(AIRFLOW_PY), "-c", DRIVER, str(DAGS), dag_id, str(base), *days],
                       env=airflow_env(home, **variables), capture_output=True, text=True,
                       timeout=RUN_TIMEOUT * len(days), cwd=home)
    log = home / f"{dag_id}-{'-'.join(days)}.log"
    log.write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    results = [json.loads(ln[len("RESULT "):]) for ln in r.stdout.splitlines()
               if ln.startswith("RESULT ")]
    assert r.returncode == 0 and [x["day"] for x in results] == days, (
        f"{dag_id} {days}: exit {r.returncode}, log {log}\n{r.stdout[-4000:]}\n"
        f"{r.stderr[-4000:]}")
    return results


@pytest.fixture(scope="module")
def dask_scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                      dashboard_address=":0") as cluster:
        yield cluster.scheduler_address


# -- the expected states -------------------------------------------------------------
ALWAYS = ["summarize_scores", "fit_window", "fit_candidate", "score_holdout_candidate",
          "summarize_holdout", "monitor_window", "monitor", "check_current", "publish",
          "current_model", "calibrate_today", "threshold", "save_threshold"]
COMPARED = ["score_holdout_current", "evaluate_holdout", "compare"]


def expect(first: bool = False, published: bool = True) -> dict[str, str]:
    states = {t: "success" for t in ALWAYS + COMPARED + ["no_current_model", "keep_current"]}
    if first:
        states.update({t: "skipped" for t in COMPARED + ["keep_current"]})
    else:
        states["no_current_model"] = "skipped"
        states["keep_current" if published else "publish"] = "skipped"
    return states


def check_outputs(base: Path, data: dict, day: str, yesterday: str, model_day: str,
                  result: dict) -> None:
    """Calibrated table and threshold are those of the current model (the candidate of
    the run of ``model_day``, or its published copy), recomputed here."""
    model_dir = Path(snapshot_current(base)["model"])
    assert model_dir.name.startswith(model_day)
    model = distcal.load(model_dir)
    assert model == distcal.load(base / "models" / "candidates" / model_day)
    today = read_table(base / "calibrated" / f"dt={day}")
    src = data[f"scores/dt={day}"]
    assert len(today) == N and list(today.columns[:3]) == ["id", "score", "label"]
    np.testing.assert_allclose(today["calibrated"], model.predict(src["score"].to_numpy()),
                               rtol=0, atol=1e-9)

    holdout = data[f"holdout/dt={yesterday}"].assign(p=lambda d: model.predict(d["score"]))
    best = distcal.optimal_threshold(holdout, score_col="p", label_col="label",
                                     cost_fp=1.0, cost_fn=1.0)
    saved = json.loads((base / "thresholds" / f"dt={day}.json").read_text())
    assert saved["model"] == str(model_dir)
    assert saved["threshold"] == pytest.approx(best.threshold, abs=1e-9)
    assert (saved["fp"], saved["fn"]) == (best.fp, best.fn)
    assert result["xcom"]["save_threshold"] == saved
    line = result["xcom"]["threshold"]
    line = json.loads(line) if isinstance(line, str) else line
    assert line["threshold"] == saved["threshold"]


@pytest.mark.slow
@pytest.mark.parametrize("dag_id", ["distcal_daily_spark", "distcal_daily_dask"])
def test_daily_loop(dag_id, airflow_home, dask_scheduler, tmp_path):
    base = tmp_path / "data"
    data = make_data(base)
    variables = {"distcal_base_dir": str(base)}
    if dag_id.endswith("dask"):
        variables["distcal_dask_scheduler"] = dask_scheduler

    if dag_id.endswith("spark"):
        # Day 1 as the first run publishes it (the Dask variant runs that day).
        seed_first_day(base, data)
        before = snapshot_current(base)
        (second,) = run_dag(airflow_home, dag_id, base, [DAY2], **variables)
    else:
        # Day 1, the same day again, day 2, day 3: one Airflow process, runs in order.
        first, again, second, third = run_dag(airflow_home, dag_id, base,
                                              [DAY1, DAY1, DAY2, DAY3], **variables)
        before = first_day_and_rerun(base, data, first, again)

    # Day 2 trains on inverted labels: its candidate is worse on the holdout, the
    # current model (day 1's) stays and calibrates day 2. This run has every task
    # of the DAG run (both holdout scorings, the evaluation, the comparison).
    assert second["state"] == "success", second
    assert second["tasks"] == expect(published=False)
    metrics = second["xcom"]["evaluate_holdout"]
    metrics = (json.loads(metrics) if isinstance(metrics, str) else metrics)["metrics"]
    assert metrics["p_candidate"]["log_loss"] > metrics["p_current"]["log_loss"]
    after_second = Path(f"{base}.after{0 if dag_id.endswith('spark') else 2}")
    assert snapshot_current(after_second) == before
    assert (base / "models" / "candidates" / DAY2 / "model.json").exists()
    check_outputs(base, data, DAY2, DAY1, DAY1, second)
    assert json.loads((base / "thresholds" / f"dt={DAY2}.json").read_text())["prob_col"] \
        == "p_current"
    # The history loop: the candidate is the exact fit of the window's summaries (the
    # scores of DAY0 and DAY1), and the monitor alerts on its holdout (DAY1's period).
    window = pd.concat([data[f"scores/dt={d}"] for d in (DAY0, DAY1)], ignore_index=True)
    assert distcal.load(base / "models" / "candidates" / DAY2) == distcal.fit(window)
    assert job_line(second, "monitor")["alerts"] == [DAY1]
    if dag_id.endswith("dask"):
        third_day_monitor_vetoes(base, data, third, before)


PUBLISH = """
import json, sys
sys.path.insert(0, sys.argv[1])
import distcal_loop as loop  # (its tasks' functions, called without a DAG run)
base, candidate, ds = sys.argv[2:5]
print(json.dumps(loop.publish.function(base, candidate, json.dumps({"n_rows": 1}), ds=ds)))
"""


@pytest.mark.subprocess
def test_a_refit_never_touches_the_published_model(tmp_path):
    """Publishing copies the candidate (named by its checksum) and points CURRENT.json at
    the copy: a re-run's fit, which replaces candidates/<ds>, leaves the current model as
    it was (it replaced the model in production, then compared it with itself); the
    refit, published, is another copy; the same model published again writes nothing."""
    _airflow_or_fail()
    candidate = tmp_path / "models" / "candidates" / DAY1
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"score": rng.random(500)})
    df["label"] = (rng.random(500) < df.score).astype(int)
    first, refit = distcal.fit(df), distcal.fit(df.assign(label=1 - df.label))

    def publish() -> dict:
        r = subprocess.run([str(AIRFLOW_PY), "-c", PUBLISH, str(DAGS), str(tmp_path),
                            str(candidate), DAY1], env=airflow_env(tmp_path / "home"),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        record = json.loads(r.stdout.strip().splitlines()[-1])
        assert snapshot_current(tmp_path) == record
        return record

    first.save(candidate)
    one = publish()
    assert Path(one["model"]).parent == tmp_path / "models" / "published"
    refit.save(candidate, overwrite=True)  # the re-run's fit_candidate
    assert distcal.load(one["model"]) == first  # production untouched
    two = publish()
    assert two["model"] != one["model"] and distcal.load(two["model"]) == refit
    assert distcal.load(one["model"]) == first
    assert publish() == two  # the same model again: the same copy
    assert len(list((tmp_path / "models" / "published").iterdir())) == 2


CHECK_CURRENT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import distcal_loop as loop
base, monitor, ds = sys.argv[2:5]
try:
    print(json.dumps({"branch": loop.check_current.function(base, monitor, ds=ds)}))
except ValueError as e:
    print(json.dumps({"error": str(e)}))
"""


@pytest.mark.subprocess
def test_the_first_run_publishes_only_a_candidate_the_monitor_does_not_alert_on(tmp_path):
    """With no current model there is nothing to compare with: the candidate is published
    (branch no_current_model) unless the monitor alerts on its holdout (yesterday's
    period); then the task fails, and the run with it, publishing nothing."""
    _airflow_or_fail()

    def check(alerts: list) -> dict:
        monitor = json.dumps({"alerts": alerts, "periods": 2})
        r = subprocess.run([str(AIRFLOW_PY), "-c", CHECK_CURRENT, str(DAGS), str(tmp_path),
                            monitor, DAY2], env=airflow_env(tmp_path / "home"),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    assert check([]) == {"branch": "no_current_model"}
    assert check([DAY0]) == {"branch": "no_current_model"}  # an older period's alert
    assert "nothing is published" in check([DAY1])["error"]
    assert not (tmp_path / "models").exists()


def job_line(result: dict, task: str) -> dict:
    line = result["xcom"][task]
    return json.loads(line.strip().splitlines()[-1]) if isinstance(line, str) else line


def third_day_monitor_vetoes(base: Path, data: dict, third: dict, current: dict) -> None:
    """DAY3: the candidate (fit on three days' summaries, one of them inverted) beats the
    current model's log loss on the holdout, but the monitor alerts on its holdout: the
    two do not agree, so the current model stays."""
    assert third["state"] == "success", third
    assert third["tasks"] == expect(published=False)
    metrics = job_line(third, "evaluate_holdout")["metrics"]
    assert metrics["p_candidate"]["log_loss"] < metrics["p_current"]["log_loss"]
    monitor = job_line(third, "monitor")
    assert monitor["periods"] == 3 and DAY2 in monitor["alerts"]
    assert third["xcom"]["fit_window"] == [
        str(base / "summaries" / "scores" / f"dt={d}") for d in (DAY0, DAY1, DAY2)]
    window = pd.concat([data[f"scores/dt={d}"] for d in (DAY0, DAY1, DAY2)],
                       ignore_index=True)
    assert distcal.load(base / "models" / "candidates" / DAY3) == distcal.fit(window)
    assert json.loads((base / "models" / "CURRENT.json").read_text()) == current
    assert (base / "runs" / DAY3 / "monitor" / "report.html").exists()
    check_outputs(base, data, DAY3, DAY2, DAY1, third)


def snapshot_current(base: Path) -> dict:
    return json.loads((base / "models" / "CURRENT.json").read_text())


def seed_first_day(base: Path, data: dict) -> None:
    """Day 1's candidate (fit on day 0's scores) published as CURRENT.json."""
    model_dir = base / "models" / "candidates" / DAY1
    model = distcal.fit(data[f"scores/dt={DAY0}"], score_col="score", label_col="label")
    model.save(model_dir)
    (base / "models" / "CURRENT.json").write_text(json.dumps(
        {"model": str(model_dir), "ds": DAY1, "method": "isotonic", "n_rows": N}))
    # ... and the summaries that run wrote: DAY0's scores, DAY0's holdout scored by it
    distcal.summarize(data[f"scores/dt={DAY0}"], period=DAY0).save(
        base / "summaries" / "scores" / f"dt={DAY0}")
    holdout = data[f"holdout/dt={DAY0}"].assign(p_candidate=lambda d: model.predict(d["score"]))
    distcal.summarize(holdout, score_col="p_candidate", period=DAY0).save(
        base / "summaries" / "holdout" / f"dt={DAY0}")


def first_day_and_rerun(base: Path, data: dict, first: dict, again: dict) -> dict:
    """Day 1 twice: published without comparison, then the re-run changes nothing."""
    assert first["state"] == "success", first
    assert first["tasks"] == expect(first=True)
    after_first, after_again = Path(f"{base}.after0"), Path(f"{base}.after1")
    current = snapshot_current(after_first)
    # Published as a copy of the candidate, named by its checksum (never modified).
    published = Path(current["model"])
    assert published.parent == base / "models" / "published"
    assert published.name.startswith(f"{DAY1}-")
    assert current["candidate"] == str(base / "models" / "candidates" / DAY1)
    assert distcal.load(published) == distcal.load(base / "models" / "candidates" / DAY1)
    assert current["ds"] == DAY1 and current["n_rows"] == N
    assert (after_first / "models" / "candidates" / DAY1 / "model.json").exists()
    check_outputs(base, data, DAY1, DAY0, DAY1, first)  # (the re-run left the same, below)
    before = snapshot(after_first, DAY1)

    # The same logical date again: succeeds, compares the candidate with itself
    # (equal, so "not worse": publish) and leaves the same outputs.
    assert again["state"] == "success", again
    assert again["tasks"] == expect(published=True)
    metrics = again["xcom"]["evaluate_holdout"]
    metrics = (json.loads(metrics) if isinstance(metrics, str) else metrics)["metrics"]
    assert metrics["p_candidate"] == metrics["p_current"]
    after = snapshot(after_again, DAY1)
    assert after["current"] == before["current"]
    pd.testing.assert_frame_equal(after["blocks"], before["blocks"])
    pd.testing.assert_frame_equal(after["calibrated"], before["calibrated"])
    assert after["threshold"] == before["threshold"]
    assert (after_again / "runs" / DAY1 / "holdout_report" / "report.json").exists()
    return before["current"]
