"""Row validation: which rows are usable, and a message naming every problem.

Rules: a score is a real number (never complex, a date or a duration:
:func:`is_real_dtype`), ±inf allowed (not for sigmoid), never NaN/null;
a label is a number in [0, 1]; a weight is finite and >= 0; a probability
(evaluation) is in [0, 1]; a per-row loss is finite. Text in a numeric
column is a row problem too. Counts accumulate over batches so that the
message gives totals for the whole input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import DataError

__all__ = ["RowChecker", "ROLES", "rules", "check_vector_lengths", "is_real_dtype", "as_scores",
           "check_unique_columns"]

# The roles a column can play ("prob:NAME" when several probability columns
# are evaluated together).
ROLES = ("score", "prob", "label", "loss", "weight")


def _role_rank(role: str) -> int:
    if role in ("score", "prob") or role.startswith("prob:"):
        return 0
    return 1 if role in ("label", "loss") else 2


def rules(role: str, finite_scores: bool = False) -> list[tuple[str, str]]:
    """The checks of a role, in message order: (problem as worded, kind).

    Kinds: "text" (text in a numeric column), "null" (null or NaN), "inf",
    "range01" (outside [0, 1]), "negative". Every engine evaluates these
    same rules, so the messages are the same everywhere.
    """
    out = [("are text, not numbers", "text"), ("are null or NaN", "null")]
    if role == "score" and finite_scores:
        out.append(("are infinite (this method needs finite scores)", "inf"))
    elif role in ("label", "prob") or role.startswith("prob:"):
        out.append(("are outside [0, 1]", "range01"))
    elif role == "weight":
        out += [("are infinite", "inf"), ("are negative", "negative")]
    elif role == "loss":
        out.append(("are infinite", "inf"))
    return out


@dataclass
class RowChecker:
    """Checks batches of columns and remembers the problem counts.

    ``columns`` maps a role (see ROLES) to the user's column name;
    ``finite_scores`` makes infinite scores a problem (Platt scaling).
    """

    columns: dict[str, str]
    finite_scores: bool = False
    problems: Counter[tuple[str, str]] = field(default_factory=Counter)

    def check(self, arrays: dict[str, np.ndarray],
              text: dict[str, np.ndarray] | None = None) -> np.ndarray | None:
        """Return a mask of valid rows, or None when every row is valid.

        ``arrays`` maps roles to float64 arrays (null already NaN); ``text``
        maps roles to masks of rows whose value was text.
        """
        bad = None

        def flag(role: str, problem: str, mask: np.ndarray) -> None:
            nonlocal bad
            k = int(np.count_nonzero(mask))
            if k:
                self.problems[(role, problem)] += k
                bad = mask if bad is None else (bad | mask)

        text = text or {}
        for role, values in arrays.items():
            t = text.get(role)
            for problem, kind in rules(role, self.finite_scores):
                if kind == "text":
                    if t is not None:
                        flag(role, problem, t)
                elif kind == "null":
                    flag(role, problem, np.isnan(values) & ~t if t is not None
                         else np.isnan(values))
                elif kind == "inf":
                    flag(role, problem, np.isinf(values))
                elif kind == "range01":
                    flag(role, problem, (values < 0.0) | (values > 1.0))
                elif kind == "negative":
                    flag(role, problem, values < 0.0)
        if bad is None:
            return None
        return ~bad

    def message(self) -> str:
        parts = []
        # A fixed order (values, labels, weights), whatever order batches found them in.
        for role in sorted(self.columns, key=_role_rank):
            for problem, _ in rules(role, self.finite_scores):
                k = self.problems.get((role, problem), 0)
                if k:
                    noun = "row" if k == 1 else "rows"
                    verb = problem if k != 1 else problem.replace("are ", "is ", 1)
                    parts.append(f"column '{self.columns[role]}': {k} {noun} {verb}")
        return "; ".join(parts)

    def raise_if_invalid(self, on_invalid: str) -> None:
        """Raise :class:`DataError` for the problems seen, unless dropping."""
        if self.problems and on_invalid == "raise":
            raise DataError(self.message() + " (pass on_invalid='drop' to drop such rows)")



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
    timedelta64 values are a :class:`DataError` (they would silently become
    their real part or their nanoseconds); text that is not a number is a
    ``ValueError`` as numpy says it.
    """
    arr = np.asarray(scores)
    if arr.dtype.kind in "cMm" or (arr.dtype.kind == "O" and any(
            isinstance(v, (complex, np.complexfloating, np.datetime64, np.timedelta64))
            for v in arr.ravel()[:1000])):
        what = {"c": "complex numbers", "M": "dates (datetime64)",
                "m": "durations (timedelta64)"}.get(arr.dtype.kind, "complex numbers or dates")
        raise DataError(f"{name}: {arr.size} {'value is' if arr.size == 1 else 'values are'} "
                        f"{what}; scores must be real numbers")
    return np.atleast_1d(arr.astype(np.float64))


def check_unique_columns(names: list[str], used: object) -> None:
    """Refuse an input in which a column the call reads has its name more than once.

    Parquet files and pandas frames may repeat a column name; reading such a
    column by name is ambiguous (pyarrow raises KeyError, pandas returns a
    frame). ``used``: the names the call reads.
    """
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    dup = sorted(n for n in set(used) if counts.get(n, 0) > 1)  # type: ignore[call-overload]
    if dup:
        raise DataError(f"column '{dup[0]}' appears {counts[dup[0]]} times in the input; "
                        "give each column its own name")

