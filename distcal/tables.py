"""Reading input columns as float64 batches.

Inputs: pandas DataFrames, pyarrow Tables, and Parquet files or datasets
(directories, hive partitions) read with ``pyarrow.dataset`` in record
batches. Every column arrives as a float64 numpy array with null as NaN;
text in a numeric column is reported as a row problem. A column of vectors
(lists or arrays) read with an index gives that element of every vector
(:func:`vector_element`, the one place the local and Dask engines take it).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from .core.columns import (
    _pandas_kind,
    _pandas_to_float,
    _pandas_vector_kind,
    _vector_kind,
    arrow_kind,
    arrow_to_float,
    is_list_type,
    vector_element,
)
from .core.validate import (
    check_unique_columns,
    check_vector_lengths,
)
from .errors import VECTORS_EXPECTED, DataError, column_not_found, column_type
from .logs import progress
from .storage import check_regular_input

__all__ = ["ColumnSource", "open_dataset", "iter_tables", "is_path", "read_table",
           "arrow_kind", "arrow_to_float", "is_vector_column", "vector_element"]

Batch = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


def is_path(data: object) -> bool:
    return isinstance(data, (str, os.PathLike))


class ColumnSource:
    """Columns of one input, by role, as float64 batches.

    ``indexes`` maps a role to an element index: that role's column holds
    vectors and the element at the index is its value (``score_index``).
    """

    def __init__(self, data: object, columns: dict[str, str],
                 indexes: dict[str, int] | None = None):
        self.columns = {role: name for role, name in columns.items() if name is not None}
        self.indexes = {r: i for r, i in (indexes or {}).items() if r in self.columns}
        self.lengths: dict[str, Counter[int]] = {r: Counter() for r in self.indexes}
        self.data = data
        if isinstance(data, pd.DataFrame):
            self.kind = "pandas"
            names = list(map(str, data.columns))
            check_unique_columns(names, self.columns.values())  # before data[c] reads
            kinds = {c: _pandas_kind(data[c]) for c in self.columns.values() if c in data.columns}
            types = {c: str(data[c].dtype) for c in kinds}
            # Vectors in pandas: an object column; its elements are checked when read.
            kinds.update({self.columns[r]: _pandas_vector_kind(data[self.columns[r]])
                          for r in self.indexes if self.columns[r] in kinds})
        elif isinstance(data, (pa.Table, pa.RecordBatch)):
            self.kind = "arrow"
            names = data.schema.names
            check_unique_columns(names, self.columns.values())
            kinds = {c: arrow_kind(data.schema.field(c).type)
                     for c in self.columns.values() if c in names}
            types = {c: str(data.schema.field(c).type) for c in kinds}
            kinds.update({self.columns[r]: _vector_kind(data.schema.field(self.columns[r]).type)
                          for r in self.indexes if self.columns[r] in names})
        elif is_path(data):
            self.kind = "parquet"
            self.dataset = open_dataset(data)  # type: ignore[arg-type]  # is_path checked it
            names = self.dataset.schema.names
            kinds = {c: arrow_kind(self.dataset.schema.field(c).type)
                     for c in self.columns.values() if c in names}
            types = {c: str(self.dataset.schema.field(c).type) for c in kinds}
            kinds.update({self.columns[r]: _vector_kind(self.dataset.schema.field(
                self.columns[r]).type) for r in self.indexes if self.columns[r] in names})
        else:
            raise TypeError(
                f"cannot read data of type {type(data).__name__}: pass a pandas DataFrame, a "
                "pyarrow Table, a Parquet path, a Spark DataFrame or a Dask DataFrame")
        for role, name in self.columns.items():
            if name not in kinds:
                raise column_not_found(name, role, names)
            if kinds[name] == "other":
                raise column_type(name, role, types[name],
                                  VECTORS_EXPECTED if role in self.indexes else "numbers")

    def batches(self, batch_rows: int = 1 << 22) -> Iterator[Batch]:
        roles = list(self.columns)
        if isinstance(self.data, pd.DataFrame):
            batch = self._convert_pandas(self.data, roles)
            self.check_lengths()
            yield batch
        elif isinstance(self.data, (pa.Table, pa.RecordBatch)):
            batch = self._convert_arrow(self.data, roles)
            self.check_lengths()
            yield batch
        else:
            names = list(dict.fromkeys(self.columns[r] for r in roles))
            dataset = self.dataset

            def row_groups() -> int:
                return sum(f.num_row_groups for f in dataset.get_fragments()
                           if hasattr(f, "num_row_groups"))

            tables = iter_tables(self.dataset, names, batch_rows)
            for table in progress(tables, row_groups, "reading"):
                yield self._convert_arrow(table, roles)
            self.check_lengths()  # after the last batch: the counts are totals

    def check_lengths(self) -> None:
        """The vector columns' :class:`DataError` (unequal lengths, index out of range)."""
        for r, i in self.indexes.items():
            check_vector_lengths(self.columns[r], r, i, self.lengths[r])

    def _convert_pandas(self, df: pd.DataFrame, roles: list[str]) -> Batch:
        arrays, text = {}, {}
        for r in roles:
            if r in self.indexes:
                arrays[r], lengths = vector_element(df[self.columns[r]], self.indexes[r],
                                                    self.columns[r], r)
                self.lengths[r].update(lengths)
                continue
            arrays[r], t = _pandas_to_float(df[self.columns[r]])
            if t is not None:
                text[r] = t
        return arrays, text

    def _convert_arrow(self, tab: pa.Table | pa.RecordBatch, roles: list[str]) -> Batch:
        arrays, text = {}, {}
        for r in roles:
            if r in self.indexes:
                arrays[r], lengths = vector_element(tab.column(self.columns[r]), self.indexes[r],
                                                    self.columns[r], r)
                self.lengths[r].update(lengths)
                continue
            arrays[r], t = arrow_to_float(tab.column(self.columns[r]))
            if t is not None:
                text[r] = t
        return arrays, text


def open_dataset(path: str | os.PathLike) -> ds.Dataset:
    p = os.fspath(path)
    if "://" not in p and not os.path.exists(p):
        raise DataError(f"input '{p}' does not exist")
    check_regular_input(p)  # a FIFO or a device (inside a dataset too) would block the reader
    try:
        return ds.dataset(p, format="parquet", partitioning="hive")
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"input '{p}' is not a readable Parquet file or dataset: {exc}") from exc


def iter_tables(dataset: ds.Dataset, columns: list[str],
                batch_rows: int = 1 << 22) -> Iterator[pa.Table]:
    """The dataset as tables of at most ``batch_rows`` rows, one row group at a time.

    Row group by row group rather than ``Scanner.to_batches``: in pyarrow
    26 the scanner's and ``ParquetFile.iter_batches``' memory kept growing
    with the rows read (measured: +2.3 MB per 256k-row batch), while a
    row group read and released stays flat, which is what bounded-memory
    fitting needs. Hive partition columns are filled in from the path.
    """
    for fragment in dataset.get_fragments():
        for part in fragment.split_by_row_group():
            table = part.to_table(schema=dataset.schema, columns=columns)
            for start in range(0, table.num_rows, batch_rows):
                yield table.slice(start, batch_rows)


def read_table(path: str | os.PathLike) -> pa.Table:
    """The whole Parquet file or dataset as one Arrow table."""
    return open_dataset(path).to_table()


def is_vector_column(data: object, name: str) -> bool:
    """Whether column ``name`` of local ``data`` holds a vector (list/array) per row.

    pyarrow list types, a pandas column whose first non-null value is a list
    or a numpy array, or a list column of a Parquet dataset; False when the
    column is missing or ``data`` is not local.
    """
    if isinstance(data, pd.DataFrame):
        check_unique_columns(list(map(str, data.columns)), [name])
        if name not in data.columns:
            return False
        dtype = data[name].dtype
        if isinstance(dtype, pd.ArrowDtype):  # pandas' Arrow-backed list columns
            return is_list_type(dtype.pyarrow_dtype)
        if not pd.api.types.is_object_dtype(dtype):
            return False
        first = data[name].first_valid_index()
        return first is not None and isinstance(data[name][first], (list, tuple, np.ndarray))
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        check_unique_columns(data.schema.names, [name])
        return name in data.schema.names and is_list_type(data.schema.field(name).type)
    if is_path(data):
        schema = open_dataset(data).schema  # type: ignore[arg-type]
        return name in schema.names and is_list_type(schema.field(name).type)
    return False
