"""Checking parameters before any data is read.

Every public entry point validates its parameters here first, so a bad
value fails at once with the parameter's name in a ``ValueError``, and an
unknown keyword argument is a ``TypeError`` naming the function (as Python
itself would say it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .defaults import INTERPOLATIONS, METHOD_PARAMS, METHODS, STRATEGIES
from .errors import DataError, ParameterError, ParameterTypeError, short_repr, unexpected_arguments

__all__ = ["method_params", "check_fit_params", "split_engine_options", "check_n_bins",
           "check_strategy", "check_bool", "check_column_name", "check_distinct_columns",
           "check_roles",
           "check_finite", "check_on_invalid", "check_score_index"]


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a Python bool; only ``True``/``False`` (numpy bools too) are accepted.

    Anything else (``"no"``, ``0``, ``None``) is a ``TypeError`` naming the
    parameter: a string is truthy, so ``overwrite="no"`` would replace.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ParameterTypeError(f"{name} must be True or False, got {short_repr(value, 80)} "
                             f"({type(value).__name__})")


def check_column_name(value: Any, name: str, *, optional: bool = False) -> str | None:
    """A column name: a non-empty string (None passes when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ParameterTypeError(f"{name} must be a column name (a non-empty string), got "
                                 f"{short_repr(value, 80)}")
    return value


def check_roles(*, score_col: Any, label_col: Any, weight_col: Any = None,
                score_cols: Any = None, score: str = "score") -> None:
    """The column parameters of a fit or an evaluation, before any data is read.

    Names are non-empty strings (``score_col=None`` or a list is a
    ``TypeError`` naming the parameter); ``score_cols`` (``prob_cols``) is
    a list of them and replaces ``score_col``; no column is given twice, in
    one role or in two (:func:`check_distinct_columns`). ``score`` names
    the role: "score" (fit) or "prob" (evaluate).
    """
    if score_cols is None:
        check_column_name(score_col, f"{score}_col")
    elif not isinstance(score_cols, (list, tuple)) or not score_cols:
        raise ParameterTypeError(f"{score}_cols must be a list of column names, got "
                                 f"{short_repr(score_cols, 80)}")
    else:
        for c in score_cols:
            check_column_name(c, f"each of {score}_cols")
    check_column_name(label_col, "label_col")
    check_column_name(weight_col, "weight_col", optional=True)
    check_distinct_columns({f"{score}_cols" if score_cols is not None else f"{score}_col":
                            list(score_cols) if score_cols is not None else score_col,
                            "label_col": label_col, "weight_col": weight_col})


def check_distinct_columns(roles: dict[str, Any]) -> None:
    """Refuse a column given twice, in one role or in two (``score_cols=["a", "a"]``,
    a label column that is also a score column): a :class:`~distcal.DataError`.

    ``roles`` maps a role to a column name, a list of names, or None.
    """
    seen: dict[str, str] = {}
    for role, value in roles.items():
        names = value if isinstance(value, (list, tuple)) else [value]
        for n in names:
            if n is None:
                continue
            if n in seen:
                where = (f"twice in {role}" if seen[n] == role
                         else f"as {seen[n]} and as {role}")
                raise DataError(f"column '{n}' is given {where}; each column plays one role once")
            seen[n] = role


def check_on_invalid(on_invalid: str) -> str:
    if on_invalid not in ("raise", "drop"):
        raise ParameterError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    return on_invalid


def check_int(value: Any, low: float, high: float, rule: str) -> int:
    """``value`` as an int in [low, high] (numpy integers too, not a bool); else the
    ParameterError ``"<rule>, got <value>"``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not low <= value <= high:
        raise ParameterError(f"{rule}, got {value!r}")
    return int(value)


def check_score_index(score_index: Any) -> int | None:
    """None (a column of numbers) or the element of each vector to read, an int >= 0."""
    if score_index is None:
        return None
    return check_int(score_index, 0, math.inf, "score_index must be None or an integer >= 0")


def check_n_bins(n_bins: Any, name: str = "n_bins") -> int:
    """A positive integer (numpy integers too), at most 1,000,000 (more bins is a mistake)."""
    return check_int(n_bins, 1, 1_000_000, f"{name} must be an integer from 1 to 1000000")


def check_strategy(strategy: Any) -> str:
    if strategy not in STRATEGIES:
        raise ParameterError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    return str(strategy)


def check_finite(value: Any, name: str, *, optional: bool = False) -> float | None:
    """``value`` as a finite float (None passes when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise ParameterError(f"{name} must be a finite number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ParameterError(f"{name} must be a finite number, got {value!r}")
    return v


def method_params(method: str, given: dict[str, Any]) -> dict[str, Any]:
    """The full, checked parameters of ``method`` (defaults filled in)."""
    if method not in METHODS:
        raise ParameterError(f"method must be one of {METHODS} (or, for multiclass scores, "
                             f"'temperature'), got {method!r}")
    params = {**METHOD_PARAMS[method], **given}
    if method == "isotonic":
        inc = params["increasing"]
        if isinstance(inc, (bool, np.bool_)):
            params["increasing"] = bool(inc)  # numpy's bool is not JSON
        elif not (isinstance(inc, str) and inc == "auto"):
            raise ParameterError(f"increasing must be True, False or 'auto', got {inc!r}")
        if params["interpolation"] not in INTERPOLATIONS:
            raise ParameterError(f"interpolation must be one of {INTERPOLATIONS}, got "
                             f"{params['interpolation']!r}")
        for k in ("y_min", "y_max"):
            params[k] = check_finite(params[k], k, optional=True)
            if params[k] is not None and not 0.0 <= params[k] <= 1.0:
                raise ParameterError(f"{k} must lie in [0, 1] (a probability), got "
                                     f"{params[k]!r}")
        if (params["y_min"] is not None and params["y_max"] is not None
                and params["y_min"] > params["y_max"]):
            raise ParameterError(f"y_min must not exceed y_max, got y_min={params['y_min']!r} > "
                             f"y_max={params['y_max']!r}")
    if method == "histogram":
        check_strategy(params["strategy"])
        params["n_bins"] = check_n_bins(params["n_bins"])
    if method == "modl":
        params["max_groups"] = check_max_groups(params["max_groups"])
    return params


def check_max_groups(value: Any) -> int:
    """MODL's ``max_groups``: an int >= 1 (not a bool)."""
    return check_int(value, 1, math.inf, "max_groups must be an integer >= 1")


def check_fit_params(method: Any, given: dict[str, Any]) -> None:
    """The method name and the values of its parameters in ``given``, before any data is read.

    Names that are not the method's parameters are left for
    :func:`split_engine_options` (engine options, or a ``TypeError``).
    """
    if method == "temperature":
        return
    own = METHOD_PARAMS[method] if method in METHODS else {}  # (not a method: raises)
    method_params(method, {k: v for k, v in given.items() if k in own})


def split_engine_options(function: str, method: str | None, given: dict[str, Any],
                         engine_options: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``**kwargs`` into method parameters and engine options; reject the rest.

    A parameter of another method (``n_bins`` with ``method="isotonic"``)
    and a name no one knows are both a ``TypeError`` naming ``function``.
    """
    own = set(METHOD_PARAMS[method]) if method is not None and method in METHOD_PARAMS else set()
    engine_options = set(engine_options)
    unknown = set(given) - own - engine_options
    if unknown:
        raise unexpected_arguments(function, unknown)
    return ({k: v for k, v in given.items() if k in own},
            {k: v for k, v in given.items() if k in engine_options})
