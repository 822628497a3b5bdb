"""What an engine is: the interface every engine implements in full.

An engine moves data and calls the engine-free core (:mod:`distcal.core`);
it never does the math itself. Everything distcal computes is a function of
the *ordered ranges* of keyed rows (:mod:`distcal.core.keyed`): the valid
rows with weight > 0 as one row per key (all rows, a segment, a class),
pooled by (key, score) into sums, and split into ascending,
non-overlapping score ranges. An engine offers exactly that
(:meth:`Engine.open_keyed`), with passes over the rows themselves, and
applies a model to its own kind of frame (:meth:`Engine.transform_rows`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from typing import Any, Protocol, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.keyed import Key, KeyedTable, KeySpec
from ..core.rows import RowPart, add_up_rows
from ..errors import column_not_found, output_column_exists
from ..logs import log

__all__ = ["KeyedRanges", "Engine", "check_transform_columns", "prediction_array",
           "with_prediction"]

_Ranges = TypeVar("_Ranges", bound="KeyedRanges")
_Part = TypeVar("_Part", pd.DataFrame, pa.Table)


class KeyedRanges(ABC):
    """The keyed rows of one input (:mod:`distcal.core.keyed`), ready to be mapped over;
    the base of every engine's.

    ``map(fn)`` applies ``fn`` to each non-empty score range of the keyed
    rows, pooled by (key, score) into a :class:`~distcal.core.keyed.KeyedTable`
    (on whatever machine holds the range), and returns the results in
    ascending score order. ``map_rows(fn)`` applies ``fn`` to each part of
    the valid rows (:class:`~distcal.core.rows.RowPart`, whole rows with all
    their class scores; temperature scaling), results in any order. The
    counts (over input rows, not keyed rows; zero until then) are valid once
    either map has run (cluster engines validate during the first pass):
    each engine adds the counts of its input's parts up once, with
    :meth:`add_up`. ``n_classes`` is K for multiclass scores (0 for a binary
    score), known when opened; ``interval_widths``, valid with the counts,
    the partials of :mod:`distcal.core.interval_widths` of the valid rows
    when the spec has ``interval_cols`` (else None). ``close`` releases what
    the ranges hold (persisted frames, spilled runs); ``with`` calls it.
    ``result_bytes``: about how many bytes of results one map should bring to
    the driver at the most (None: no limit; a fit then runs a pass whose
    results would be larger in several maps, each over some of the keys).
    """

    spec: KeySpec  # the keyed rows' columns and roles
    n_rows: int = 0
    result_bytes: int | None = None
    weight_total: float = 0.0
    dropped_rows: int = 0
    n_classes: int
    interval_widths: dict[str, Any] | None = None

    @abstractmethod
    def map(self, fn: Callable[[KeyedTable], Any]) -> list[Any]: ...

    @abstractmethod
    def map_rows(self, fn: Callable[[RowPart], Any]) -> list[Any]: ...

    @abstractmethod
    def close(self) -> None: ...

    def narrow(self, keys: Collection[Key]) -> None:
        """Later passes of :meth:`map` need only ``keys``' tables: an engine that keeps
        its ranges between passes may keep only these keys' rows (fewer rows to read
        per pass); the others read their ranges as they are."""
        return None

    def __enter__(self: _Ranges) -> _Ranges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_up(self, stats: list[dict[str, Any]], on_invalid: str, engine: str) -> None:
        """The parts' counts of :func:`~distcal.core.rows.read_rows` added up, kept and logged
        (:func:`~distcal.core.rows.add_up_rows`: the input's ``DataError``, if any)."""
        totals = add_up_rows(stats, on_invalid, self.spec.weight_col)
        self.n_rows, self.weight_total = totals.n_rows, totals.weight_total
        self.dropped_rows, self.interval_widths = totals.dropped_rows, totals.interval_widths
        log.info("%s: %d rows used (weight %g), %d dropped", engine, self.n_rows,
                 self.weight_total, self.dropped_rows)


class Engine(Protocol):
    """One way of running distcal: local, Spark or Dask."""

    name: str
    # Keyword options this engine accepts on top of the public parameters
    # (e.g. ``n_ranges`` on Spark); anything else is a TypeError.
    options: frozenset[str]

    def is_vector_column(self, data: Any, name: str) -> bool:
        """Whether column ``name`` of ``data`` holds vectors (multiclass scores)."""
        ...

    def open_keyed(self, data: Any, spec: KeySpec, *, on_invalid: str,
                   finite_scores: bool = False, passes: int = 1, **opts: Any) -> KeyedRanges:
        """The keyed rows of ``data`` (``spec`` says which), validated, as :class:`KeyedRanges`.

        Every part of the input is read with
        :func:`distcal.core.rows.read_rows` (the same checks and messages on
        every engine; the counts added up with
        :func:`~distcal.core.rows.add_up_rows`, whose ``DataError`` is raised
        by the first map, before anything is returned); ``map`` range-
        partitions the rows of :func:`distcal.core.keyed.explode` on score,
        carrying the key, and pools each range with
        :func:`~distcal.core.keyed.pool_keyed` /
        :func:`~distcal.core.keyed.merge_keyed` as its rows stream in, so a
        worker holds a batch and its range's distinct (key, score) pairs,
        never its rows. ``passes``: how often the caller will map (cluster
        engines persist between passes when it is more than one).
        """
        ...

    def transform_rows(self, data: Any, columns: dict[str, str], output_col: str,
                       predict: Callable[[Any], Any], vector: bool, model: Any = None,
                       score_index: int | None = None) -> Any:
        """``data`` with ``output_col`` = ``predict(part)`` for each part of its rows.

        ``columns``: the model's input columns and their roles ("score",
        "segment"), for the messages of missing ones. ``part`` is a pandas
        DataFrame or pyarrow Table holding them; ``predict`` returns a
        float64 array of one value per row, or (``vector``) an (n, K) array,
        written as a list column (``ArrayType(double)`` on Spark). Same
        frame type out as in (a Parquet path in: a pandas DataFrame);
        ``output_col`` already in ``data`` is a ``DataError``.

        ``model``: the model that ``predict`` applies, for an engine that
        can apply some models natively (Spark: binary maps, by segment or
        not, inside the JVM; ``score_index``: the score is that element of
        the vectors in the score column); the result must equal
        ``predict``'s.
        """
        ...


# -- transform_rows: what every engine does with a part ----------------------------------

def check_transform_columns(names: list[str], columns: dict[str, str], *outputs: str) -> None:
    """The ``DataError`` of a model input column (``columns``: name -> role) missing from
    ``names``, or of an output column already in them (:meth:`Engine.transform_rows`)."""
    for c, role in columns.items():
        if c not in names:
            raise column_not_found(c, role, names)
    for name in outputs:
        if name in names:
            raise output_column_exists(name)


def prediction_array(values: Any, vector: bool) -> pa.Array:
    """``predict``'s values as an Arrow column: double, or (``vector``: an (n, K) array)
    ``list<double>`` of each row's K values."""
    values = np.asarray(values, dtype=np.float64)
    if not vector:
        return pa.array(values.reshape(-1), type=pa.float64())
    n, k = values.shape if values.ndim == 2 else (values.shape[0], 0)
    return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * k),
                                    pa.array(values.reshape(-1), type=pa.float64()))


def with_prediction(part: _Part, output_col: str, values: Any, vector: bool) -> _Part:
    """``part`` with ``output_col`` = ``predict``'s ``values`` for its rows: in Arrow as
    :func:`prediction_array`; in pandas a float64 column, or (``vector``) an object
    column of each row's array of K values."""
    if not isinstance(part, pd.DataFrame):
        return part.append_column(output_col, prediction_array(values, vector))
    values = np.asarray(values, dtype=np.float64)
    out = part.copy(deep=False)
    if vector:
        values = values.reshape(len(part), -1) if len(part) else values.reshape(0, 0)
        out[output_col] = pd.Series(list(values), index=part.index, dtype=object)
    else:
        out[output_col] = pd.Series(values.reshape(len(part)), index=part.index,
                                    dtype=np.float64)
    return out
