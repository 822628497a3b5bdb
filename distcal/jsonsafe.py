"""Values as standard JSON holds them: what every ``to_dict`` and the command's JSON line write.

Python's ``json`` writes NaN and ±inf as ``NaN``/``Infinity``, which no
standard JSON parser reads (``jq``, JavaScript's ``JSON.parse``, Go). So
numpy scalars become Python numbers, a non-finite number becomes null
(and, where asked, the dict holding it gains ``"why_null": {field:
reason}``), and a segment key that is ±inf or NaN becomes the string
"Infinity", "-Infinity" or "NaN" (null is the null key), so that no key is
lost or mistaken for another.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["json_safe", "key_value", "WHY_NULL"]

# Why a field is null, where a non-finite value is expected (else the generic reason).
WHY_NULL = {
    ("threshold", "inf"): "+inf: no score threshold beats the rule printed by predict_none "
                          "(true: no row positive; false: only rows scored +inf)",
    ("threshold", "-inf"): "-inf: every row is predicted positive",
    ("auc", "nan"): "undefined: the rows hold one class only (or no weight)",
    **{(f, "nan"): "undefined: a per-row loss (loss_col) has no labels"
       for f in ("tp", "fp", "tn", "fn")}}
_GENERIC = {"nan": "not a number (NaN)", "inf": "+infinity", "-inf": "-infinity"}


def _nonfinite(v: Any) -> str | None:
    """"nan", "inf" or "-inf" for a non-finite float, else None."""
    if not isinstance(v, (float, np.floating)) or math.isfinite(v):
        return None
    return "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"


def _scalar(v: Any) -> Any:
    """numpy scalars as Python values; a value JSON cannot hold (a date) as its text."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    return v if v is None or isinstance(v, (str, int)) else str(v)


def _key(k: Any) -> Any:
    """A dict key as JSON writes it: text, or an integer (which ``json`` writes as text)."""
    if isinstance(k, (bool, np.bool_, int, np.integer)):
        return _scalar(k)
    return k if isinstance(k, str) else str(k)


def json_safe(value: Any, why: bool = False) -> Any:
    """``value`` as standard JSON holds it, item by item (dicts, lists, tuples, arrays,
    DataFrames as a list per column).

    ``why``: a dict holding a non-finite number gains ``"why_null"`` with
    the reason for each (:data:`WHY_NULL`, else "not a number (NaN)",
    "+infinity", "-infinity").
    """
    if isinstance(value, pd.DataFrame):
        return {_key(c): json_safe(value[c].tolist(), why) for c in value.columns}
    if isinstance(value, dict):
        out = {_key(k): json_safe(v, why) for k, v in value.items()}
        nulls = {str(k): WHY_NULL.get((str(k), kind), _GENERIC[kind])
                 for k, kind in ((k, _nonfinite(v)) for k, v in value.items()) if kind}
        if why and nulls:
            out["why_null"] = nulls
        return out
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_safe(v, why) for v in value]
    return _scalar(value)


def key_value(v: Any) -> Any:
    """A segment key as JSON holds it without loss: ±inf and NaN as the strings
    "Infinity", "-Infinity", "NaN" (None is the null key)."""
    kind = _nonfinite(v)
    if kind is not None:
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[kind]
    return _scalar(v)
