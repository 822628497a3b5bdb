"""Exceptions raised by distcal."""


class DataError(ValueError):
    """Input data that cannot be calibrated.

    The message names the column, the problem and how many rows have it,
    e.g. ``column 'label': 3 rows are outside [0, 1]``.
    """


class ModelError(Exception):
    """A model directory that is missing, damaged or not a distcal model."""


class UsageError(Exception):
    """Bad command-line usage, or an existing output without --overwrite (exit 2)."""
