"""The command's one JSON line on stdout: standard JSON, nothing a strict parser refuses.

Python's ``json`` writes NaN and ±inf as ``NaN``/``Infinity``, which no
standard JSON parser reads (``jq``, JavaScript's ``JSON.parse``, Go). A
non-finite number is written as null with the reason next to it
(``"why_null": {field: reason}``), and a segment key that is ±inf or NaN as
the string "Infinity", "-Infinity" or "NaN" (null is the null key).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["standard_json", "key_value"]

# Why a number of the JSON line is null, for the fields where it is expected.
_WHY = {("threshold", "inf"): "+inf: no score threshold beats the rule printed by predict_none "
                              "(true: no row positive; false: only rows scored +inf)",
        ("auc", "nan"): "undefined: the rows hold one class only (or no weight)"}


def _nonfinite(v: float) -> str:
    return "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"


def standard_json(value: Any) -> Any:
    """``value`` as standard JSON can hold it: no NaN, Infinity or -Infinity.

    A non-finite number becomes null, and the dict holding it gains
    ``"why_null": {field: reason}`` (as report.json says why in its notes);
    numpy scalars become Python numbers.
    """
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        why: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(v, (float, np.floating)) and not math.isfinite(v):
                kind = _nonfinite(float(v))
                why[str(k)] = _WHY.get((str(k), kind), {"nan": "not a number (NaN)",
                                                        "inf": "+infinity",
                                                        "-inf": "-infinity"}[kind])
                out[str(k)] = None
            else:
                out[str(k)] = standard_json(v)
        if why:
            out["why_null"] = why
        return out
    if isinstance(value, (list, tuple, np.ndarray)):
        return [standard_json(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def key_value(v: Any) -> Any:
    """A segment key as JSON holds it without loss: ±inf and NaN keys as the strings
    "Infinity", "-Infinity", "NaN" (null is the null key)."""
    if isinstance(v, (float, np.floating)) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else "Infinity" if v > 0 else "-Infinity"
    return v
