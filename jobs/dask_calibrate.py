"""Dask entry point for distcal (notebooks' clusters, Airflow Python tasks).

    python jobs/dask_calibrate.py fit --input s3://bucket/scores/ --output models/v1 \
        --scheduler tcp://scheduler:8786

Subcommands and options: those of the ``distcal`` command line (fit, apply,
evaluate, threshold, discretize, export, summarize, fit --summaries, monitor)
plus --scheduler;
without it a LocalCluster is started
for the run and closed after. Exit 0 on success, 2 on bad input or usage, 1
on other failures, with one line on stderr.
"""

from distcal.cli.dask import main
from distcal.cli.run import exit_process

if __name__ == "__main__":
    exit_process(main(process=True))
