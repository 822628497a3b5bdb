"""``distcal.fit`` and ``distcal.fit_and_threshold``: every method on every engine."""

from __future__ import annotations

from typing import Any

from . import params as checks
from .core.threshold import EMPTY, loss_mass, loss_per_score, merge_segments, summarise_segment
from .defaults import DEFAULTS, METHOD_PARAMS, METHODS
from .engines import get_engine, resolve_engine
from .errors import DataError, ParameterError, unexpected_arguments
from .keyed_fit import FINITE_SCORE_METHODS
from .logs import log
from .model import CalibrationModel
from .params import check_finite, check_on_invalid, split_engine_options
from .summary import summary_source
from .threshold import ThresholdResult, result_from_segment

__all__ = ["fit", "fit_and_threshold"]


def fit(data: Any, method: str = DEFAULTS.method, score_col: str = DEFAULTS.score_col,
        label_col: str = DEFAULTS.label_col, weight_col: str | None = DEFAULTS.weight_col,
        engine: str = DEFAULTS.engine, on_invalid: str = DEFAULTS.on_invalid, *,
        score_cols: list[str] | None = None, score_index: int | None = None,
        by: str | list[str] | None = None, min_segment_weight: float = 0.0,
        **method_params: Any) -> Any:
    """Fit a calibration map of ``label`` on ``score``.

    Parameters
    ----------
    data : pandas.DataFrame, pyarrow.Table, str or path, Spark or Dask DataFrame
        The rows; a path names a Parquet file or dataset directory. Or
        summaries of rows (:func:`distcal.summarize`): a
        :class:`~distcal.Summary`, a saved summary's directory, or a list of
        them, merged (on the cluster with ``engine="spark"`` or ``"dask"``);
        the columns and ``by`` are then the summaries' own, and the model
        equals the fit of the summarised rows (not for temperature scaling).
    method : {"isotonic", "sigmoid", "histogram", "modl", "beta", "venn_abers", "temperature"}
        Isotonic regression (Pool Adjacent Violators, parameters
        ``increasing=True|False|"auto"``,
        ``interpolation="linear"|"step"|"centered"``, ``y_min``, ``y_max``),
        Platt's sigmoid, histogram binning (``n_bins=10``,
        ``strategy="uniform"|"quantile"``), MODL's Bayes-optimal bins
        (0/1 labels, unit weights, ``max_groups=100_000``;
        ``params["cost"]``, ``params["groups"]``: docs/modl.md), beta
        calibration (scores in [0, 1]; ``params`` a, b, c) or the inductive
        Venn-Abers predictor (0/1 labels; ``model.predict_interval``):
        docs/methods.md. "temperature" is for multiclass scores; a
        ``score_col`` of numbers is then one binary logit s per row, the
        pair (-s, s) as in scikit-learn (as ``score_cols=[score_col]``).
    score_col, label_col, weight_col : str
        Column names; labels are 0/1 or rates in [0, 1]; weights finite and
        >= 0 (None: all 1); for Venn-Abers, weights are counts of rows (its
        test row weighs 1: docs/methods.md). A ``score_col`` of vectors (lists or arrays of K
        per-class scores) fits a multiclass calibration, with labels 0..K-1.
    score_cols : list of str, optional
        Multiclass scores as one column per class.
    score_index : int, optional
        ``score_col`` holds vectors (pyarrow lists, pandas lists or arrays,
        Spark ``ArrayType`` or pyspark.ml ``VectorUDT``, e.g. a classifier's
        ``probability``) and element ``score_index`` of each is the score of
        a binary calibration (MLlib's ``featureIndex``). Vectors of unequal
        length, or an index out of range, are a :class:`~distcal.DataError`.
        Not with ``by`` (a :class:`~distcal.errors.ParameterError`).
    by : str or list of str, optional
        Fit one map per distinct value (tuple) of these columns, plus the
        global map, in one pass (:mod:`distcal.keyed_fit`, docs/segments.md).
        Rows with a null ``by`` value count in the global map only. Combines
        with multiclass scores (one multiclass model per segment).
    min_segment_weight : float
        Segments with less total weight use the global map (``by`` only).
    engine : {"auto", "local", "spark", "dask"}
        "auto" picks the engine from the type of ``data``.
    on_invalid : {"raise", "drop"}
        Bad rows raise :class:`~distcal.DataError`, or are dropped and
        counted in ``model.dropped_rows``.
    **method_params
        The method's parameters above, and engine options (local:
        ``memory_rows``, ``batch_rows``, ``chunk_rows``; Spark: ``n_ranges``,
        ``sample_rows``, ``range_rows``, and ``combine``, which is ignored
        with a ``FutureWarning``; Dask: ``n_ranges``,
        ``samples_per_range``, ``range_rows``).

    Returns
    -------
    CalibrationModel
        For a binary score without ``by``; otherwise a
        :class:`~distcal.KeyedModel`: one map per key (segment, class) and
        their combiner (one-vs-rest normalised as scikit-learn's
        CalibratedClassifierCV, or temperature scaling; segments falling
        back to the global maps).

    Raises
    ------
    DataError
        Bad rows, missing columns, wrong column types, or no row with weight > 0.
    ValueError
        A bad parameter value (before any data is read).
    TypeError
        An unknown keyword argument.

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
    >>> distcal.fit(df, interpolation="step").mapping()
    [(0.7, 1.0), (0.3, 0.5), (0.1, 0.0)]
    >>> distcal.fit(df, method="histogram", n_bins=2).predict([0.2, 0.8])
    array([0.33333333, 1.        ])
    """
    check_on_invalid(on_invalid)
    score_index = checks.check_score_index(score_index)
    checks.check_roles(score_col=score_col, score_cols=score_cols, label_col=label_col,
                       weight_col=weight_col)
    checks.check_fit_params(method, method_params)  # before anything reads the data
    source = summary_source(data)
    if source is not None:  # summaries: the columns and segments they were made from
        if method == "temperature" or score_cols is not None or score_index is not None:
            raise ParameterError("a summary holds one score per row: temperature scaling "
                                 "and multiclass scores need the rows themselves")
        score_col, label_col, weight_col, by = source.own_columns(
            "fit", score_col=(score_col, DEFAULTS.score_col),
            label_col=(label_col, DEFAULTS.label_col), weight_col=(weight_col, None),
            by=(by, None))
        data = source
    name = resolve_engine(data, engine)
    # Unknown keyword arguments fail before anything (even a schema) is read.
    known = {k for p in METHOD_PARAMS.values() for k in p} | get_engine(name).options
    if set(method_params) - known:
        raise unexpected_arguments("fit", set(method_params) - known)
    if by is not None and score_index is not None:
        raise ParameterError("by= reads a plain score column; score_index cannot be "
                             "combined with by= in this version")
    vectors = get_engine(name).is_vector_column(data, score_col)
    if method == "temperature" and score_cols is None and score_index is None and not vectors:
        score_cols = [score_col]  # one logit s per row: the pair (-s, s), as scikit-learn
    multiclass = source is None and score_index is None and (
        score_cols is not None or vectors)
    model, _ = _fit_keyed(data, name, method, score_col, score_cols, label_col, weight_col, by,
                          min_segment_weight, multiclass, on_invalid, method_params,
                          score_index=score_index)
    return model


def _fit_keyed(data: Any, engine: str, method: str, score_col: str, score_cols: Any,
               label_col: str, weight_col: str | None, by: Any, min_segment_weight: Any,
               multiclass: bool, on_invalid: str, method_params: dict[str, Any], *,
               score_index: int | None = None, ride: Any = None,
               caller: str = "fit") -> tuple[Any, list[Any]]:
    """Every fit: one keyed pass (:mod:`distcal.keyed_fit`); ``ride``: see ``fit_keyed``."""
    from .core.discretize import PROBLEMS
    from .core.keyed import KeySpec
    from .core.venn_abers import ZERO_ONE_LABELS
    from .keyed_fit import check_by, fit_keyed

    names = check_by(by, {"score": score_col if score_cols is None else None,
                          "label": label_col, "weight": weight_col,
                          **{f"score {c}": c for c in (score_cols or [])}},
                     min_segment_weight) if by is not None else []
    allowed = (*METHODS, "temperature") if multiclass else METHODS
    if method not in allowed:
        raise ParameterError(f"method must be one of {allowed}"
                             f"{' for multiclass scores' if multiclass else ''}, got {method!r}")
    impl = get_engine(engine)
    given, engine_opts = split_engine_options(caller, method, method_params, impl.options)
    params = checks.method_params(method, given) if method != "temperature" else {}
    if method == "modl" and weight_col is not None:
        raise DataError(f"column '{weight_col}' (weight): MODL counts rows; it takes no "
                        "weights (pass weight_col=None)")
    spec = KeySpec(score_col=None if score_cols is not None else score_col,
                   label_col=label_col, weight_col=weight_col, by=tuple(names),
                   score_cols=None if score_cols is None else tuple(score_cols),
                   multiclass=multiclass, per_class=method != "temperature",
                   score_index=score_index,
                   # (multiclass labels are class indices: each key's are 0/1)
                   zero_one_labels=None if multiclass else
                   {"modl": PROBLEMS[1], "venn_abers": ZERO_ONE_LABELS}.get(method))
    log.info("fit: method %s%s%s on the %s engine", method, " multiclass" if multiclass else "",
             f" by {names}" if names else "", engine)
    return fit_keyed(impl, data, spec, method, params, float(min_segment_weight), on_invalid,
                     engine_opts, ride=ride)


def fit_and_threshold(data: Any, method: str = DEFAULTS.method,
                      score_col: str = DEFAULTS.score_col, label_col: str = DEFAULTS.label_col,
                      weight_col: str | None = DEFAULTS.weight_col,
                      cost_fp: float = DEFAULTS.cost_fp, cost_fn: float = DEFAULTS.cost_fn,
                      engine: str = DEFAULTS.engine, on_invalid: str = DEFAULTS.on_invalid,
                      *, score_index: int | None = None,
                      **method_params: Any) -> tuple[CalibrationModel, ThresholdResult]:
    """A calibration map and the cost-optimal threshold on the scores, from one shuffle.

    Parameters
    ----------
    data, method, score_col, label_col, weight_col, engine, on_invalid, score_index
        As for :func:`fit`.
    **method_params
        As for :func:`fit`.
    cost_fp, cost_fn : float
        As for :func:`distcal.optimal_threshold`.

    Returns
    -------
    (CalibrationModel, ThresholdResult)
        Equal to :func:`fit` and :func:`distcal.optimal_threshold` called
        separately. The threshold's segment summary rides along with the
        first pass over the score ranges, so an isotonic fit and its
        threshold cost one range shuffle on a cluster. A method that needs
        finite scores (sigmoid, histogram, beta) with ``on_invalid="drop"``
        drops rows of score +-inf that the threshold keeps: when its fit
        dropped rows, the threshold is :func:`distcal.optimal_threshold`'s,
        from a pass of its own.

    Examples
    --------
    >>> import pandas as pd, distcal
    >>> df = pd.DataFrame({"score": [.1, .3, .5, .7, .9], "label": [0, 1, 0, 1, 1]})
    >>> model, best = distcal.fit_and_threshold(df, cost_fp=1, cost_fn=1)
    >>> best.threshold, best.cost
    (0.7, 1.0)
    """
    check_on_invalid(on_invalid)
    score_index = checks.check_score_index(score_index)
    checks.check_roles(score_col=score_col, label_col=label_col, weight_col=weight_col)
    checks.check_fit_params(method, method_params)
    given = data
    source = summary_source(data)
    if source is not None:  # a summary without segments: its columns
        if source.by or score_index is not None:
            raise ParameterError("fit_and_threshold takes a summary without by= columns and "
                                 "one score per row")
        data, score_col = source, str(source.columns["score"])
        label_col, weight_col = str(source.columns["label"]), source.columns["weight"]
    name = resolve_engine(data, engine)
    c_fp = check_finite(cost_fp, "cost_fp")
    c_fn = check_finite(cost_fn, "cost_fn")
    assert c_fp is not None and c_fn is not None
    model, parts = _fit_keyed(data, name, method, score_col, None, label_col, weight_col, None,
                              0.0, False, on_invalid, method_params, score_index=score_index,
                              ride=_ThresholdSummary(c_fp, c_fn), caller="fit_and_threshold")
    if method in FINITE_SCORE_METHODS and model.dropped_rows:  # (on_invalid="drop")
        from .threshold import optimal_threshold

        columns: dict[str, Any] = {} if source is not None else {
            "score_col": score_col, "label_col": label_col, "weight_col": weight_col,
            "score_index": score_index}
        return model, optimal_threshold(given, cost_fp=c_fp, cost_fn=c_fn, engine=name,
                                        on_invalid=on_invalid, **columns)
    seg = EMPTY
    for part in parts:
        seg = merge_segments(seg, part)
    return model, result_from_segment(seg, c_fp, c_fn, False, model.n_rows, model.dropped_rows)


class _ThresholdSummary:
    """The threshold summary of a range's (one key's) table."""

    def __init__(self, cost_fp: float, cost_fn: float):
        self.cost_fp, self.cost_fn = cost_fp, cost_fn

    def __call__(self, part: Any) -> Any:
        t = part.key_table(0)
        return summarise_segment(t.score, loss_per_score(t, self.cost_fp, self.cost_fn),
                                 loss_mass(t, self.cost_fp, self.cost_fn), t.weight, t.positives)
