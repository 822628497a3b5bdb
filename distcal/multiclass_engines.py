"""Multiclass fitting on the cluster engines (Spark, Dask): the same model as locally.

An engine offers the valid multiclass rows of its input
(:class:`MulticlassRows`:
:class:`distcal.engines.spark.multiclass.SparkMulticlassRows`,
:class:`distcal.engines.dask_multiclass.DaskMulticlassRows`); this module
runs the engine-free core over them:

* temperature scaling: :func:`distcal.core.temperature.fit_temperature`,
  one pass over the rows per Newton step;
* one-vs-rest: for every class the binary fit of :func:`distcal.fit`
  (``fit_binary``) over that class's score ranges, the K fits sharing
  their passes (:func:`distcal.core.lockstep.run_in_lockstep`). Each class
  model equals the one the local engine fits on (score of class k,
  label == k, weight) over the same valid rows.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from . import params as checks
from .core.distinct import DistinctTable
from .core.lockstep import run_in_lockstep
from .core.temperature import fit_temperature
from .errors import ParameterError
from .logs import log, phase
from .model import CalibrationModel
from .multiclass import MulticlassCalibrationModel, _ClassCounts

__all__ = ["fit_multiclass_on_engine", "open_multiclass_rows", "is_engine_vector_column",
           "MulticlassRows"]


@runtime_checkable
class MulticlassRows(Protocol):
    """The valid multiclass rows of one input on a cluster engine.

    Validated when opened (a ``DataError`` names the column, the problem
    and the count, as locally); the counts below describe the rows kept
    (weight > 0). ``kind`` is "logits" or "probabilities" (temperature
    scaling: scikit-learn's rule over all rows).
    """

    n_classes: int
    k_cols: int            # score columns: K, or 1 for a binary score
    n_rows: int
    weight_total: float
    dropped_rows: int
    kind: str

    def temperature_parts(self, beta: float) -> list[np.ndarray]:
        """Each partition's [loss, grad, hess] of the log loss at ``beta``: one pass."""
        ...

    def map_rows(self, fn: Callable[[np.ndarray, np.ndarray, np.ndarray | None], Any]
                 ) -> list[Any]:
        """``fn(scores, labels, weights)`` per partition: one pass."""
        ...

    def class_ranges(self, passes: int) -> None:
        """Range-partition on (class, score) once, for ``passes`` passes."""
        ...

    def map_classes(self, fns: dict[int, Callable[[DistinctTable], Any]]
                    ) -> dict[int, list[Any]]:
        """One pass: ``fns[c]`` over class c's ordered ranges."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> MulticlassRows: ...

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None: ...

# Passes over the (class, score) ranges: isotonic needs one; the others more.
_PASSES = {"isotonic": 1, "histogram": 3, "sigmoid": 3}


def is_engine_vector_column(engine: str, data: Any, name: str) -> bool:
    """Whether column ``name`` of a Spark or Dask frame holds vectors (multiclass scores).

    Spark: an ``ArrayType`` or ``VectorUDT`` column. Dask: a pyarrow list
    dtype, or an object column whose first value in the first partition is
    a list or an array (only that partition's head is computed).
    """
    from .engines import engine_of

    if engine_of(data) == "local":  # a local input forced onto a cluster engine
        from .tables import is_vector_column

        return is_vector_column(data, name)
    if engine == "spark":
        fields = {f.name: f.dataType for f in getattr(data, "schema", ())}
        if name not in fields:
            return False
        from pyspark.sql import types as T

        from .engines.spark.multiclass import is_vector_udt

        return isinstance(fields[name], T.ArrayType) or is_vector_udt(fields[name])
    if engine == "dask" and name in getattr(data, "columns", ()):
        import numpy as np
        import pandas as pd
        import pyarrow as pa

        dtype = data[name].dtype
        if isinstance(dtype, pd.ArrowDtype):
            return bool(pa.types.is_list(dtype.pyarrow_dtype)
                        or pa.types.is_large_list(dtype.pyarrow_dtype)
                        or pa.types.is_fixed_size_list(dtype.pyarrow_dtype))
        if not pd.api.types.is_object_dtype(dtype):
            return False
        head = data[name].partitions[0].dropna().head(1, compute=True)
        return len(head) > 0 and isinstance(head.iloc[0], (list, tuple, np.ndarray))
    return False


def open_multiclass_rows(engine: str, data: Any, **kw: Any) -> MulticlassRows:
    """The engine's valid multiclass rows of ``data`` (validated; DataError if bad)."""
    if engine == "spark":
        from .engines.spark.multiclass import SparkMulticlassRows
        from .engines.spark.session import as_spark

        return SparkMulticlassRows(as_spark(data), **kw)
    if engine == "dask":
        from .engines.dask import as_dask
        from .engines.dask_multiclass import DaskMulticlassRows

        return DaskMulticlassRows(as_dask(data), **kw)
    raise ParameterError(f"no multiclass rows for engine {engine!r}")


def fit_multiclass_on_engine(engine: str, data: Any, method: str, score_col: str | None,
                             score_cols: list[str] | None, label_col: str,
                             weight_col: str | None, on_invalid: str,
                             method_params: dict[str, Any], engine_opts: dict[str, Any],
                             fit_binary: Callable[..., CalibrationModel]
                             ) -> MulticlassCalibrationModel:
    """:func:`distcal.fit` of multiclass scores on Spark or Dask (see the module docstring).

    ``fit_binary(ranges, map_ranges, method, params, columns)`` is
    :func:`distcal.fit`'s binary fit over ordered ranges (passed in by
    :mod:`distcal.api`, which sits above this module).
    """
    columns = {"score": score_col, "scores": score_cols, "label": label_col,
               "weight": weight_col}
    log.info("fit: multiclass %s on the %s engine", method, engine)
    with open_multiclass_rows(engine, data, method=method, score_col=score_col,
                              score_cols=score_cols, label_col=label_col,
                              weight_col=weight_col, on_invalid=on_invalid,
                              **engine_opts) as rows:
        k = rows.n_classes
        counts: dict[str, Any] = dict(n_rows=rows.n_rows, weight_total=rows.weight_total,
                      dropped_rows=rows.dropped_rows, columns=columns)
        if method == "temperature":
            with phase("fit: temperature"):
                beta, _ = fit_temperature(rows.temperature_parts)
            params = {"beta": beta, "temperature": 1.0 / beta, "input_": rows.kind}
            return MulticlassCalibrationModel(method, k, params, None, **counts)
        rows.class_ranges(passes=_PASSES[method])
        fit_classes = [1] if k == 2 else list(range(k))

        def job(c: int) -> Any:
            j = rows.k_cols - 1 if k == 2 else c
            name = score_cols[j] if score_cols is not None else f"{score_col}[{j}]"
            params = checks.method_params(method, dict(method_params))
            cols = {"score": name, "label": label_col, "weight": weight_col}
            ranges = _ClassCounts(rows.n_rows, rows.weight_total)
            return lambda m: fit_binary(ranges, m, method, params, cols)

        with phase("fit: one-vs-rest %s, %d classes", method, len(fit_classes)):
            fitted = run_in_lockstep({c: job(c) for c in fit_classes}, rows.map_classes)
        models: list[CalibrationModel | None] = [fitted.get(c) for c in range(k)]
        return MulticlassCalibrationModel(method, k, dict(method_params), models, **counts)
