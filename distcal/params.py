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
from .errors import ParameterError, unexpected_arguments

__all__ = ["method_params", "check_fit_params", "split_engine_options", "check_n_bins",
           "check_strategy",
           "check_finite", "check_on_invalid", "check_score_index"]


def check_on_invalid(on_invalid: str) -> str:
    if on_invalid not in ("raise", "drop"):
        raise ParameterError(f"on_invalid must be 'raise' or 'drop', got {on_invalid!r}")
    return on_invalid


def check_score_index(score_index: Any) -> int | None:
    """None (a column of numbers) or the element of each vector to read, an int >= 0."""
    if score_index is None:
        return None
    if (isinstance(score_index, bool) or not isinstance(score_index, (int, np.integer))
            or score_index < 0):
        raise ParameterError(f"score_index must be None or an integer >= 0, got {score_index!r}")
    return int(score_index)


def check_n_bins(n_bins: Any, name: str = "n_bins") -> int:
    """A positive integer, at most 1,000,000 (more bins than that is a mistake)."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or not 1 <= n_bins <= 1_000_000:
        raise ParameterError(f"{name} must be an integer from 1 to 1000000, got {n_bins!r}")
    return n_bins


def check_strategy(strategy: Any) -> str:
    if strategy not in STRATEGIES:
        raise ParameterError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    return str(strategy)


def check_finite(value: Any, name: str, *, optional: bool = False) -> float | None:
    """``value`` as a finite float (None passes when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
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
        if params["increasing"] not in (True, False, "auto") or \
                isinstance(params["increasing"], (int, float)) and \
                not isinstance(params["increasing"], bool):
            raise ParameterError(f"increasing must be True, False or 'auto', got "
                             f"{params['increasing']!r}")
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
        check_n_bins(params["n_bins"])
    if method == "modl":
        params["max_groups"] = check_max_groups(params["max_groups"])
    return params


def check_max_groups(value: Any) -> int:
    """MODL's ``max_groups``: an int >= 1 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"max_groups must be an integer >= 1, got {value!r}")
    return int(value)


def check_fit_params(method: Any, given: dict[str, Any]) -> None:
    """The method name and the values of its parameters in ``given``, before any data is read.

    Names that are not the method's parameters are left for
    :func:`split_engine_options` (engine options, or a ``TypeError``).
    """
    if method == "temperature":
        return
    if not isinstance(method, str) or method not in METHODS:
        method_params(method, {})  # raises the one message
    own = METHOD_PARAMS[method]
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
