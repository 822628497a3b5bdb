"""Local inputs: pandas DataFrames, pyarrow Tables, and Parquet files or datasets.

Parquet (files, directories, hive partitions) is opened with
``pyarrow.dataset`` and read in bounded tables (:func:`iter_tables`); the
rows' columns are read and checked by :mod:`distcal.core.rows`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from .core.columns import is_list_type
from .core.validate import check_unique_columns
from .errors import DataError
from .storage import check_regular_input

__all__ = ["open_dataset", "iter_tables", "read_all", "is_path", "is_vector_column"]


def is_path(data: object) -> bool:
    return isinstance(data, (str, os.PathLike))


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
        try:
            parts = fragment.split_by_row_group()
        except (pa.ArrowInvalid, OSError) as exc:  # (a file other than Parquet deeper down)
            raise DataError(f"input file '{fragment.path}' is not a readable Parquet file: "
                            f"{exc}") from exc
        check_file_types(fragment, dataset.schema, columns)
        for part in parts:
            table = part.to_table(schema=dataset.schema, columns=columns)
            for start in range(0, table.num_rows, batch_rows):
                yield table.slice(start, batch_rows)


def read_all(dataset: ds.Dataset, columns: list[str] | None = None) -> pa.Table:
    """The dataset's ``columns`` (default: all) as one table, its files' types checked."""
    columns = dataset.schema.names if columns is None else columns
    return pa.concat_tables([*iter_tables(dataset, columns)] or
                            [dataset.schema.empty_table().select(columns)])


def check_file_types(fragment: ds.Fragment, schema: pa.Schema, columns: list[str]) -> None:
    """A DataError when a file stores a column read in a type that the dataset's (its
    first file's) type would change: Arrow casts each file to that schema without a
    word (labels 0.5 read as bools, float64 scores rounded to float32, text parsed).
    Exact widenings (int32 to int64, float32 to float64, string to large_string) pass."""
    physical = fragment.physical_schema
    for name in columns:
        i = physical.get_field_index(name)
        if i < 0:  # a hive partition column, or missing (reported where rows are read)
            continue
        have, want = physical.field(i).type, schema.field(name).type
        if have != want and not widens(have, want):
            why = ("the dataset is read in the types of its first file, whose narrower type "
                   "would change this file's values" if widens(want, have) else
                   "reading it as that type would change its values")
            raise DataError(
                f"column '{name}' has type {have} in file '{fragment.path}' but {want} in the "
                f"dataset's first file; {why}: write the dataset's files with one type")


def widens(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether every value of type ``have`` is exactly a value of type ``want``."""
    t = pa.types
    if t.is_null(have):
        return True
    if t.is_integer(have) and t.is_integer(want):
        if t.is_signed_integer(have) == t.is_signed_integer(want):
            return want.bit_width >= have.bit_width
        return t.is_unsigned_integer(have) and want.bit_width > have.bit_width
    if t.is_floating(have) and t.is_floating(want):
        return want.bit_width >= have.bit_width
    return ((t.is_string(have) or t.is_large_string(have)) and t.is_large_string(want)) \
        or (t.is_string(have) and t.is_string(want))


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
