"""distcal_daily_dask: the daily calibration loop, each step a run of
``python jobs/dask_calibrate.py`` on a Dask cluster (BashOperator).

Same tasks and branches as distcal_daily_spark (see distcal_loop.py):

    summarize_scores >> fit_window >> fit_candidate >> score_holdout_candidate
        >> summarize_holdout >> monitor_window >> monitor >> check_current
        check_current -> score_holdout_current >> evaluate_holdout >> compare
                             compare -> publish | keep_current
        check_current -> no_current_model >> publish       (the first run; it fails
                                                            if the monitor alerts)
    publish | keep_current >> current_model >> calibrate_today
                                           >> threshold >> save_threshold

Configuration (see README.md beside this file):
  Variable distcal_base_dir        the data directory (local path or fsspec URL: s3://...)
  Variable distcal_python          the Python that has distcal and dask (runs the job)
  Variable distcal_dask_scheduler  address of a running scheduler (tcp://host:8786);
                                   empty: each job starts a LocalCluster for its run
  Variable distcal_jobs_dir        the directory of dask_calibrate.py (default: this repo's jobs/)
  DAG params                       method, metric, score/label columns, costs: per run
"""

from __future__ import annotations

import distcal_loop as loop
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

# Environment of every job: the bash commands below refer to these as "$NAME".
JOB_ENV = {
    "DISTCAL_PYTHON": loop.PYTHON,
    "DISTCAL_JOB": loop.JOBS_DIR + "/dask_calibrate.py",
    "DASK_SCHEDULER": "{{ var.value.get('distcal_dask_scheduler', '') }}",
    "SCORE_COL": "{{ params.score_col }}",
    "LABEL_COL": "{{ params.label_col }}",
}

# The job prints its JSON result line on stdout, its log on stderr. BashOperator
# merges the two into the task log and pushes the last line to XCom: keep stdout
# apart, then print it last, so the last line is the job's. set -e: the task
# fails with the job's exit code (2 bad input, 1 other failure).
BASH = """set -eu
result=$("$DISTCAL_PYTHON" "$DISTCAL_JOB" {args} ${{DASK_SCHEDULER:+--scheduler "$DASK_SCHEDULER"}})
echo "$result"
"""


def dask_job(task_id: str, args: str, **paths: str) -> BashOperator:
    """python jobs/dask_calibrate.py ARGS; ``paths`` become environment variables."""
    return BashOperator(
        task_id=task_id,
        bash_command=BASH.format(args=args),
        env={**JOB_ENV, **paths},
        append_env=True,  # keep PATH, HOME, ...
    )

with DAG(
    dag_id="distcal_daily_dask",
    description="Daily probability calibration with distcal on Dask",
    **loop.dag_settings(),
    tags=["distcal", "calibration", "dask"],
) as dag:
    summarize_scores = dask_job(
        "summarize_scores",
        'summarize --input "$TRAIN" --output "$SUMMARY" --period "$PERIOD" '
        '--score-col "$SCORE_COL" --label-col "$LABEL_COL" --overwrite',
        TRAIN=loop.TRAIN, SUMMARY=loop.SUMMARY, PERIOD=loop.YESTERDAY)

    fit_window = loop.window.override(task_id="fit_window")(
        loop.BASE, "scores", loop.FIT_WINDOW, "{{ params.window_days }}")

    fit_candidate = dask_job(
        "fit_candidate",
        'fit @"$WINDOW" --output "$CANDIDATE" --method "$METHOD" --overwrite',
        WINDOW=loop.FIT_WINDOW, CANDIDATE=loop.CANDIDATE, METHOD="{{ params.method }}")

    score_holdout_candidate = dask_job(
        "score_holdout_candidate",
        'apply --model "$CANDIDATE" --input "$HOLDOUT" --output "$OUTPUT" '
        '--score-col "$SCORE_COL" --output-col p_candidate --overwrite',
        CANDIDATE=loop.CANDIDATE, HOLDOUT=loop.HOLDOUT, OUTPUT=loop.HOLDOUT_CANDIDATE)

    summarize_holdout = dask_job(
        "summarize_holdout",
        'summarize --input "$HOLDOUT" --output "$SUMMARY" --period "$PERIOD" '
        '--score-col p_candidate --label-col "$LABEL_COL" --overwrite',
        HOLDOUT=loop.HOLDOUT_CANDIDATE, SUMMARY=loop.HOLDOUT_SUMMARY, PERIOD=loop.YESTERDAY)

    monitor_window = loop.window.override(task_id="monitor_window")(
        loop.BASE, "holdout", loop.MONITOR_WINDOW, "{{ params.window_days }}")

    monitor = dask_job(
        "monitor",
        'monitor @"$WINDOW" --output "$REPORT" --alpha "$ALPHA" --overwrite',
        WINDOW=loop.MONITOR_WINDOW, REPORT=loop.MONITOR_REPORT, ALPHA="{{ params.alpha }}")

    check_current = loop.check_current(loop.BASE, monitor.output)

    score_holdout_current = dask_job(
        "score_holdout_current",
        'apply --model "$MODEL" --input "$HOLDOUT" --output "$OUTPUT" '
        '--score-col "$SCORE_COL" --output-col p_current --overwrite',
        MODEL=loop.PREVIOUS_MODEL, HOLDOUT=loop.HOLDOUT_CANDIDATE, OUTPUT=loop.HOLDOUT_BOTH)

    evaluate_holdout = dask_job(
        "evaluate_holdout",
        'evaluate --input "$HOLDOUT" --prob-col p_candidate --prob-col p_current '
        '--label-col "$LABEL_COL" --output "$REPORT" --overwrite',
        HOLDOUT=loop.HOLDOUT_BOTH, REPORT=loop.REPORT)

    compare = loop.compare(evaluate_holdout.output, "{{ params.metric }}", monitor.output)
    no_current_model = EmptyOperator(task_id="no_current_model")
    keep_current = EmptyOperator(task_id="keep_current")
    publish = loop.publish(loop.BASE, loop.CANDIDATE, fit_candidate.output)
    current_model = loop.current_model(loop.BASE, loop.CANDIDATE, loop.HOLDOUT_CANDIDATE,
                                       loop.HOLDOUT_BOTH)

    calibrate_today = dask_job(
        "calibrate_today",
        'apply --model "$MODEL" --input "$TODAY" --output "$OUTPUT" '
        '--score-col "$SCORE_COL" --output-col "$OUTPUT_COL" --overwrite',
        MODEL=loop.CURRENT_MODEL, TODAY=loop.TODAY, OUTPUT=loop.CALIBRATED,
        OUTPUT_COL="{{ params.output_col }}")

    threshold = dask_job(
        "threshold",
        'threshold --input "$HOLDOUT" --score-col "$PROB_COL" --label-col "$LABEL_COL" '
        '--cost-fp "$COST_FP" --cost-fn "$COST_FN"',
        HOLDOUT=loop.CURRENT_HOLDOUT, PROB_COL=loop.CURRENT_PROB_COL,
        COST_FP="{{ params.cost_fp }}", COST_FN="{{ params.cost_fn }}")

    save_threshold = loop.save_threshold(loop.BASE, threshold.output, current_model)

    summarize_scores >> fit_window >> fit_candidate >> score_holdout_candidate
    score_holdout_candidate >> summarize_holdout >> monitor_window >> monitor >> check_current
    check_current >> [score_holdout_current, no_current_model]
    score_holdout_current >> evaluate_holdout >> compare >> [publish, keep_current]
    no_current_model >> publish
    [publish, keep_current] >> current_model >> [calibrate_today, threshold]
