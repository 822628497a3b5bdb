"""spark-submit entry point for distcal.

    spark-submit --master yarn --py-files distcal.zip jobs/spark_calibrate.py fit \
        --input-table scores.daily --output hdfs:///models/calib/2026-11-29 \
        --label-col clicked --weight-col w

Subcommands and options: those of the ``distcal`` command line (fit, apply,
evaluate, threshold, discretize, export, summarize, fit --summaries, monitor)
plus --input-table / --output-table; see README.md.
"""

from distcal.cli.run import exit_process
from distcal.cli.spark import main

if __name__ == "__main__":
    exit_process(main(process=True))
