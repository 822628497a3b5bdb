"""Exceptions raised by distcal, and the messages shared by every engine.

``DataError`` and ``ModelError`` are the user's input (exit 2 on the command
line), as are ``UsageError`` (bad options), ``OutputExistsError`` (an
existing output without ``overwrite``) and ``EngineSetupError`` (a cluster
whose workers cannot run distcal). Any other exception is a bug or an
environment failure (exit 1).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DataError", "ModelError", "UsageError", "ParameterError", "column_not_found",
           "column_type", "output_column_exists", "unexpected_arguments", "sums_overflow",
           "OutputPathError", "VECTORS_EXPECTED", "EngineSetupError", "ParameterTypeError",
           "short_repr"]

# What a column read with ``score_index`` must hold (column_type's "expected").
VECTORS_EXPECTED = "vectors (lists or arrays) of numbers, since score_index is given"


class DataError(ValueError):
    """Input data that cannot be calibrated.

    The message names the column, the problem and how many rows have it,
    e.g. ``column 'label': 3 rows are outside [0, 1]``.
    """


class ModelError(Exception):
    """A model directory that is missing, damaged or not a distcal model."""


class UsageError(Exception):
    """Bad command-line usage or options (exit 2)."""


class EngineSetupError(RuntimeError):
    """The engine's workers cannot run distcal (a module missing on Spark's executors).

    The message names the missing module, the workers' own exception and
    how to fix it; it is the environment, not the data (exit 2).
    """


class ParameterError(ValueError):
    """A parameter value that cannot be used (raised before any data is read)."""


class ParameterTypeError(ParameterError, TypeError):
    """A parameter of the wrong type (``overwrite="no"``): both a ``TypeError`` and a
    :class:`ParameterError` (a ``ValueError``), so either ``except`` catches it."""


class OutputPathError(ValueError):
    """An output path that cannot be written: its parent is a file, its name is too long."""


def short_repr(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a message naming a user's value."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def sums_overflow(what: str = "weights", column: str | None = None,
                  n_rows: int | None = None) -> DataError:
    """Finite values whose sums exceed the largest double (weights near 1e308); ``column``
    and ``n_rows``: the weight column and its rows, when known."""
    where = f"column '{column}' (weight): " if column is not None else ""
    rows = f" of {n_rows} row{'s' if n_rows != 1 else ''}" if n_rows is not None else ""
    return DataError(f"{where}the {what}{rows} are too large: their sums overflow float64 "
                     "(the largest float is 1.8e308); divide them by a constant")


def sums_underflow() -> DataError:
    """Positive weights so small that products of two of them (AUC's pairs, the calibration
    tests' w^2) underflow float64 and lose their digits (weights below about 1e-151)."""
    return DataError("the weights are too small: products of two of them underflow float64 "
                     "(below 2.2e-308); multiply them by a constant")


def column_not_found(name: str, role: str, available: Iterable[str]) -> DataError:
    """The one message for a missing column, whatever the engine."""
    return DataError(f"column '{name}' ({role}) not found; the input has columns "
                     f"{list(available)}")


def column_type(name: str, role: str | None, type_name: str,
                expected: str = "numbers") -> DataError:
    """The one message for a column of the wrong type, whatever the engine (``role`` None:
    one of several per-class score columns)."""
    where = "" if role is None else f" ({role})"
    return DataError(f"column '{name}'{where} has type {type_name}; expected {expected}")


def unexpected_arguments(function: str, names: Iterable[str]) -> TypeError:
    """``TypeError`` for keyword arguments a public function does not take."""
    names = sorted(names)
    plural = "s" if len(names) > 1 else ""
    return TypeError(f"{function}() got unexpected keyword argument{plural} "
                     + ", ".join(repr(n) for n in names))


def output_column_exists(name: str) -> DataError:
    """The output column would overwrite an input column."""
    return DataError(f"output column '{name}' already exists in the input; choose another "
                     "output column name")
