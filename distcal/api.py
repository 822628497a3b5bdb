"""``distcal.fit``: one entry point for every method and engine."""

from __future__ import annotations

from typing import Any

from .core.histogram import fit_histogram
from .core.isotonic import fit_isotonic
from .core.sigmoid import fit_sigmoid
from .core.validate import check_on_invalid
from .engines import get_engine, resolve_engine
from .model import CalibrationModel

__all__ = ["fit"]

_METHOD_PARAMS = {
    "isotonic": {"increasing": True, "interpolation": "linear", "y_min": None, "y_max": None},
    "sigmoid": {},
    "histogram": {"n_bins": 10, "strategy": "uniform"},
}
_ALL_METHOD_PARAMS = {k for p in _METHOD_PARAMS.values() for k in p}


def _method_params(method: str, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    if method not in _METHOD_PARAMS:
        raise ValueError(f"method must be one of {tuple(_METHOD_PARAMS)}, got {method!r}")
    # Everything else is for the engine (e.g. memory_rows locally, n_ranges on
    # Spark), which rejects what it does not know.
    engine_opts = {k: given.pop(k) for k in list(given) if k not in _ALL_METHOD_PARAMS}
    unknown = set(given) - set(_METHOD_PARAMS[method])
    if unknown:
        raise TypeError(f"unknown parameter(s) for method {method!r}: {sorted(unknown)}")
    params = {**_METHOD_PARAMS[method], **given}
    if method == "isotonic":
        if params["increasing"] not in (True, False, "auto"):
            raise ValueError("increasing must be True, False or 'auto'")
        if params["interpolation"] not in ("linear", "step"):
            raise ValueError("interpolation must be 'linear' or 'step'")
        for k in ("y_min", "y_max"):
            if params[k] is not None:
                params[k] = float(params[k])
        if (params["y_min"] is not None and params["y_max"] is not None
                and params["y_min"] > params["y_max"]):
            raise ValueError("y_min must not exceed y_max")
    if method == "histogram":
        if params["strategy"] not in ("uniform", "quantile"):
            raise ValueError("strategy must be 'uniform' or 'quantile'")
        n_bins = params["n_bins"]
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    return params, engine_opts


def fit(data: Any, method: str = "isotonic", score_col: str = "score", label_col: str = "label",
        weight_col: str | None = None, engine: str = "auto", on_invalid: str = "raise",
        **method_params: Any) -> CalibrationModel:
    """Fit a calibration map of ``label`` on ``score``.

    ``data``: pandas DataFrame, pyarrow Table, Parquet path, Spark or Dask
    DataFrame. ``method``: "isotonic" (``increasing``, ``interpolation``,
    ``y_min``, ``y_max``), "sigmoid" or "histogram" (``n_bins``,
    ``strategy``). Bad rows raise :class:`~distcal.DataError` unless
    ``on_invalid="drop"``. See API.md for the exact contract.

    Example::

        >>> import pandas as pd, distcal
        >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
        >>> distcal.fit(df, interpolation="step").mapping()
        [(0.7, 1.0), (0.3, 0.5), (0.1, 0.0)]
    """
    check_on_invalid(on_invalid)
    params, engine_opts = _method_params(method, dict(method_params))
    columns = {"score": score_col, "label": label_col, "weight": weight_col}
    engine_impl = get_engine(resolve_engine(data, engine))
    blocks = None
    with engine_impl.open_ranges(data, columns, on_invalid=on_invalid,
                                 finite_scores=method in ("sigmoid", "histogram"),
                                 passes=1 if method == "isotonic" else 3,
                                 **engine_opts) as ranges:
        if method == "isotonic":
            blocks, direction = fit_isotonic(ranges.map, params["increasing"], params["y_min"],
                                             params["y_max"], spearman_rows=ranges.spearman_rows)
            params["increasing_"] = direction
        elif method == "sigmoid":
            a, b = fit_sigmoid(ranges.map)
            params.update(a=a, b=b)
        else:
            edges, bin_prob, blocks = fit_histogram(ranges.map, params["n_bins"],
                                                    params["strategy"])
            params.update(edges=edges.tolist(), bin_prob=bin_prob.tolist())
        return CalibrationModel(method, params, blocks, n_rows=ranges.n_rows,
                                weight_total=ranges.weight_total,
                                dropped_rows=ranges.dropped_rows, columns=columns)
