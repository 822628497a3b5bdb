"""Reading one column of a batch as float64: numbers, text among numbers, vector elements.

Shared by every reader of the user's columns (:mod:`distcal.core.rows`,
:mod:`distcal.apply`): null is NaN, text in a numeric column is a row
problem, and an element of a vector column is read with the vectors'
lengths counted for :func:`~distcal.core.validate.check_vector_lengths`.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import VECTORS_EXPECTED, column_type
from .validate import is_real_dtype

__all__ = ["arrow_kind", "arrow_to_float", "column_to_float", "vector_element", "is_list_type"]


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
    """Numbers of an object column as float64, and the mask of its cells that are not
    numbers: text, "0.5" included (a column of text is never read as numbers), and complex
    numbers (``to_numeric`` keeps them, and float64 would keep only their real part)."""
    strings = values.map(lambda v: isinstance(v, (str, bytes, complex, np.complexfloating))
                         ).to_numpy(dtype=bool)
    numbers = pd.to_numeric(values.where(~strings), errors="coerce")
    out = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
    text = values.notna().to_numpy() & (np.isnan(out) | strings)
    out[text] = np.nan
    return out, text


def arrow_to_float(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    if pa.types.is_dictionary(col.type):
        col = pc.cast(col, col.type.value_type)
    if arrow_kind(col.type) == "text":  # every value of a text column is text
        valid = np.asarray(pc.is_valid(col), dtype=bool)
        return np.full(len(valid), np.nan), valid
    if pa.types.is_decimal(col.type):
        # Arrow's decimal -> double cast is off by an ulp for about half of 18-digit
        # decimals; its text -> double parse rounds correctly, as float(Decimal) and
        # pandas do, so every engine reads a decimal as the same double.
        col = pc.cast(col, pa.string())
    # safe=False: integers beyond 2^53 round (and fail the label/score checks, not Arrow).
    return pc.cast(col, pa.float64(), safe=False).to_numpy(zero_copy_only=False), None


def column_to_float(data: pd.DataFrame | pa.Table, name: str, role: str | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A scalar numeric column as float64 (null -> NaN) and the mask of its text cells.

    A column of another type (dates, vectors, ...) is a :class:`DataError`
    naming ``role`` (none: one of several per-class score columns).
    """
    if isinstance(data, pa.Table):
        col = data.column(name)
        if arrow_kind(col.type) == "other":
            raise column_type(name, role, str(col.type))
        values, text = arrow_to_float(col)
        return values, np.zeros(len(values), bool) if text is None else text
    s = data[name]
    if isinstance(s.dtype, pd.CategoricalDtype):  # (Hive partitions, dictionaries) as values
        s = s.astype(s.cat.categories.dtype if is_real_dtype(s.cat.categories.dtype)
                     else object)
    if is_real_dtype(s.dtype):  # not complex, dates or durations
        return s.to_numpy(dtype=np.float64, na_value=np.nan), np.zeros(len(s), bool)
    if pd.api.types.is_object_dtype(s.dtype) or pd.api.types.is_string_dtype(s.dtype):
        # Only an object column can hold vectors (a string one's map gives strings).
        if pd.api.types.is_object_dtype(s.dtype) and \
                s.map(lambda v: isinstance(v, (list, tuple, np.ndarray))).astype(bool).any():
            # (as Arrow's list types are named where other engines read them)
            raise column_type(name, role, "vectors (lists or arrays)")
        return _coerce_text(s.astype(object))
    raise column_type(name, role, str(s.dtype))


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
    if pa.types.is_null(col.type):  # no value at all (e.g. an empty pandas part): no vectors
        col = pa.nulls(len(col), pa.list_(pa.float64()))
    if not (is_list_type(col.type) and arrow_kind(col.type.value_type) == "number"):
        raise column_type(name, role, str(col.type), VECTORS_EXPECTED)
    lengths = pc.fill_null(pc.list_value_length(col), -1).to_numpy(zero_copy_only=False)
    out = np.full(len(col), np.nan)
    inside = lengths > index
    if inside.any():
        element = pc.list_element(col.filter(pa.array(inside)), index)
        out[inside] = arrow_to_float(element)[0]
    sizes, counts = np.unique(lengths[lengths >= 0], return_counts=True)
    return out, Counter(dict(zip(sizes.tolist(), counts.tolist())))


def is_list_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_fixed_size_list(t))
