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
import pyarrow.compute as pc
import pyarrow.dataset as ds

from .core.validate import (
    check_unique_columns,
    check_vector_lengths,
    is_real_dtype,
    is_vector_series,
)
from .errors import VECTORS_EXPECTED, DataError, column_not_found, column_type
from .logs import progress
from .storage import check_regular_input

__all__ = ["ColumnSource", "open_dataset", "iter_tables", "is_path", "read_table",
           "arrow_kind", "arrow_to_float", "is_vector_column", "vector_element"]

Batch = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]


def is_path(data: object) -> bool:
    return isinstance(data, (str, os.PathLike))


def arrow_kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return arrow_kind(t.value_type)
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t) or pa.types.is_null(t)):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    return "other"


def _coerce_text(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    numbers = pd.to_numeric(values, errors="coerce")
    out = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
    text = values.notna().to_numpy() & np.isnan(out)
    return out, text


def arrow_to_float(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    if arrow_kind(col.type) == "text":
        return _coerce_text(pd.Series(col.to_pandas(), dtype=object))
    # safe=False: integers beyond 2^53 round (and fail the label/score checks, not Arrow).
    return pc.cast(col, pa.float64(), safe=False).to_numpy(zero_copy_only=False), None


def _pandas_to_float(s: pd.Series) -> tuple[np.ndarray, np.ndarray | None]:
    dt = s.dtype
    if pd.api.types.is_bool_dtype(dt) or pd.api.types.is_numeric_dtype(dt):
        return s.to_numpy(dtype=np.float64, na_value=np.nan), None
    return _coerce_text(s.astype(object))


def _pandas_kind(s: pd.Series) -> str:
    dt = s.dtype
    if is_real_dtype(dt):  # not complex, not dates or durations
        return "number"
    if pd.api.types.is_object_dtype(dt) or pd.api.types.is_string_dtype(dt):
        return "other" if is_vector_series(s) else "text"  # vectors are not text
    return "other"


def _vector_kind(t: pa.DataType) -> str:
    return "number" if _is_list_type(t) and arrow_kind(t.value_type) == "number" else "other"


def _pandas_vector_kind(s: pd.Series) -> str:
    if isinstance(s.dtype, pd.ArrowDtype):
        return _vector_kind(s.dtype.pyarrow_dtype)
    return "number" if s.dtype == object else "other"


def vector_element(col: pa.ChunkedArray | pa.Array | pd.Series, index: int,
                   name: str = "", role: str = "score") -> tuple[np.ndarray, Counter[int]]:
    """Element ``index`` of every vector of ``col`` as float64, and the vector lengths.

    ``col`` is a pyarrow list, large list or fixed-size list column, or a
    pandas column of lists or numpy arrays. Null vectors, null elements and
    vectors too short for ``index`` give NaN; the returned counter counts
    the non-null vectors by length, for
    :func:`~distcal.core.validate.check_vector_lengths` once the whole input
    has been seen.
    """
    if isinstance(col, pd.Series):
        try:
            col = (pa.array(col) if isinstance(col.dtype, pd.ArrowDtype)
                   else pa.array(col.astype(object), from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise column_type(name, role, "mixed values", VECTORS_EXPECTED) from exc
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if _vector_kind(col.type) != "number":
        raise column_type(name, role, str(col.type), VECTORS_EXPECTED)
    lengths = pc.fill_null(pc.list_value_length(col), -1).to_numpy(zero_copy_only=False)
    out = np.full(len(col), np.nan)
    inside = lengths > index
    if inside.any():
        element = pc.list_element(col.filter(pa.array(inside)), index)
        out[inside] = arrow_to_float(element)[0]
    sizes, counts = np.unique(lengths[lengths >= 0], return_counts=True)
    return out, Counter(dict(zip(sizes.tolist(), counts.tolist())))


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


def _is_list_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_fixed_size_list(t))


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
            return _is_list_type(dtype.pyarrow_dtype)
        if not pd.api.types.is_object_dtype(dtype):
            return False
        first = data[name].first_valid_index()
        return first is not None and isinstance(data[name][first], (list, tuple, np.ndarray))
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        check_unique_columns(data.schema.names, [name])
        return name in data.schema.names and _is_list_type(data.schema.field(name).type)
    if is_path(data):
        schema = open_dataset(data).schema  # type: ignore[arg-type]
        return name in schema.names and _is_list_type(schema.field(name).type)
    return False
