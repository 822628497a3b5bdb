"""spark-submit entry point for distcal.

    spark-submit --master yarn jobs/spark_calibrate.py fit \
        --input-table scores.daily --output hdfs:///models/calib/2026-11-29 \
        --label-col clicked --weight-col w

Subcommands and options: those of the ``distcal`` command line (fit, apply,
evaluate, threshold) plus --input-table / --output-table; see README.md.
Executors need distcal installed (or shipped with --py-files / an archive).
"""

import sys

from distcal.spark.job import main

if __name__ == "__main__":
    sys.exit(main())
