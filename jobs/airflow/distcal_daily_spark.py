"""distcal_daily_spark: the daily calibration loop, each step a spark-submit of
jobs/spark_calibrate.py (SparkSubmitOperator, provider apache-airflow-providers-apache-spark).

    summarize_scores >> fit_window >> fit_candidate >> score_holdout_candidate
        >> summarize_holdout >> monitor_window >> monitor >> check_current
        check_current -> score_holdout_current >> evaluate_holdout >> compare
                             compare -> publish | keep_current
        check_current -> no_current_model >> publish       (the first run; it fails
                                                            if the monitor alerts)
    publish | keep_current >> current_model >> calibrate_today
                                           >> threshold >> save_threshold

Configuration (see README.md beside this file):
  Connection spark_default   the Spark master: {"conn_type": "spark", "host": "local[2]"},
                             "yarn", "spark://host:7077", ...; spark-submit must be on PATH
  Variable distcal_base_dir  the data directory (a local path or any Hadoop URI)
  Variable distcal_python    the Python that has distcal, for Spark's driver and executors
                             (spark.pyspark.python below)
  Variable distcal_jobs_dir  the directory of spark_calibrate.py (default: this repo's jobs/)
  DAG params                 method, metric, score/label columns, costs: per run
"""

from __future__ import annotations

import distcal_loop as loop
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

JOB = loop.JOBS_DIR + "/spark_calibrate.py"

SPARK_CONF = {
    # The Python of Spark's driver and executors: it must have distcal installed.
    "spark.pyspark.python": loop.PYTHON,
    "spark.ui.showConsoleProgress": "false",
}

COLUMNS = ["--score-col", "{{ params.score_col }}", "--label-col", "{{ params.label_col }}"]


def spark_job(task_id: str, *args: str) -> loop.DistcalSparkSubmitOperator:
    """spark-submit jobs/spark_calibrate.py ARGS; its JSON result line goes to XCom."""
    return loop.DistcalSparkSubmitOperator(
        task_id=task_id,
        application=JOB,
        application_args=list(args),
        conf=SPARK_CONF,
        conn_id="spark_default",
        name=f"distcal-{task_id}",
    )


with DAG(
    dag_id="distcal_daily_spark",
    description="Daily probability calibration with distcal on Spark",
    **loop.dag_settings(),
    tags=["distcal", "calibration", "spark"],
) as dag:
    summarize_scores = spark_job(
        "summarize_scores", "summarize", "--input", loop.TRAIN, "--output", loop.SUMMARY,
        "--period", loop.YESTERDAY, *COLUMNS, "--overwrite")

    fit_window = loop.window.override(task_id="fit_window")(
        loop.BASE, "scores", loop.FIT_WINDOW, "{{ params.window_days }}")

    # the window's summaries are merged on the cluster (@FILE: the job's arguments)
    fit_candidate = spark_job(
        "fit_candidate", "fit", "@" + loop.FIT_WINDOW, "--output", loop.CANDIDATE,
        "--method", "{{ params.method }}", "--overwrite")

    score_holdout_candidate = spark_job(
        "score_holdout_candidate", "apply", "--model", loop.CANDIDATE,
        "--input", loop.HOLDOUT, "--output", loop.HOLDOUT_CANDIDATE,
        "--score-col", "{{ params.score_col }}", "--output-col", loop.CANDIDATE_COL,
        "--overwrite")

    summarize_holdout = spark_job(
        "summarize_holdout", "summarize", "--input", loop.HOLDOUT_CANDIDATE,
        "--output", loop.HOLDOUT_SUMMARY, "--period", loop.YESTERDAY,
        "--score-col", loop.CANDIDATE_COL, "--label-col", "{{ params.label_col }}",
        "--overwrite")

    monitor_window = loop.window.override(task_id="monitor_window")(
        loop.BASE, "holdout", loop.MONITOR_WINDOW, "{{ params.window_days }}")

    monitor = spark_job(
        "monitor", "monitor", "@" + loop.MONITOR_WINDOW, "--output", loop.MONITOR_REPORT,
        "--alpha", "{{ params.alpha }}", "--overwrite")

    check_current = loop.check_current(loop.BASE, monitor.output)

    score_holdout_current = spark_job(
        "score_holdout_current", "apply", "--model", loop.PREVIOUS_MODEL,
        "--input", loop.HOLDOUT_CANDIDATE, "--output", loop.HOLDOUT_BOTH,
        "--score-col", "{{ params.score_col }}", "--output-col", loop.CURRENT_COL,
        "--overwrite")

    evaluate_holdout = spark_job(
        "evaluate_holdout", "evaluate", "--input", loop.HOLDOUT_BOTH,
        "--prob-col", loop.CANDIDATE_COL, "--prob-col", loop.CURRENT_COL,
        "--label-col", "{{ params.label_col }}", "--output", loop.REPORT, "--overwrite")

    compare = loop.compare(evaluate_holdout.output, "{{ params.metric }}", monitor.output)
    no_current_model = EmptyOperator(task_id="no_current_model")
    keep_current = EmptyOperator(task_id="keep_current")
    publish = loop.publish(loop.BASE, loop.CANDIDATE, fit_candidate.output)
    current_model = loop.current_model(loop.BASE, loop.CANDIDATE, loop.HOLDOUT_CANDIDATE,
                                       loop.HOLDOUT_BOTH)

    calibrate_today = spark_job(
        "calibrate_today", "apply", "--model", loop.CURRENT_MODEL,
        "--input", loop.TODAY, "--output", loop.CALIBRATED,
        "--score-col", "{{ params.score_col }}", "--output-col", "{{ params.output_col }}",
        "--overwrite")

    threshold = spark_job(
        "threshold", "threshold", "--input", loop.CURRENT_HOLDOUT,
        "--score-col", loop.CURRENT_PROB_COL, "--label-col", "{{ params.label_col }}",
        "--cost-fp", "{{ params.cost_fp }}", "--cost-fn", "{{ params.cost_fn }}")

    save_threshold = loop.save_threshold(loop.BASE, threshold.output, current_model)

    summarize_scores >> fit_window >> fit_candidate >> score_holdout_candidate
    score_holdout_candidate >> summarize_holdout >> monitor_window >> monitor >> check_current
    check_current >> [score_holdout_current, no_current_model]
    score_holdout_current >> evaluate_holdout >> compare >> [publish, keep_current]
    no_current_model >> publish
    [publish, keep_current] >> current_model >> [calibrate_today, threshold]
