"""Multiclass rows on the cluster engines (Spark, Dask), for multiclass evaluation.

An engine offers the valid multiclass rows of its input
(:class:`MulticlassRows`:
:class:`distcal.engines.spark.multiclass.SparkMulticlassRows`,
:class:`distcal.engines.dask_multiclass.DaskMulticlassRows`). Fitting goes
through the keyed pass (:mod:`distcal.keyed_fit`); evaluation moves there next.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .core.distinct import DistinctTable
from .errors import ParameterError

__all__ = ["open_multiclass_rows", "is_engine_vector_column", "MulticlassRows"]


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
