"""Export a calibration model to where the classifier runs: SQL and ONNX.

* :func:`~distcal.export.sql.to_sql`: one SQL expression per output for
  Spark SQL, DuckDB, PostgreSQL, BigQuery and Snowflake;
* :func:`~distcal.export.onnx_graph.to_onnx`: an ``onnx.ModelProto``;
* MLflow: :mod:`distcal.mlflow`.

Both reproduce ``model.predict`` (docs/export.md): they are built from
the same leaves (:mod:`distcal.core.piecewise`) and the same double
operations. They read the model's maps and combiner only; no engine is
involved. sqlglot and onnx are imported when an export is made (the
``export`` extra).
"""

from __future__ import annotations

from .onnx_graph import to_onnx
from .sql import DIALECTS, ovr_normalise_sql, to_sql

__all__ = ["to_sql", "to_onnx", "ovr_normalise_sql", "DIALECTS"]
