"""The Dask engine: keyed ranges (:mod:`.dask_keyed`) and transforms of Dask DataFrames.

On a Dask DataFrame, with whatever scheduler is in scope (a distributed
``Client``, or Dask's local threads). Local data forced onto this engine
becomes a Dask DataFrame first (:func:`as_dask`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..core.columns import is_list_type
from ..core.keyed import KeySpec
from ..tables import is_path
from .dask_keyed import DaskKeyedRanges, transform_rows, workers_threads
from .frames import engine_of

__all__ = ["DaskEngine", "as_dask"]


def as_dask(data: Any) -> Any:
    """A Dask DataFrame for ``data`` (engine="dask" forced on local data)."""
    import dask.dataframe as dd

    if engine_of(data) == "dask":
        return data
    if is_path(data):
        return dd.read_parquet(str(data))
    import pyarrow as pa

    if isinstance(data, pa.Table):
        data = data.to_pandas()
    if isinstance(data, pd.DataFrame):
        converted, mixed = _arrow_objects(data)
        if converted or mixed:
            data = data.copy(deep=False)
            for name, column in converted.items():
                data[name] = column
            for name in mixed:
                data[name] = _pickled(data[name])
        frame = dd.from_pandas(data, npartitions=max(1, workers_threads()))
        if not mixed:
            return frame
        return frame.map_partitions(_unpickled, mixed, meta=_unpickled(frame._meta, mixed))
    raise TypeError(f"the dask engine cannot read data of type {type(data).__name__}")


def _pickled(column: pd.Series) -> pd.Series:
    """A column of mixed values (text among numbers, keys 7 and 'a') as Arrow binary, each
    value pickled: Dask leaves it as it is, where it would make an object column text
    (``dataframe.convert-string``, a setting of the whole process, which distcal leaves
    alone), and the workers unpickle it (:func:`_unpickled`): every engine reads the
    same values."""
    import pyarrow as pa

    values = pa.array([pickle.dumps(v) for v in column], pa.binary())
    return pd.Series(pd.arrays.ArrowExtensionArray(values), index=column.index)


def _unpickled(part: pd.DataFrame, names: list[Any]) -> pd.DataFrame:
    part = part.copy(deep=False)
    for name in names:
        part[name] = pd.Series([pickle.loads(b) for b in part[name]], index=part.index,
                               dtype=object)
    return part


def _arrow_objects(df: pd.DataFrame) -> tuple[dict[Any, pd.Series], list[Any]]:
    """``df``'s object columns that Arrow types (vectors, decimals, Python ints, dates) as
    pandas' Arrow columns: ``from_pandas`` would turn them into strings (Dask's
    ``dataframe.convert-string``), which the local engine reads as numbers and vectors;
    and the names of those Arrow cannot type (mixed values), which must stay as they are."""
    import pyarrow as pa

    out, mixed = {}, []
    for name in df.columns:
        if pd.api.types.is_object_dtype(df[name].dtype):
            try:
                values = pa.array(df[name], from_pandas=True)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):  # ints >= 2^63
                mixed.append(name)
                continue
            if not pa.types.is_string(values.type):
                out[name] = pd.Series(pd.arrays.ArrowExtensionArray(values), index=df.index)
    return out, mixed


class DaskEngine:
    """The Dask engine; implements :class:`~distcal.engines.base.Engine`."""

    name = "dask"
    options = frozenset({"n_ranges", "samples_per_range", "range_rows"})

    def is_vector_column(self, data: Any, name: str) -> bool:
        """A pyarrow list dtype, or an object column whose first non-null value is a vector.

        The first non-null value over the partitions in order (partitions
        are computed one by one until one holds a value), so an empty or
        all-null first partition decides nothing.
        """
        if engine_of(data) == "local":  # a local input forced onto this engine
            from ..tables import is_vector_column

            return is_vector_column(data, name)
        if name not in getattr(data, "columns", ()):
            return False
        dtype = data[name].dtype
        if isinstance(dtype, pd.ArrowDtype):  # pandas' Arrow-backed list columns
            return is_list_type(dtype.pyarrow_dtype)
        if not pd.api.types.is_object_dtype(dtype):
            return False
        column = data[name]
        for i in range(column.npartitions):
            head = column.partitions[i].dropna().head(1, compute=True)
            if len(head):
                return isinstance(head.iloc[0], (list, tuple, np.ndarray))
        return False

    def open_keyed(self, data: Any, spec: KeySpec, *, on_invalid: str,
                   finite_scores: bool = False, passes: int = 1,
                   **opts: Any) -> DaskKeyedRanges:
        """Keyed ranges (:mod:`distcal.engines.dask_keyed`); option ``range_rows``.

        Summaries (:class:`~distcal.core.summary.SummarySource`) are read and
        merged by the workers (:class:`~distcal.engines.dask_keyed.DaskSummaryRanges`).
        """
        from ..core.summary import SummarySource

        if isinstance(data, SummarySource):
            from .dask_keyed import DaskSummaryRanges

            return DaskSummaryRanges(data, spec, on_invalid=on_invalid,
                                     finite_scores=finite_scores, passes=passes, **opts)
        return DaskKeyedRanges(as_dask(data), spec, on_invalid=on_invalid,
                               finite_scores=finite_scores, passes=passes, **opts)

    def transform_rows(self, data: Any, columns: dict[str, str], output_col: str,
                       predict: Callable[[Any], Any], vector: bool, model: Any = None,
                       score_index: int | None = None) -> Any:
        return transform_rows(as_dask(data), columns, output_col, predict, vector)
