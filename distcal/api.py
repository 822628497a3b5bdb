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
    with engine_impl.open_ranges(data, columns, on_invalid=on_invalid,
                                 finite_scores=method in ("sigmoid", "histogram"),
                                 passes=1 if method == "isotonic" else 3,
                                 **engine_opts) as ranges:
        return _fit_on_ranges(ranges, ranges.map, method, params, columns)


def _fit_on_ranges(ranges: Any, map_ranges: Any, method: str, params: dict[str, Any],
                   columns: dict[str, str | None]) -> CalibrationModel:
    blocks = None
    if method == "isotonic":
        blocks, direction = fit_isotonic(map_ranges, params["increasing"], params["y_min"],
                                         params["y_max"], spearman_rows=ranges.spearman_rows)
        params["increasing_"] = direction
    elif method == "sigmoid":
        a, b = fit_sigmoid(map_ranges)
        params.update(a=a, b=b)
    else:
        edges, bin_prob, blocks = fit_histogram(map_ranges, params["n_bins"], params["strategy"])
        params.update(edges=edges.tolist(), bin_prob=bin_prob.tolist())
    return CalibrationModel(method, params, blocks, n_rows=ranges.n_rows,
                            weight_total=ranges.weight_total,
                            dropped_rows=ranges.dropped_rows, columns=columns)


def fit_and_threshold(data: Any, method: str = "isotonic", score_col: str = "score",
                      label_col: str = "label", weight_col: str | None = None,
                      cost_fp: float = 1.0, cost_fn: float = 1.0, engine: str = "auto",
                      on_invalid: str = "raise", **method_params: Any) -> tuple[Any, Any]:
    """A calibration map and the cost-optimal threshold on the scores, from one shuffle.

    Returns ``(model, threshold_result)``, equal to :func:`fit` and
    :func:`distcal.optimal_threshold` called separately. The threshold's
    segment summary rides along with the first pass over the score ranges,
    so an isotonic fit and its threshold cost one range shuffle on a
    cluster.
    """
    from .core.threshold import EMPTY, loss_per_score, merge_segments, summarise_segment
    from .threshold import result_from_segment

    check_on_invalid(on_invalid)
    params, engine_opts = _method_params(method, dict(method_params))
    columns = {"score": score_col, "label": label_col, "weight": weight_col}
    engine_impl = get_engine(resolve_engine(data, engine))
    cost_fp, cost_fn = float(cost_fp), float(cost_fn)

    def segment(t: Any) -> Any:
        return summarise_segment(t.score, loss_per_score(t, cost_fp, cost_fn), t.weight,
                                 t.positives)

    with engine_impl.open_ranges(data, columns, on_invalid=on_invalid,
                                 finite_scores=method in ("sigmoid", "histogram"),
                                 passes=1 if method == "isotonic" else 3,
                                 **engine_opts) as ranges:
        segments: list = []

        def map_ranges(fn: Any) -> list:
            if segments:
                return ranges.map(fn)
            both = ranges.map(lambda t: (fn(t), segment(t)))
            segments.extend(b[1] for b in both)
            return [b[0] for b in both]

        model = _fit_on_ranges(ranges, map_ranges, method, params, columns)
        seg = EMPTY
        for part in segments:
            seg = merge_segments(seg, part)
        return model, result_from_segment(seg, cost_fp, cost_fn, False, ranges.n_rows,
                                          ranges.dropped_rows)
