"""Row validation: which rows are usable, and a message naming every problem.

Rules: a score is a real number (never complex, a date or a duration:
:func:`is_real_dtype`), ±inf allowed (not for sigmoid), never NaN/null;
a label is a number in [0, 1]; a weight is finite and >= 0; a probability
(evaluation) is in [0, 1]; a per-row loss is finite. Text in a numeric
column is a row problem too. :class:`distcal.core.rows.Problems` counts
the rows breaking these rules, over all batches, so that the message gives
totals for the whole input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from ..errors import DataError

__all__ = ["rules", "check_vector_lengths", "is_real_dtype", "as_scores", "check_unique_columns"]


def rules(role: str, values: np.ndarray, text: np.ndarray, finite_scores: bool = False
          ) -> list[tuple[str, np.ndarray]]:
    """The rows of ``values`` breaking each check of a role, in message order:
    (problem as worded, mask).

    ``values``: float64, null as NaN; ``text``: the rows that held text.
    Roles: "score", "prob" (a probability to evaluate), "label", "loss" (a
    per-row loss), "weight". Checks: text in a numeric column, null or NaN,
    then by role: infinite scores (``finite_scores``), values outside
    [0, 1] (labels, probabilities), infinite or negative weights, infinite
    losses. Every engine evaluates these same rules, so the messages are the
    same everywhere.
    """
    with np.errstate(invalid="ignore"):
        out = [("are text, not numbers", text), ("are null or NaN", np.isnan(values) & ~text)]
        if role == "score" and finite_scores:
            out.append(("are infinite (this method needs finite scores)", np.isinf(values)))
        elif role in ("label", "prob"):
            out.append(("are outside [0, 1]", (values < 0.0) | (values > 1.0)))
        elif role == "weight":
            out += [("are infinite", np.isinf(values)), ("are negative", values < 0.0)]
        elif role == "loss":
            out.append(("are infinite", np.isinf(values)))
    return out


def check_vector_lengths(name: str, role: str, index: int, lengths: Mapping[int, int]) -> None:
    """Raise the one :class:`DataError` for a vector column read at ``index``.

    ``lengths`` counts the non-null vectors by length, over the whole input
    (every engine counts them its own way and calls this). The vectors must
    all have one length (the most frequent one is taken as the intended
    length, ties to the shortest), and ``index`` must be below it. These are
    problems of the column, not of single rows, so ``on_invalid="drop"``
    does not drop them.
    """
    counts = {int(k): int(v) for k, v in lengths.items() if v}
    if not counts:
        return
    common = min(counts, key=lambda k: (-counts[k], k))
    parts = []
    other = sum(v for k, v in counts.items() if k != common)
    if other:
        parts.append(f"{other} {'row has a vector' if other == 1 else 'rows have vectors'} "
                     f"whose length is not {common} (the length of the other "
                     f"{counts[common]}); vectors must all have the same length")
    short = sum(v for k, v in counts.items() if k <= index)
    if short:
        parts.append(f"score_index {index} is out of range for {short} "
                     f"{'row' if short == 1 else 'rows'} (vectors of length "
                     f"{', '.join(str(k) for k in sorted(counts) if k <= index)})")
    if parts:
        raise DataError(f"column '{name}' ({role}): " + "; ".join(parts))


def is_real_dtype(dtype: object) -> bool:
    """Whether a numpy or pandas dtype holds real numbers (booleans, integers, floats).

    Complex numbers (their imaginary part would be dropped), datetime64 and
    timedelta64 (their integer nanoseconds are not scores) are not. Every
    reader asks this one question before it converts a column to float64.
    """
    import pandas as pd

    if isinstance(dtype, pd.ArrowDtype):
        import pyarrow as pa

        t = dtype.pyarrow_dtype
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t)
                    or pa.types.is_boolean(t) or pa.types.is_decimal(t))
    if pd.api.types.is_bool_dtype(dtype):
        return True
    return bool(pd.api.types.is_numeric_dtype(dtype)
                and not pd.api.types.is_complex_dtype(dtype))


def as_scores(scores: object, name: str = "scores") -> np.ndarray:
    """``scores`` (a number or array-like of real numbers) as a float64 array, at least 1-d.

    A scalar gives an array of one value. Complex numbers, datetime64 and
    timedelta64 values and text (``"0.5"`` too, as in a column) are a
    :class:`DataError` (numpy would silently take their real part, their
    nanoseconds, or parse the text).
    """
    arr = np.asarray(scores)
    n = arr.size if arr.dtype.kind in "cMmUS" else sum(
        isinstance(v, (complex, np.complexfloating, np.datetime64, np.timedelta64, str, bytes))
        for v in arr.ravel()) if arr.dtype.kind == "O" else 0
    if n:
        what = {"c": "complex numbers", "M": "dates (datetime64)", "m": "durations (timedelta64)",
                "U": "text", "S": "text"}.get(arr.dtype.kind, "complex numbers, dates or text")
        raise DataError(f"{name}: {n} {'value is' if n == 1 else 'values are'} "
                        f"{what}; scores must be real numbers")
    return np.atleast_1d(arr.astype(np.float64))


def check_unique_columns(names: list[str], used: object) -> None:
    """Refuse an input in which a column the call reads has its name more than once.

    Parquet files and pandas frames may repeat a column name; reading such a
    column by name is ambiguous (pyarrow raises KeyError, pandas returns a
    frame). ``used``: the names the call reads.
    """
    counts = Counter(names)
    dup = sorted(n for n in set(used) if counts[n] > 1)  # type: ignore[call-overload]
    if dup:
        raise DataError(f"column '{dup[0]}' appears {counts[dup[0]]} times in the input; "
                        "give each column its own name")

