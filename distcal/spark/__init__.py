"""distcal in pyspark.ml: the Calibrator Estimator and its fitted CalibratorModel.

``distcal.fit(spark_df)`` and friends work on Spark DataFrames directly; this
package adds ``Calibrator`` (a ``pyspark.ml`` Estimator) whose fitted
``CalibratorModel`` (a Transformer) goes into a ``Pipeline`` and is saved
and loaded with it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Calibrator", "CalibratorModel"]


def __getattr__(name: str) -> Any:  # pyspark is imported only when asked for
    if name in __all__:
        from . import ml

        return getattr(ml, name)
    raise AttributeError(name)
