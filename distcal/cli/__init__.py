"""The command line and the job entry points.

* :mod:`.main`: ``distcal SUBCOMMAND`` (``--engine local|spark|dask``);
* :mod:`.spark`: ``jobs/spark_calibrate.py`` under spark-submit;
* :mod:`.dask`: ``jobs/dask_calibrate.py`` (``--scheduler`` or a LocalCluster);
* :mod:`.run`: parse, run, one JSON line, exit codes;
* :mod:`.options`, :mod:`.parser`: the options, declared once;
* :mod:`.commands`: fit, apply, evaluate, threshold, written against
* :mod:`.backend`: where data comes from and outputs go, per engine
  (:mod:`.local`, :mod:`.spark`, :mod:`.dask`).
"""

from .main import main

__all__ = ["main"]
