"""Pieces shared by the example DAGs ``distcal_daily_spark`` and ``distcal_daily_dask``.

The daily calibration loop, for the run of logical date ``ds``:

1. summarize yesterday's labelled scores (``summaries/scores/dt=<yesterday>``) and
   fit a candidate model on the summaries of the last ``window_days`` days (DAG
   param, default 30): the exact fit of those days' rows, without reading them,
2. score the holdout with the candidate (and, if there is one, the current model),
   summarize the candidate's holdout probabilities (``summaries/holdout/``) and
   monitor them over the window (Spiegelhalter's test with Holm's correction),
3. evaluate both probability columns on the holdout,
4. publish the candidate if it is not worse than the current model and the
   monitor does not alert on its holdout (the first run, with no current model,
   publishes it unless the monitor alerts: then the run fails, publishing nothing),
5. calibrate today's scores with the current model,
6. compute the cost-optimal threshold on the holdout, for the current model.

Data layout under the base directory (Airflow Variable ``distcal_base_dir``)::

    scores/dt=YYYY-MM-DD/        labelled scores of a day (score, label, ...)
    holdout/dt=YYYY-MM-DD/       labelled holdout of a day
    models/candidates/<ds>/      the candidate fitted by the run of <ds> (a re-run refits it)
    models/published/<ds>-<id>/  a published candidate's copy, never modified (<id>: its
                                 model.json checksum, so publishing the same model again
                                 writes nothing)
    models/CURRENT.json          which model is current: {"model": dir, "ds": ...}
    summaries/scores/dt=D/       the summary of day D's labelled scores (distcal summarize)
    summaries/holdout/dt=D/      the summary of day D's holdout scored by that day's candidate
    runs/<ds>/...                the run's scored holdout, evaluation and monitor reports
    calibrated/dt=<ds>/          today's scores with the current model's probability
    thresholds/dt=<ds>.json      the cost-optimal threshold of the run

Publishing copies the candidate to ``models/published/`` (aside, then renamed
into place) and moves ``models/CURRENT.json``, by writing a new file beside it
and renaming it over the old one: readers see the old or the new pointer,
never half of one. Published models are never modified: a re-run's fit
replaces only its own ``candidates/<ds>``, so re-running the date whose
candidate is current compares the refit with the published copy, which stays
current unless the refit wins. Every job output belongs to one logical date
and is written with ``--overwrite``, so re-running a date replaces its own
outputs with the same ones.

This module is imported by the DAG files (Airflow puts the DAG folder on
``sys.path``); it defines no DAG itself.
"""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, task

# -- configuration: Airflow Variables, read when a task is rendered -----------------
# (templates, not Variable.get() at import: the DAG file parses without a database)
BASE = "{{ var.value.get('distcal_base_dir', '/data/distcal') }}"
PYTHON = "{{ var.value.get('distcal_python', 'python3') }}"  # a Python that has distcal
# The directory of spark_calibrate.py and dask_calibrate.py: by default the
# jobs/ directory this DAG folder (jobs/airflow/) is in.
JOBS_DIR = ("{{ var.value.get('distcal_jobs_dir', '"
            + str(Path(__file__).resolve().parents[1]) + "') }}")

# -- the run's paths (Jinja templates, rendered per task) ---------------------------
YESTERDAY = "{{ macros.ds_add(ds, -1) }}"
TRAIN = BASE + "/scores/dt=" + YESTERDAY
HOLDOUT = BASE + "/holdout/dt=" + YESTERDAY
TODAY = BASE + "/scores/dt={{ ds }}"
CANDIDATE = BASE + "/models/candidates/{{ ds }}"
RUN_DIR = BASE + "/runs/{{ ds }}"
HOLDOUT_CANDIDATE = RUN_DIR + "/holdout_candidate"  # holdout + p_candidate
HOLDOUT_BOTH = RUN_DIR + "/holdout_both"  # holdout + p_candidate + p_current
REPORT = RUN_DIR + "/holdout_report"
CALIBRATED = BASE + "/calibrated/dt={{ ds }}"
# The history (docs/history.md): a summary of each day's labelled scores, and of
# each day's holdout scored with that day's candidate (what the monitor watches).
SUMMARY = BASE + "/summaries/scores/dt=" + YESTERDAY
HOLDOUT_SUMMARY = BASE + "/summaries/holdout/dt=" + YESTERDAY
FIT_WINDOW = RUN_DIR + "/fit_window.args"  # --summaries and the window's directories
MONITOR_WINDOW = RUN_DIR + "/monitor_window.args"
MONITOR_REPORT = RUN_DIR + "/monitor"

# The model current when the run started (pushed to XCom by check_current) ...
PREVIOUS_MODEL = "{{ ti.xcom_pull(task_ids='check_current', key='current_model') }}"
# ... and the one current after the decision, with its holdout table and
# probability column (pushed to XCom by the task current_model).
CURRENT_MODEL = "{{ ti.xcom_pull(task_ids='current_model')['model'] }}"
CURRENT_HOLDOUT = "{{ ti.xcom_pull(task_ids='current_model')['holdout'] }}"
CURRENT_PROB_COL = "{{ ti.xcom_pull(task_ids='current_model')['prob_col'] }}"

CANDIDATE_COL = "p_candidate"
CURRENT_COL = "p_current"

# Metrics of evaluate where lower is better; the DAG param "metric" picks one.
METRICS = ["log_loss", "brier", "ece"]


def dag_settings() -> dict[str, Any]:
    """The arguments of ``DAG(...)`` both example DAGs share: schedule, retries, and the
    params of a run (a new dict for each DAG)."""
    return dict(
        schedule="@daily",  # fires at 00:00 of ds: pick the hour today's scores land at
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # runs share models/CURRENT.json: one at a time, in order
        default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
        params={
            "method": Param("isotonic", enum=["isotonic", "sigmoid", "histogram"]),
            "metric": Param("log_loss", enum=METRICS,
                            description="holdout metric the candidate must not be worse in"),
            "score_col": Param("score", type="string"),
            "label_col": Param("label", type="string"),
            "output_col": Param("calibrated", type="string",
                                description="probability column of the calibrated table"),
            "cost_fp": Param(1.0, type="number", description="cost of a false positive"),
            "cost_fn": Param(1.0, type="number", description="cost of a false negative"),
            "window_days": Param(30, type="integer", minimum=1,
                                 description="fit on (and monitor) the summaries of this many "
                                             "last days"),
            "alpha": Param(0.01, type="number",
                           description="the monitor's family-wise error rate (Holm)"),
        },
    )


# -- the pointer to the current model -----------------------------------------------
def _fs(url: str) -> tuple[Any, str]:
    import fsspec  # comes with Airflow; local paths, s3://, gs://, ... alike

    return fsspec.core.url_to_fs(url)


def pointer_path(base: str) -> str:
    return base.rstrip("/") + "/models/CURRENT.json"


def read_json(url: str) -> Any | None:
    """The JSON document at ``url``, or None if there is none."""
    fs, path = _fs(url)
    if not fs.exists(path):
        return None
    return json.loads(fs.cat_file(path))


def write_json_atomic(url: str, doc: Any) -> None:
    """Write beside the target, then rename over it: all or nothing for readers."""
    fs, path = _fs(url)
    parent, _, name = path.rpartition("/")
    fs.makedirs(parent, exist_ok=True)
    tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
    fs.pipe_file(tmp, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
    try:
        fs.mv(tmp, path)  # a rename on local and HDFS paths; one PUT on object stores
    finally:
        if fs.exists(tmp):
            fs.rm(tmp)


def job_result(value: Any) -> dict:
    """A job's JSON line from XCom: BashOperator pushes a string, the Spark operator a dict."""
    if isinstance(value, str):
        value = json.loads(value.strip().splitlines()[-1])
    if not isinstance(value, dict):
        raise ValueError(f"expected the job's JSON line, got {value!r}")
    return value


# -- the loop's Python tasks ----------------------------------------------------------
@task.branch
def check_current(base: str, monitor: Any, ds: str | None = None, ti: Any = None) -> str:
    """Compare with the current model if there is one; the first run publishes, unless
    the monitor alerts on the candidate's holdout: then the run fails, publishing
    nothing (there is no model to calibrate today with)."""
    current = read_json(pointer_path(base))
    if current is None:
        alerts = job_result(monitor)["alerts"]
        if _yesterday(ds) in alerts:
            raise ValueError(f"no current model, and the monitor alerts on the candidate's "
                             f"holdout ({_yesterday(ds)}; alerts: {alerts}): nothing is "
                             "published; see the run's monitor report")
        print("no current model: the candidate will be published")
        return "no_current_model"
    print(f"current model: {current['model']} (published by the run of {current['ds']})")
    ti.xcom_push(key="current_model", value=current["model"])
    return "score_holdout_current"


@task.branch
def compare(evaluation: Any, metric: str, monitor: Any, ds: str | None = None) -> str:
    """Publish the candidate if its holdout metric is not worse (lower or equal) and the
    monitor agrees: the candidate's holdout (yesterday's period) does not alert."""
    metrics = job_result(evaluation)["metrics"]
    cand, cur = metrics[CANDIDATE_COL][metric], metrics[CURRENT_COL][metric]
    alerts = job_result(monitor)["alerts"]
    alert = _yesterday(ds) in alerts
    print(f"{metric}: candidate {cand:.6g}, current {cur:.6g}; monitor alerts: {alerts}")
    return "publish" if cand <= cur and not alert else "keep_current"


def _yesterday(ds: str | None) -> str:
    assert ds is not None
    return (date.fromisoformat(ds) - timedelta(days=1)).isoformat()


@task
def window(base: str, kind: str, args_file: str, days: Any, ds: str | None = None) -> list:
    """The summaries of the last ``days`` days up to yesterday that exist (the rolling
    window), written to ``args_file`` as the job's arguments (``--summaries`` and one
    directory a line: ``@args_file`` on the job's command line)."""
    end = date.fromisoformat(_yesterday(ds))
    root = f"{base.rstrip('/')}/summaries/{kind}"
    fs, _ = _fs(root)
    dirs = []
    for k in range(int(days) - 1, -1, -1):
        d = f"{root}/dt={(end - timedelta(days=k)).isoformat()}"
        if fs.exists(_fs(d)[1] + "/summary.json"):
            dirs.append(d)
    if not dirs:
        raise ValueError(f"no summary in {root} for the {days} days up to {end}")
    fs_args, path = _fs(args_file)
    fs_args.makedirs(path.rpartition("/")[0], exist_ok=True)
    fs_args.pipe_file(path, ("--summaries\n" + "".join(f"{d}\n" for d in dirs)).encode())
    print(f"{kind} window: {len(dirs)} summaries, {dirs[0]} .. {dirs[-1]}")
    return dirs


@task(trigger_rule="none_failed_min_one_success")
def publish(base: str, candidate: str, fit: Any, ds: str | None = None) -> dict:
    """Make the candidate the current model (one atomic rename of the pointer).

    ``ds``, the run's logical date, comes from the task context (Airflow fills
    in parameters named like context variables).
    """
    fit = job_result(fit)
    checksum = read_json(candidate.rstrip("/") + "/model.json")["checksum"]
    target = f"{base.rstrip('/')}/models/published/{ds}-{checksum[:16]}"
    copy_dir_once(candidate, target)
    record = {"model": target, "candidate": candidate, "ds": ds, "method": fit.get("method"),
              "n_rows": fit.get("n_rows")}
    write_json_atomic(pointer_path(base), record)
    print(f"published {candidate} as {target}")
    return record


def copy_dir_once(src: str, dst: str) -> None:
    """Copy the flat directory ``src`` to ``dst`` beside it, then rename it into place;
    an existing ``dst`` is kept (named by its model's checksum: the same model)."""
    fs, path = _fs(dst)
    if fs.exists(path):
        return
    parent, _, name = path.rpartition("/")
    tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
    fs_src, src_path = _fs(src)
    fs.makedirs(tmp, exist_ok=True)
    try:
        for f in fs_src.ls(src_path, detail=False):
            fs.pipe_file(f"{tmp}/{f.rstrip('/').rpartition('/')[2]}", fs_src.cat_file(f))
        fs.mv(tmp, path, recursive=True)
    finally:
        if fs.exists(tmp):
            fs.rm(tmp, recursive=True)


@task(trigger_rule="none_failed_min_one_success")
def current_model(base: str, candidate: str, holdout_candidate: str,
                  holdout_both: str, ti: Any = None) -> dict:
    """After the decision: the current model and the holdout scored with it."""
    current = read_json(pointer_path(base))
    published = ti.xcom_pull(task_ids="publish") if ti is not None else None
    if published and published["model"] == current["model"]:  # published by this run
        return {"model": current["model"], "holdout": holdout_candidate,
                "prob_col": CANDIDATE_COL}
    return {"model": current["model"], "holdout": holdout_both, "prob_col": CURRENT_COL}


@task
def save_threshold(base: str, threshold: Any, current: dict, ds: str | None = None) -> dict:
    """thresholds/dt=<ds>.json: the threshold on the current model's probability."""
    doc = {"ds": ds, "model": current["model"], "prob_col": current["prob_col"],
           **job_result(threshold)}
    write_json_atomic(f"{base.rstrip('/')}/thresholds/dt={ds}.json", doc)
    return doc


# -- SparkSubmitOperator that returns the job's JSON line -----------------------------
class DistcalSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` whose return value (XCom ``return_value``) is the job's line.

    spark-submit's output (the driver's stdout and Spark's log on stderr, merged)
    goes through the hook line by line into the task log; this keeps the last
    line that is a JSON object, which is the job's result line, and fails the
    task if there is none. That works in client deploy mode (local[N], YARN or
    standalone client mode), where the driver's stdout is spark-submit's. In
    cluster deploy mode the driver prints elsewhere: use the files the jobs
    write instead (evaluate's report.json, the model directory's model.json).
    """

    def execute(self, context: Any) -> dict:
        self._job_line: dict | None = None
        super().execute(context)
        if self._job_line is None:
            raise RuntimeError("the Spark job printed no JSON result line "
                               "(cluster deploy mode? see DistcalSparkSubmitOperator)")
        return self._job_line

    def _get_hook(self) -> Any:
        hook = super()._get_hook()
        process = hook._process_spark_submit_log  # logs each line, finds app/driver ids

        def capture(lines: Any) -> None:
            process(self._watch(lines))

        hook._process_spark_submit_log = capture
        return hook

    def _watch(self, lines: Any) -> Any:
        for line in lines:
            text = line.strip()
            if text.startswith("{") and text.endswith("}"):
                try:
                    doc = json.loads(text)
                except ValueError:
                    doc = None
                if isinstance(doc, dict):
                    self._job_line = doc
            yield line
